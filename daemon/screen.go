package daemon

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/dnsbl"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/daemon/smtpin"
)

// dnsblScreener asks the [smtp] dnsbl lists about each SMTP client before
// its greeting.
type dnsblScreener struct{ c *dnsbl.Checker }

// newScreener builds the lists of cfg, or nil when there are none.
func (d *Daemon) newScreener(cfg *config.Config) (smtpin.Screener, error) {
	s := cfg.SMTP
	if len(s.DNSBL) == 0 {
		return nil, nil
	}
	c := &dnsbl.Checker{Threshold: s.DNSBLThreshold, Timeout: s.DNSBLTimeout.Duration,
		DNS: resolver.NewExchanger(cfg.DNS.Resolver, s.DNSBLTimeout.Duration), Logger: d.log.With("part", "dnsbl"), Summarizer: &d.logSum}
	for _, l := range s.DNSBL {
		list := dnsbl.List{Zone: l.Zone, Weight: l.Weight}
		for _, r := range l.Replies {
			rg, err := dnsbl.ParseRange(r)
			if err != nil {
				return nil, fmt.Errorf("smtp.dnsbl %s: %w", l.Zone, err)
			}
			list.Replies = append(list.Replies, rg)
		}
		c.Lists = append(c.Lists, list)
	}
	return dnsblScreener{c}, nil
}

// Screen refuses a client at or above the threshold, naming the lists, and
// sends the mail of one listed below it to junk. Allow-lists that bring
// the score to zero or below leave it alone (still recorded).
func (s dnsblScreener) Screen(ctx context.Context, ip net.IP) smtpin.Screening {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return smtpin.Screening{}
	}
	v := s.c.Check(ctx, a.Unmap())
	out := smtpin.Screening{Listed: v.Summary()}
	switch {
	case v.Refuse:
		out.Refuse = fmt.Sprintf("Service unavailable; client [%s] blocked using %s", a.Unmap(), v.Blocking())
	case v.Score > 0:
		out.Junk = "client listed by " + v.Blocking()
	}
	return out
}
