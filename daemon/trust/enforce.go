package trust

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Action is what the receiving side does with a message after the checks.
type Action string

// The actions a DMARC policy can lead to.
const (
	Deliver    Action = ""           // store it as usual
	Quarantine Action = "quarantine" // store it in the junk folder
	Reject     Action = "reject"     // refuse it with 550 5.7.1 at the end of DATA
)

// Forwarder is one entry of [trust] forwarders: a network the client
// address may be in, or a domain that authenticated the message (a DKIM
// pass with that d= or a subdomain of it, or an SPF pass for an envelope
// sender at it). Mail a forwarder passes on often fails DMARC for the
// original From (a mailing list rewrites the subject, a forwarder keeps the
// envelope), so its mail is exempt from the policy.
type Forwarder struct {
	prefix netip.Prefix // valid for a network entry
	domain string       // set for a domain entry
	text   string
}

func (f Forwarder) String() string { return f.text }

// ParseForwarders reads [trust] forwarders: "192.0.2.0/24", "2001:db8::/32",
// a bare address, or a domain ("lists.example.org").
func ParseForwarders(entries []string) ([]Forwarder, error) {
	out := make([]Forwarder, 0, len(entries))
	for _, e := range entries {
		f, err := parseForwarder(e)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

func parseForwarder(e string) (Forwarder, error) {
	s := strings.TrimSpace(e)
	if p, err := netip.ParsePrefix(s); err == nil {
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		if p.Bits() == 0 {
			return Forwarder{}, fmt.Errorf("forwarder %q exempts every address: name the forwarders' networks", e)
		}
		return Forwarder{prefix: p.Masked(), text: s}, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		a = a.Unmap()
		return Forwarder{prefix: netip.PrefixFrom(a, a.BitLen()), text: s}, nil
	}
	d := normDomain(s)
	if !validDomain(d) || !strings.Contains(d, ".") {
		return Forwarder{}, fmt.Errorf("forwarder %q is neither a network (\"192.0.2.0/24\"), an address nor a domain (\"lists.example.org\")", e)
	}
	return Forwarder{domain: d, text: s}, nil
}

// matches reports whether the message came through f: from an address in
// its network, or authenticated by its domain.
func (f Forwarder) matches(ip net.IP, r Result) bool {
	if f.domain == "" {
		a, ok := netip.AddrFromSlice(ip)
		return ok && f.prefix.Contains(a.Unmap())
	}
	under := func(d string) bool { return d == f.domain || strings.HasSuffix(d, "."+f.domain) }
	if r.SPF.Result == "pass" && r.SPFScope == "mailfrom" && under(normDomain(r.SPF.Domain)) {
		return true
	}
	for _, d := range r.DKIM {
		if d.Result == "pass" && under(normDomain(d.Domain)) {
			return true
		}
	}
	return false
}

// Enforcement is the operator's DMARC policy ([trust] dmarc_enforce and
// forwarders).
type Enforcement struct {
	Enabled    bool
	Forwarders []Forwarder
}

// Decide says what to do with a checked message that arrived from ip, and
// why (for the reply and the log). Only a DMARC fail leads anywhere but
// Deliver; temperror and permerror never do (we do not know what the
// domain asked for). Mail the daemon or a local mailbox submitted is not
// network mail and is never judged here.
func (e Enforcement) Decide(ip net.IP, r Result) (Action, string) {
	if !e.Enabled || r.Generated || r.SubmittedBy != "" || r.DMARC.Result != "fail" {
		return Deliver, ""
	}
	var act Action
	switch r.Disposition {
	case string(Reject):
		act = Reject
	case string(Quarantine):
		act = Quarantine
	default:
		return Deliver, ""
	}
	for _, f := range e.Forwarders {
		if f.matches(ip, r) {
			return Deliver, "from forwarder " + f.text
		}
	}
	return act, fmt.Sprintf("DMARC policy of %s (%s)", r.DMARC.Domain, r.DMARC.Detail)
}
