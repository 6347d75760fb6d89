package dnsbl

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/dnstest"
)

func TestQueryName(t *testing.T) {
	for ip, want := range map[string]string{
		"192.0.2.99":                "99.2.0.192.bl.test.",
		"::ffff:192.0.2.99":         "99.2.0.192.bl.test.",
		"2001:db8:1:2:3:4:567:89ab": "b.a.9.8.7.6.5.0.4.0.0.0.3.0.0.0.2.0.0.0.1.0.0.0.8.b.d.0.1.0.0.2.bl.test.", // RFC 5782 §2.4
		"::1":                       "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.bl.test.",
	} {
		if got := QueryName(netip.MustParseAddr(ip), "bl.test."); got != want {
			t.Errorf("QueryName(%s) = %s, want %s", ip, got, want)
		}
	}
}

func TestParseRange(t *testing.T) {
	in := func(r Range, s string) bool { return r.Contains(netip.MustParseAddr(s)) }
	r, err := ParseRange("127.0.0.2-127.0.0.11")
	if err != nil || !in(r, "127.0.0.2") || !in(r, "127.0.0.11") || in(r, "127.0.0.1") || in(r, "127.0.0.12") || r.String() != "127.0.0.2-127.0.0.11" {
		t.Errorf("range: %v %v", r, err)
	}
	r, err = ParseRange("127.0.1.0/24")
	if err != nil || !in(r, "127.0.1.0") || !in(r, "127.0.1.255") || in(r, "127.0.2.0") {
		t.Errorf("cidr: %v %v", r, err)
	}
	r, err = ParseRange(" 127.0.0.4 ")
	if err != nil || !in(r, "127.0.0.4") || in(r, "127.0.0.5") || in(r, "::1") {
		t.Errorf("single: %v %v", r, err)
	}
	for _, bad := range []string{"", "127.0.0.11-127.0.0.2", "::1", "127.0.0.0/33", "x-y", "127.0.0.1-", "::/0"} {
		if _, err := ParseRange(bad); err == nil {
			t.Errorf("ParseRange(%q) accepted it", bad)
		}
	}
}

// fakeDNS answers from a table and counts the questions; a name in hang
// waits for the context, one in fail answers SERVFAIL.
type fakeDNS struct {
	mu    sync.Mutex
	a     map[string][]string // qname -> A values
	ttl   uint32
	soa   uint32 // negative TTL; 0: no SOA in NXDOMAIN answers
	hang  map[string]bool
	fail  map[string]bool
	asked map[string]int
}

func (f *fakeDNS) Exchange(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	f.mu.Lock()
	if f.asked == nil {
		f.asked = map[string]int{}
	}
	f.asked[name]++
	vals, hang, fail := f.a[name], f.hang[name], f.fail[name]
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return nil, &net.DNSError{Err: "i/o timeout", Name: name, IsTimeout: true}
	}
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	m := new(dns.Msg)
	m.SetReply(q)
	switch {
	case fail:
		m.Rcode = dns.RcodeServerFailure
	case len(vals) == 0:
		m.Rcode = dns.RcodeNameError
		if f.soa > 0 {
			m.Ns = append(m.Ns, &dns.SOA{Hdr: dns.RR_Header{Name: "bl.test.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 3600},
				Ns: "ns.bl.test.", Mbox: "h.bl.test.", Minttl: f.soa})
		}
	default:
		for _, v := range vals {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: f.ttl}, A: net.ParseIP(v)})
		}
	}
	return m, nil
}

func (f *fakeDNS) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked[name]
}

