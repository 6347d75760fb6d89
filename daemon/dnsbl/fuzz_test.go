package dnsbl

import (
	"net"
	"testing"

	"github.com/miekg/dns"
)

const fuzzQName = "99.2.0.192.bl.test."

// packed is a list's answer in wire form, for the seed corpus.
func packed(f *testing.F, rcode int, answer []dns.RR, ns []dns.RR) []byte {
	f.Helper()
	q := new(dns.Msg)
	q.SetQuestion(fuzzQName, dns.TypeA)
	m := new(dns.Msg)
	m.SetReply(q)
	m.Rcode, m.Answer, m.Ns = rcode, answer, ns
	b, err := m.Pack()
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// FuzzParseReply feeds arbitrary DNS messages, as a list (or anyone able to
// answer for it) could send, to the reply parser: it must not panic, must
// keep at most maxAddrs IPv4 addresses, and must call every code but
// NOERROR and NXDOMAIN a failure.
func FuzzParseReply(f *testing.F) {
	hdr := func(name string, t uint16, ttl uint32) dns.RR_Header {
		return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: ttl}
	}
	f.Add(packed(f, dns.RcodeSuccess, []dns.RR{&dns.A{Hdr: hdr(fuzzQName, dns.TypeA, 300), A: net.ParseIP("127.0.0.2")}}, nil))
	f.Add(packed(f, dns.RcodeNameError, nil, []dns.RR{&dns.SOA{Hdr: hdr("bl.test.", dns.TypeSOA, 3600), Ns: "ns.bl.test.", Mbox: "h.bl.test.", Minttl: 60}}))
	f.Add(packed(f, dns.RcodeServerFailure, nil, nil))
	f.Add(packed(f, dns.RcodeSuccess, []dns.RR{
		&dns.CNAME{Hdr: hdr(fuzzQName, dns.TypeCNAME, 60), Target: "x.bl.test."},
		&dns.A{Hdr: hdr("x.bl.test.", dns.TypeA, 30), A: net.ParseIP("127.0.0.4")},
		&dns.A{Hdr: hdr("other.test.", dns.TypeA, 30), A: net.ParseIP("127.0.0.9")},
	}, nil))
	f.Add(packed(f, dns.RcodeSuccess, []dns.RR{&dns.TXT{Hdr: hdr(fuzzQName, dns.TypeTXT, 300), Txt: []string{"listed"}}}, nil))
	f.Fuzz(func(t *testing.T, wire []byte) {
		m := new(dns.Msg)
		if err := m.Unpack(wire); err != nil {
			return
		}
		a, err := ParseReply(fuzzQName, m)
		if err != nil {
			if len(a.Addrs) != 0 {
				t.Fatalf("a failure carried addresses: %v", a.Addrs)
			}
			return
		}
		if m.Rcode != dns.RcodeSuccess && m.Rcode != dns.RcodeNameError {
			t.Fatalf("rcode %d accepted", m.Rcode)
		}
		if len(a.Addrs) > maxAddrs {
			t.Fatalf("%d addresses kept", len(a.Addrs))
		}
		for _, addr := range a.Addrs {
			if !addr.Is4() {
				t.Fatalf("non-IPv4 reply %v", addr)
			}
		}
		if m.Rcode == dns.RcodeNameError && len(a.Addrs) > 0 {
			t.Fatalf("NXDOMAIN listed: %v", a.Addrs)
		}
		a.Matching(DefaultReplies)
	})
}

// FuzzParseRange: an operator's reply range either parses into a range
// whose ends it contains, or is refused.
func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"127.0.0.2", "127.0.0.2-127.0.0.11", "127.0.0.0/24", "::1", "1.2.3.4-1.2.3.3", "0.0.0.0/0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRange(s)
		if err != nil {
			return
		}
		if !r.Contains(r.From) || !r.Contains(r.To) || r.To.Less(r.From) {
			t.Fatalf("%q parsed to %v", s, r)
		}
	})
}
