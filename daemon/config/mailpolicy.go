package config

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// The keys about what the internet sends and expects, and their checks:
// DNS lists and the pregreet wait, the DMARC forwarders, TLS reports.

// DNSList is one [[smtp.dnsbl]] entry.
type DNSList struct {
	Zone string `toml:"zone"`
	// Weight counts toward the threshold when the list lists the client;
	// negative for an allow-list. Default 1.
	Weight int `toml:"weight"`
	// Replies are the answers that count as a listing: addresses, ranges
	// ("127.0.0.2-127.0.0.11") or CIDRs. Default: 127.0.0.2-127.0.0.255.
	Replies []string `toml:"replies"`
}

// TLSRPT configures the daily SMTP TLS reports (RFC 8460) this host sends
// to the domains it delivers to that ask for them.
type TLSRPT struct {
	Enabled *bool `toml:"enabled"`
	// Mailbox sends the reports and keeps their sent copies.
	Mailbox string `toml:"mailbox"`
	// Organization and Contact are the report's organization-name and
	// contact-info; defaults: hostname and postmaster@<first domain>.
	Organization string `toml:"organization"`
	Contact      string `toml:"contact"`
}

// maxDNSLists bounds the lists asked about each client.
const maxDNSLists = 20

// validateDNSBL checks the DNS lists and the pregreet wait: each zone a DNS
// name, listed once, each reply an IPv4 address, range or CIDR, the waits
// short enough that an honest client still gets its greeting.
func (c *Config) validateDNSBL(bad complain) {
	s := c.SMTP
	if s.PregreetWait.Duration > 30*time.Second || s.DNSBLTimeout.Duration <= 0 || s.DNSBLTimeout.Duration > 30*time.Second {
		bad("smtp.pregreet_wait must be at most 30s and smtp.dnsbl_timeout between 0 and 30s: senders wait for the greeting only so long")
	}
	if s.DNSBLThreshold < 1 {
		bad("smtp.dnsbl_threshold must be at least 1")
	}
	if len(s.DNSBL) > maxDNSLists {
		bad("smtp.dnsbl: %d lists; at most %d are asked about each client", len(s.DNSBL), maxDNSLists)
	}
	seen := map[string]bool{}
	for i, l := range s.DNSBL {
		z := strings.ToLower(strings.TrimSuffix(l.Zone, "."))
		if !ValidDomain(z) {
			bad("smtp.dnsbl[%d]: zone %q is not a DNS name", i, l.Zone)
		}
		if seen[z] {
			bad("smtp.dnsbl: zone %q is listed twice", l.Zone)
		}
		seen[z] = true
		for _, r := range l.Replies {
			if !validReply(r) {
				bad("smtp.dnsbl[%d] %s: reply %q: use an IPv4 address, a range \"127.0.0.2-127.0.0.11\" or a CIDR \"127.0.0.0/24\"", i, l.Zone, r)
			}
		}
	}
}

// validReply mirrors dnsbl.ParseRange, which config may not import.
func validReply(r string) bool {
	r = strings.TrimSpace(r)
	if lo, hi, ok := strings.Cut(r, "-"); ok {
		a, err1 := netip.ParseAddr(strings.TrimSpace(lo))
		b, err2 := netip.ParseAddr(strings.TrimSpace(hi))
		return err1 == nil && err2 == nil && a.Is4() && b.Is4() && !b.Less(a)
	}
	if strings.Contains(r, "/") {
		p, err := netip.ParsePrefix(r)
		return err == nil && p.Addr().Is4()
	}
	a, err := netip.ParseAddr(r)
	return err == nil && a.Is4()
}

// validateTrust checks [trust] forwarders: each a network, an address or a
// domain, never every address.
func (c *Config) validateTrust(bad complain) {
	for _, f := range c.Trust.Forwarders {
		if err := validForwarder(f); err != nil {
			bad("trust.forwarders: %v", err)
		}
	}
}

// validForwarder mirrors trust.ParseForwarders, which config may not import.
func validForwarder(f string) error {
	s := strings.TrimSpace(f)
	if p, err := netip.ParsePrefix(s); err == nil {
		if p.Bits() == 0 || p.Addr().Is4In6() && p.Bits() <= 96 {
			return fmt.Errorf("%q exempts every address: name the forwarders' networks", f)
		}
		return nil
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return nil
	}
	if !ValidDomain(strings.TrimSuffix(s, ".")) {
		return fmt.Errorf("%q is neither a network (\"192.0.2.0/24\"), an address nor a domain (\"lists.example.org\")", f)
	}
	return nil
}

func (c *Config) validateTLSRPT(bad complain) {
	r := c.TLSRPT
	if !mailboxRE.MatchString(r.Mailbox) {
		bad("tlsrpt.mailbox: %q is not a mailbox name", r.Mailbox)
	}
	for k, v := range map[string]string{"tlsrpt.organization": r.Organization, "tlsrpt.contact": r.Contact} {
		if strings.ContainsAny(v, "\r\n") || len(v) > 200 {
			bad("%s: one line of at most 200 characters", k)
		}
	}
	if c.Delivery.MTASTSPort < 1 || c.Delivery.MTASTSPort > 65535 {
		bad("delivery.mta_sts_port: %d is not a port", c.Delivery.MTASTSPort)
	}
}