func mustRange(t *testing.T, s string) Range {
	t.Helper()
	r, err := ParseRange(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestCheckScores: weights add up, allow-lists subtract, a reply outside
// the accepted ones does not count, a list that times out or fails counts
// as not listed and is logged, and the threshold is "at or above".
func TestCheckScores(t *testing.T) {
	ip := netip.MustParseAddr("192.0.2.99")
	q := func(z string) string { return QueryName(ip, z) }
	f := &fakeDNS{ttl: 300, a: map[string][]string{
		q("bl1.test"):   {"127.0.0.2"},
		q("bl2.test"):   {"127.0.0.10"},
		q("allow.test"): {"127.0.0.5"},
		q("odd.test"):   {"127.255.255.254"}, // "query refused", not a listing
	}, hang: map[string]bool{q("slow.test"): true}, fail: map[string]bool{q("broken.test"): true}}
	var logs bytes.Buffer
	lists := []List{
		{Zone: "bl1.test", Weight: 1},
		{Zone: "bl2.test", Weight: 2, Replies: []Range{mustRange(t, "127.0.0.2-127.0.0.11")}},
		{Zone: "odd.test", Weight: 5},
		{Zone: "slow.test", Weight: 5},
		{Zone: "broken.test", Weight: 5},
		{Zone: "allow.test", Weight: -1, Replies: []Range{mustRange(t, "127.0.0.5")}},
		{Zone: "quiet.test", Weight: 5},
	}
	for _, tc := range []struct {
		threshold int
		refuse    bool
	}{{2, true}, {3, false}} {
		c := &Checker{Lists: lists, Threshold: tc.threshold, Timeout: 100 * time.Millisecond, DNS: f,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))}
		start := time.Now()
		v := c.Check(context.Background(), ip)
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("Check took %v: the lists are not asked at once or the timeout is not applied", took)
		}
		if v.Score != 2 || v.Refuse != tc.refuse || len(v.Hits) != 3 {
			t.Errorf("threshold %d: %+v, want score 2 (1+2-1), refuse %t", tc.threshold, v, tc.refuse)
		}
		if got := strings.Join(v.Failed, ","); got != "slow.test,broken.test" {
			t.Errorf("failed lists %q", got)
		}
		if v.Blocking() != "bl1.test, bl2.test" {
			t.Errorf("Blocking() = %q", v.Blocking())
		}
		if s := strings.Join(v.Summary(), "; "); s != "allow.test=127.0.0.5 weight -1; bl1.test=127.0.0.2 weight 1; bl2.test=127.0.0.10 weight 2" {
			t.Errorf("Summary() = %q", s)
		}
	}
	if !strings.Contains(logs.String(), "zone=slow.test") || !strings.Contains(logs.String(), "zone=broken.test") {
		t.Errorf("failed lists not logged:\n%s", logs.String())
	}
	if c := (&Checker{DNS: f}); c.Check(context.Background(), ip).Refuse {
		t.Errorf("no lists refused a client")
	}
}

// TestCacheFollowsTTL: a listing is kept for its TTL and asked again after
// it; "not listed" for the SOA's negative TTL; a failure is never kept.
func TestCacheFollowsTTL(t *testing.T) {
	ip := netip.MustParseAddr("2001:db8::25")
	listed, clean := QueryName(ip, "bl.test"), QueryName(ip, "clean.test")
	f := &fakeDNS{ttl: 300, soa: 30, a: map[string][]string{listed: {"127.0.0.2"}}, fail: map[string]bool{}}
	now := time.Unix(1_700_000_000, 0)
	c := &Checker{Lists: []List{{Zone: "bl.test", Weight: 1}, {Zone: "clean.test", Weight: 1}}, Threshold: 1, DNS: f,
		Now: func() time.Time { return now }}
	check := func(wantListed, wantClean int) {
		t.Helper()
		if v := c.Check(context.Background(), ip); !v.Refuse {
			t.Fatalf("not refused: %+v", v)
		}
		if f.count(listed) != wantListed || f.count(clean) != wantClean {
			t.Fatalf("asked listed %d clean %d times, want %d and %d", f.count(listed), f.count(clean), wantListed, wantClean)
		}
	}
	check(1, 1)
	now = now.Add(29 * time.Second)
	check(1, 1)
	now = now.Add(2 * time.Second) // 31s: the negative answer expired
	check(1, 2)
	now = now.Add(268 * time.Second) // 299s: the listing is still kept, the second "not listed" is not
	check(1, 3)
	now = now.Add(2 * time.Second) // 301s: the listing expired
	check(2, 3)

	f.mu.Lock()
	f.fail[clean] = true
	f.mu.Unlock()
	now = now.Add(time.Hour)
	check(3, 4)
	check(3, 5) // the failure was not kept
}

// TestOverRealDNS asks a real DNS server (internal/dnstest) over UDP: a
// listed address, and a list that never answers, which counts as not
// listed within the timeout.
func TestOverRealDNS(t *testing.T) {
	ip := netip.MustParseAddr("192.0.2.99")
	srv, addr := dnstest.Start(t, dnstest.Record{Name: QueryName(ip, "bl.test"), Type: "A", Value: "127.0.0.2"})
	srv.Hang(QueryName(ip, "slow.test"), true)
	c := &Checker{Lists: []List{{Zone: "bl.test", Weight: 1}, {Zone: "slow.test", Weight: 1}, {Zone: "clean.test", Weight: 1}},
		Threshold: 2, Timeout: 300 * time.Millisecond, DNS: resolver.NewExchanger(addr, time.Second)}
	v := c.Check(context.Background(), ip)
	if v.Score != 1 || v.Refuse || len(v.Hits) != 1 || v.Hits[0].Reply != netip.MustParseAddr("127.0.0.2") || len(v.Failed) != 1 || v.Failed[0] != "slow.test" {
		t.Errorf("%+v", v)
	}
}
