package dnsbl

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/miekg/dns"

	"github.com/mailctl/mailctl/daemon/resolver"
)

// QueryName is the name a DNS list is asked about ip under zone: the IPv4
// octets in reverse order, or the 32 nibbles of an IPv6 address in reverse
// order (RFC 5782 §2.1, §2.4), then the zone. An IPv4-mapped IPv6 address
// is asked as IPv4.
func QueryName(ip netip.Addr, zone string) string {
	ip = ip.Unmap()
	zone = strings.TrimSuffix(zone, ".")
	var b strings.Builder
	if ip.Is4() {
		a := ip.As4()
		fmt.Fprintf(&b, "%d.%d.%d.%d.", a[3], a[2], a[1], a[0])
	} else {
		a := ip.As16()
		const hex = "0123456789abcdef"
		for i := len(a) - 1; i >= 0; i-- {
			b.WriteByte(hex[a[i]&0xf])
			b.WriteByte('.')
			b.WriteByte(hex[a[i]>>4])
			b.WriteByte('.')
		}
	}
	b.WriteString(zone)
	b.WriteByte('.')
	return b.String()
}

// Range is a set of reply addresses a list's operator documents as
// "listed", e.g. 127.0.0.2–127.0.0.11 for a list whose other answers mean
// something else (an error, a query refused).
type Range struct{ From, To netip.Addr }

// ParseRange reads "127.0.0.2", "127.0.0.2-127.0.0.11" or "127.0.0.0/24".
func ParseRange(s string) (Range, error) {
	s = strings.TrimSpace(s)
	bad := func() (Range, error) {
		return Range{}, fmt.Errorf("reply %q: use an IPv4 address, a range \"127.0.0.2-127.0.0.11\" or a CIDR \"127.0.0.0/24\"", s)
	}
	if lo, hi, ok := strings.Cut(s, "-"); ok {
		a, err1 := netip.ParseAddr(strings.TrimSpace(lo))
		b, err2 := netip.ParseAddr(strings.TrimSpace(hi))
		if err1 != nil || err2 != nil || !a.Is4() || !b.Is4() || b.Less(a) {
			return bad()
		}
		return Range{a, b}, nil
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil || !p.Addr().Is4() {
			return bad()
		}
		p = p.Masked()
		a := p.Addr().As4()
		last := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
		last |= uint32(1)<<(32-p.Bits()) - 1
		return Range{p.Addr(), netip.AddrFrom4([4]byte{byte(last >> 24), byte(last >> 16), byte(last >> 8), byte(last)})}, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return bad()
	}
	return Range{a, a}, nil
}

// Contains reports whether a is in the range.
func (r Range) Contains(a netip.Addr) bool {
	return a.Is4() && !a.Less(r.From) && !r.To.Less(a)
}

func (r Range) String() string {
	if r.From == r.To {
		return r.From.String()
	}
	return r.From.String() + "-" + r.To.String()
}

// DefaultReplies is what a list's answer must be to count when its entry
// names none: any 127.0.0.x but 127.0.0.1. Lists answer outside it to say
// something else (Spamhaus answers 127.255.255.x to a query it refuses).
var DefaultReplies = []Range{{netip.AddrFrom4([4]byte{127, 0, 0, 2}), netip.AddrFrom4([4]byte{127, 0, 0, 255})}}

// Answer is what one list said about one address.
type Answer struct {
	// Addrs are the A records of the answer (empty: not listed).
	Addrs []netip.Addr
	// TTL is how long the answer may be kept, in seconds: the smallest
	// TTL of the A records, or the negative TTL of a "not listed" answer
	// (RFC 2308), HasTTL false when the answer gave none.
	TTL    uint32
	HasTTL bool
}

// Limits on what one answer may hold; a list answers with one address or a
// few.
const maxAddrs = 16

// ErrFailed is a list that could not answer (SERVFAIL, REFUSED, a reply to
// another question): not listed, and logged.
var ErrFailed = errors.New("the DNS list did not answer")

// ParseReply reads a list's answer to the A question for qname. NXDOMAIN
// and an empty answer mean "not listed"; the A records at qname (after any
// CNAME) are the listing; every other code is ErrFailed.
func ParseReply(qname string, m *dns.Msg) (Answer, error) {
	switch m.Rcode {
	case dns.RcodeNameError:
		ttl, ok := resolver.NegativeTTL(m)
		return Answer{TTL: ttl, HasTTL: ok}, nil
	case dns.RcodeSuccess:
	default:
		return Answer{}, fmt.Errorf("%w: %s for %s", ErrFailed, dns.RcodeToString[m.Rcode], qname)
	}
	if !m.Response || len(m.Question) != 1 || !strings.EqualFold(m.Question[0].Name, qname) || m.Question[0].Qtype != dns.TypeA {
		return Answer{}, fmt.Errorf("%w: the reply is not for %s A", ErrFailed, qname)
	}
	var a Answer
	owner := qname
	for range 8 { // follow a short CNAME chain, in the answer only
		next := ""
		for _, rr := range m.Answer {
			if c, ok := rr.(*dns.CNAME); ok && strings.EqualFold(c.Hdr.Name, owner) {
				next = c.Target
			}
		}
		if next == "" {
			break
		}
		owner = next
	}
	for _, rr := range m.Answer {
		r, ok := rr.(*dns.A)
		if !ok || !strings.EqualFold(r.Hdr.Name, owner) {
			continue
		}
		addr, ok := netip.AddrFromSlice(r.A.To4())
		if !ok {
			continue
		}
		if len(a.Addrs) == maxAddrs {
			break
		}
		a.Addrs = append(a.Addrs, addr)
		if !a.HasTTL || r.Hdr.Ttl < a.TTL {
			a.TTL, a.HasTTL = r.Hdr.Ttl, true
		}
	}
	if len(a.Addrs) == 0 {
		a.TTL, a.HasTTL = resolver.NegativeTTL(m)
	}
	return a, nil
}

// Matching are the addresses of a that fall in replies.
func (a Answer) Matching(replies []Range) []netip.Addr {
	var out []netip.Addr
	for _, addr := range a.Addrs {
		for _, r := range replies {
			if r.Contains(addr) {
				out = append(out, addr)
				break
			}
		}
	}
	return out
}
