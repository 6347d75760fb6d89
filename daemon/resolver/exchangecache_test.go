package resolver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// fakeExchanger answers from a table and counts the questions it is asked.
type fakeExchanger struct {
	answers map[exchangeKey]func() *dns.Msg
	calls   map[exchangeKey]int
	err     error
}

func (f *fakeExchanger) Exchange(_ context.Context, name string, qtype uint16) (*dns.Msg, error) {
	k := exchangeKey{dns.Fqdn(name), qtype}
	if f.calls == nil {
		f.calls = map[exchangeKey]int{}
	}
	f.calls[k]++
	if f.err != nil {
		return nil, f.err
	}
	if a := f.answers[k]; a != nil {
		return a(), nil
	}
	m := new(dns.Msg)
	m.SetQuestion(k.name, qtype)
	m.Rcode = dns.RcodeServerFailure
	return m, nil
}

func (f *fakeExchanger) set(name string, qtype uint16, a func() *dns.Msg) {
	if f.answers == nil {
		f.answers = map[exchangeKey]func() *dns.Msg{}
	}
	f.answers[exchangeKey{dns.Fqdn(name), qtype}] = a
}

func answer(t *testing.T, name string, qtype uint16, rcode int, ad bool, answers []string, soa string) func() *dns.Msg {
	t.Helper()
	parse := func(s string) dns.RR {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		return rr
	}
	var ans []dns.RR
	for _, s := range answers {
		ans = append(ans, parse(s))
	}
	var ns dns.RR
	if soa != "" {
		ns = parse(soa)
	}
	return func() *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), qtype)
		m.Response, m.Rcode, m.AuthenticatedData = true, rcode, ad
		for _, rr := range ans {
			m.Answer = append(m.Answer, dns.Copy(rr))
		}
		if ns != nil {
			m.Ns = append(m.Ns, dns.Copy(ns))
		}
		m.SetEdns0(ednsSize, false)
		return m
	}
}

func TestExchangeCacheKeepsAnswersForTheirTTL(t *testing.T) {
	f := &fakeExchanger{}
	f.set("example.test", dns.TypeMX, answer(t, "example.test", dns.TypeMX, dns.RcodeSuccess, true,
		[]string{"example.test. 300 IN MX 10 mx1.example.test.", "example.test. 120 IN MX 20 mx2.example.test."}, ""))
	now := time.Unix(1_000_000, 0)
	c := &ExchangeCache{E: f, Now: func() time.Time { return now }}
	ctx := context.Background()
	k := exchangeKey{"example.test.", dns.TypeMX}

	m, err := c.Exchange(ctx, "example.test", dns.TypeMX)
	if err != nil || len(m.Answer) != 2 || !m.AuthenticatedData {
		t.Fatalf("first: %v %v", m, err)
	}
	m.Answer = nil // the caller's copy: changing it changes nothing kept

	now = now.Add(100 * time.Second)
	m, err = c.Exchange(ctx, "EXAMPLE.test.", dns.TypeMX) // names are not case-sensitive
	if err != nil || len(m.Answer) != 2 {
		t.Fatalf("repeat: %v %v", m, err)
	}
	if !m.AuthenticatedData {
		t.Error("the AD bit of the kept answer is lost")
	}
	if got := []uint32{m.Answer[0].Header().Ttl, m.Answer[1].Header().Ttl}; got[0] != 200 || got[1] != 20 {
		t.Errorf("TTLs after 100 s in the cache = %v, want [200 20]", got)
	}
	if opt := m.IsEdns0(); opt == nil || opt.UDPSize() != ednsSize {
		t.Errorf("the EDNS0 record of the kept answer is changed: %v", opt)
	}
	if f.calls[k] != 1 {
		t.Fatalf("%d questions for a repeat within the TTL, want 1", f.calls[k])
	}
	// Another type of the same name is another question.
	f.set("example.test", dns.TypeA, answer(t, "example.test", dns.TypeA, dns.RcodeSuccess, false, []string{"example.test. 60 IN A 192.0.2.1"}, ""))
	if m, err := c.Exchange(ctx, "example.test", dns.TypeA); err != nil || len(m.Answer) != 1 {
		t.Fatalf("A: %v %v", m, err)
	}
	// The least TTL (120 s) bounds the whole answer.
	now = now.Add(20 * time.Second)
	if _, err := c.Exchange(ctx, "example.test", dns.TypeMX); err != nil {
		t.Fatal(err)
	}
	if f.calls[k] != 2 {
		t.Fatalf("%d questions once the least TTL passed, want 2", f.calls[k])
	}
	// A clock set back does not make a kept answer last longer.
	now = now.Add(-time.Hour)
	if _, err := c.Exchange(ctx, "example.test", dns.TypeMX); err != nil {
		t.Fatal(err)
	}
	if f.calls[k] != 3 {
		t.Fatalf("%d questions after the clock went back, want 3", f.calls[k])
	}
}

func TestExchangeCacheKeepsNoFailure(t *testing.T) {
	f := &fakeExchanger{}
	c := &ExchangeCache{E: f}
	ctx := context.Background()
	soa := "example.test. 3600 IN SOA ns.example.test. host.example.test. 1 7200 3600 1209600 300"
	f.set("nx.example.test", dns.TypeMX, answer(t, "nx.example.test", dns.TypeMX, dns.RcodeNameError, false, nil, soa))
	f.set("nosoa.example.test", dns.TypeMX, answer(t, "nosoa.example.test", dns.TypeMX, dns.RcodeNameError, false, nil, ""))
	f.set("nodata.example.test", dns.TypeTLSA, answer(t, "nodata.example.test", dns.TypeTLSA, dns.RcodeSuccess, false, nil, soa))
	f.set("zero.example.test", dns.TypeMX, answer(t, "zero.example.test", dns.TypeMX, dns.RcodeSuccess, false, []string{"zero.example.test. 0 IN MX 10 mx.example.test."}, ""))
	f.set("refused.example.test", dns.TypeMX, func() *dns.Msg {
		m := answer(t, "refused.example.test", dns.TypeMX, dns.RcodeRefused, false, nil, soa)()
		return m
	})
	cases := []struct {
		name  string
		qtype uint16
		want  int // questions asked for three exchanges
	}{
		{"nx.example.test", dns.TypeMX, 1},       // NXDOMAIN with an SOA: kept (min(3600, 300) s)
		{"nodata.example.test", dns.TypeTLSA, 1}, // no such record, with an SOA: kept
		{"nosoa.example.test", dns.TypeMX, 3},    // negative without an SOA: not kept
		{"zero.example.test", dns.TypeMX, 3},     // TTL 0: not kept
		{"refused.example.test", dns.TypeMX, 3},  // REFUSED: a failure
		{"servfail.example.test", dns.TypeMX, 3}, // SERVFAIL: a failure
	}
	for _, tc := range cases {
		for range 3 {
			if _, err := c.Exchange(ctx, tc.name, tc.qtype); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		if got := f.calls[exchangeKey{dns.Fqdn(tc.name), tc.qtype}]; got != tc.want {
			t.Errorf("%s: %d questions for 3 exchanges, want %d", tc.name, got, tc.want)
		}
	}
	// No answer at all: the error is the caller's, every time.
	f.err = &net.DNSError{Err: "timeout", IsTimeout: true, IsTemporary: true}
	for range 2 {
		if _, err := c.Exchange(ctx, "down.example.test", dns.TypeMX); !errors.Is(err, f.err) {
			t.Fatalf("err = %v", err)
		}
	}
	if got := f.calls[exchangeKey{"down.example.test.", dns.TypeMX}]; got != 2 {
		t.Errorf("%d questions for 2 exchanges that failed, want 2", got)
	}
}

func TestExchangeCacheIsBounded(t *testing.T) {
	f := &fakeExchanger{}
	now := time.Unix(1_000_000, 0)
	c := &ExchangeCache{E: f, Max: 50, MaxTTL: time.Minute, Now: func() time.Time { return now }}
	ctx := context.Background()
	// A day's TTL is kept MaxTTL.
	f.set("long.example.test", dns.TypeMX, answer(t, "long.example.test", dns.TypeMX, dns.RcodeSuccess, false, []string{"long.example.test. 86400 IN MX 10 mx.example.test."}, ""))
	c.Exchange(ctx, "long.example.test", dns.TypeMX)
	now = now.Add(61 * time.Second)
	c.Exchange(ctx, "long.example.test", dns.TypeMX)
	if got := f.calls[exchangeKey{"long.example.test.", dns.TypeMX}]; got != 2 {
		t.Errorf("%d questions past MaxTTL, want 2", got)
	}
	for i := range 500 {
		name := fmt.Sprintf("d%d.example.test", i)
		f.set(name, dns.TypeMX, answer(t, name, dns.TypeMX, dns.RcodeSuccess, false, []string{name + ". 3600 IN MX 10 mx.example.test."}, ""))
		if _, err := c.Exchange(ctx, name, dns.TypeMX); err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		n := len(c.entries)
		c.mu.Unlock()
		if n > 50 {
			t.Fatalf("%d answers kept, Max is 50", n)
		}
	}
}
