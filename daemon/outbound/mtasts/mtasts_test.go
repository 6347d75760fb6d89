package mtasts

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/testcert"
)

const goodPolicy = "version: STSv1\r\nmode: enforce\r\nmx: mx1.example.test\r\nmx: *.mail.example.test\r\nmax_age: 86400\r\n"

func TestParsePolicy(t *testing.T) {
	p, err := ParsePolicy([]byte(goodPolicy))
	if err != nil || p.Mode != ModeEnforce || len(p.MX) != 2 || p.MaxAge != 24*time.Hour {
		t.Fatalf("%+v %v", p, err)
	}
	if got := strings.Join(p.Lines(), "|"); got != "version: STSv1|mode: enforce|mx: mx1.example.test|mx: *.mail.example.test|max_age: 86400" {
		t.Errorf("Lines() = %q", got)
	}
	ok := []string{
		"version: STSv1\nmode: testing\nmx: MX.Example.Test.\nmax_age: 0\n",
		"version:STSv1\nmode:none\nmax_age:31557600", // no mx needed for none; the maximum max_age
		"version: STSv1\nmode: enforce\nmx: mx.example.test\nmax_age: 60\nfuture_key: whatever\n",
	}
	for _, s := range ok {
		if _, err := ParsePolicy([]byte(s)); err != nil {
			t.Errorf("ParsePolicy(%q): %v", s, err)
		}
	}
	bad := []string{
		"",
		"mode: enforce\nmx: mx.example.test\nmax_age: 60\n",                                   // no version
		"version: STSv2\nmode: enforce\nmx: mx.example.test\nmax_age: 60\n",                   // wrong version
		"version: STSv1\nmode: enforce\nmax_age: 60\n",                                        // no mx
		"version: STSv1\nmode: ENFORCE\nmx: mx.example.test\nmax_age: 60\n",                   // case matters
		"version: STSv1\nmode: enforce\nmx: mx.example.test\n",                                // no max_age
		"version: STSv1\nmode: enforce\nmx: mx.example.test\nmax_age: 31557601\n",             // too long
		"version: STSv1\nmode: enforce\nmx: mx.example.test\nmax_age: -1\n",                   // negative
		"version: STSv1\nmode: enforce\nmode: testing\nmx: mx.example.test\nmax_age: 60\n",    // two modes
		"version: STSv1\nmode: enforce\nmx: *.*.example.test\nmax_age: 60\n",                  // double wildcard
		"version: STSv1\nmode: enforce\nmx: mx.*.example.test\nmax_age: 60\n",                 // inner wildcard
		"version: STSv1\nmode: enforce\nmx: localhost\nmax_age: 60\n",                         // not a domain
		"version: STSv1\nmode: enforce\nmx: mx.example.test\nmax_age: 60\njunk without colon", // not key: value
		"version: STSv1\nmode: enforce\nmx: *.\nmax_age: 60\n",
	}
	for _, s := range bad {
		if p, err := ParsePolicy([]byte(s)); err == nil {
			t.Errorf("ParsePolicy(%q) = %+v, want an error", s, p)
		}
	}
	if _, err := ParsePolicy([]byte(goodPolicy + strings.Repeat("x: y\n", MaxPolicyBytes/5))); err == nil {
		t.Errorf("a policy over %d bytes was accepted", MaxPolicyBytes)
	}
}

func TestMatches(t *testing.T) {
	p := Policy{MX: []string{"mx1.example.test", "*.mail.example.test"}}
	for host, want := range map[string]bool{
		"mx1.example.test":         true,
		"MX1.Example.Test.":        true,
		"a.mail.example.test":      true,
		"mail.example.test":        false, // the wildcard needs one label
		"a.b.mail.example.test":    false, // and only one
		"mx2.example.test":         false,
		"mx1.example.test.evil":    false,
		"evilmx1.example.test":     false,
		"a.mail.example.test.evil": false,
		"":                         false,
		".mail.example.test":       false,
	} {
		if got := p.Matches(host); got != want {
			t.Errorf("Matches(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestParseTXT(t *testing.T) {
	for rec, want := range map[string]string{
		"v=STSv1; id=20160831085700Z;": "20160831085700Z",
		"v=STSv1;id=abc":               "abc",
		"v=STSv1; id=abc; ext=1":       "abc",
	} {
		if got, err := ParseTXT(rec); err != nil || got != want {
			t.Errorf("ParseTXT(%q) = %q, %v", rec, got, err)
		}
	}
	for _, rec := range []string{"", "v=STSv2; id=a", "id=a; v=STSv1", "v=STSv1", "v=STSv1; id=", "v=STSv1; id=a-b", "v=STSv1; id=" + strings.Repeat("a", 33), "v=STSv1; id=a; id=b"} {
		if _, err := ParseTXT(rec); err == nil {
			t.Errorf("ParseTXT(%q) accepted it", rec)
		}
	}
	if _, err := ParseTXTRecords([]string{"v=spf1 -all", "v=STSv1; id=a", "v=STSv1; id=b"}); err == nil {
		t.Errorf("two STSv1 records accepted")
	}
	if id, err := ParseTXTRecords([]string{"v=spf1 -all", "v=STSv1; id=a"}); err != nil || id != "a" {
		t.Errorf("ParseTXTRecords: %q %v", id, err)
	}
}

// policyServer is an HTTPS server for mta-sts.example.test whose answer a
// test changes, counting requests.
type policyServer struct {
	srv      *httptest.Server
	body     atomic.Value // string
	ctype    atomic.Value // string
	redirect atomic.Bool
	requests atomic.Int32
}

func startPolicyServer(t *testing.T, certHost string) (*policyServer, *Source, *resolver.Map, *time.Time) {
	t.Helper()
	ps := &policyServer{}
	ps.body.Store(goodPolicy)
	ps.ctype.Store("text/plain; charset=utf-8")
	ps.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ps.requests.Add(1)
		if r.URL.Path != "/.well-known/mta-sts.txt" || r.Host != "mta-sts.example.test:"+portOf(ps.srv) {
			http.NotFound(w, r)
			return
		}
		if ps.redirect.Load() {
			http.Redirect(w, r, "https://elsewhere.test/policy", http.StatusFound)
			return
		}
		w.Header().Set("Content-Type", ps.ctype.Load().(string))
		w.Write([]byte(ps.body.Load().(string)))
	}))
	cert, pool := testcert.New(t, certHost)
	ps.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	ps.srv.StartTLS()
	t.Cleanup(ps.srv.Close)
	dns := &resolver.Map{}
	dns.SetTXT("_mta-sts.example.test", "v=STSv1; id=one;")
	dns.SetIP("mta-sts.example.test", "127.0.0.1")
	now := time.Unix(1_700_000_000, 0)
	addr := ps.srv.Listener.Addr().String()
	src := &Source{Resolver: dns, Dir: filepath.Join(t.TempDir(), "mta-sts"), RootCAs: pool, Now: func() time.Time { return now },
		Port: mustPort(addr), Timeout: 5 * time.Second,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return new(net.Dialer).DialContext(ctx, network, addr)
		}}
	return ps, src, dns, &now
}

func portOf(s *httptest.Server) string {
	_, p, _ := net.SplitHostPort(s.Listener.Addr().String())
	return p
}

func mustPort(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n := 0
	for _, c := range p {
		n = n*10 + int(c-'0')
	}
	return n
}

// TestSourceFetchesCachesAndRefreshes: the policy is fetched once for an
// id and kept; a new id fetches again; half the max_age later it is fetched
// again at its next use; a failed fetch leaves the cached policy in force;
// the TXT record going away does not drop it before it expires; the cache
// survives a restart (a new Source on the same directory).
func TestSourceFetchesCachesAndRefreshes(t *testing.T) {
	ps, src, dns, now := startPolicyServer(t, "mta-sts.example.test")
	ctx := context.Background()
	get := func(wantRequests int32) Lookup {
		t.Helper()
		l := src.Get(ctx, "Example.Test.")
		if l.Policy == nil || l.Policy.Mode != ModeEnforce || !l.Policy.Matches("mx1.example.test") {
			t.Fatalf("lookup %+v", l)
		}
		if got := ps.requests.Load(); got != wantRequests {
			t.Fatalf("%d fetches, want %d", got, wantRequests)
		}
		return l
	}
	get(1)
	get(1)
	dns.SetTXT("_mta-sts.example.test", "v=STSv1; id=two;")
	if l := get(2); l.ID != "two" {
		t.Errorf("id %q after the record changed", l.ID)
	}
	*now = now.Add(11 * time.Hour)
	get(2)
	*now = now.Add(2 * time.Hour) // 13h: past half of max_age (12h)
	get(3)

	ps.body.Store("not a policy")
	*now = now.Add(13 * time.Hour)
	if l := get(4); l.Failure != "" {
		t.Errorf("a failed refresh reported %q over a cached policy", l.Failure)
	}
	dns.TXT = nil // the record is gone: the cached policy stays until it expires
	get(4)

	fresh := &Source{Resolver: src.Resolver, Dir: src.Dir, RootCAs: src.RootCAs, Now: src.Now, Port: src.Port, Dial: src.Dial}
	if l := fresh.Get(ctx, "example.test"); l.Policy == nil || ps.requests.Load() != 4 {
		t.Errorf("after a restart: %+v, %d fetches", l, ps.requests.Load())
	}
	*now = now.Add(24 * time.Hour) // past max_age since the last good fetch
	if l := src.Get(ctx, "example.test"); l.Policy != nil {
		t.Errorf("expired policy still in force: %+v", l)
	}
}

// TestSourceRefusesBadPolicies: without a cached policy, every way the
// policy host can fail gives no policy and the RFC 8460 result type.
func TestSourceRefusesBadPolicies(t *testing.T) {
	for _, tc := range []struct {
		name     string
		certHost string
		setup    func(*policyServer)
		want     string
	}{
		{"certificate for another name", "other.example.test", nil, FailWebPKI},
		{"redirect", "mta-sts.example.test", func(ps *policyServer) { ps.redirect.Store(true) }, FailFetch},
		{"not text/plain", "mta-sts.example.test", func(ps *policyServer) { ps.ctype.Store("text/html") }, FailInvalid},
		{"too large", "mta-sts.example.test", func(ps *policyServer) {
			ps.body.Store(goodPolicy + strings.Repeat("#", MaxPolicyBytes))
		}, FailInvalid},
		{"not a policy", "mta-sts.example.test", func(ps *policyServer) { ps.body.Store("<html>hi</html>") }, FailInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps, src, _, _ := startPolicyServer(t, tc.certHost)
			if tc.setup != nil {
				tc.setup(ps)
			}
			l := src.Get(context.Background(), "example.test")
			if l.Policy != nil || l.Failure != tc.want {
				t.Errorf("lookup %+v, want no policy and %s", l, tc.want)
			}
			if ents, _ := os.ReadDir(src.Dir); len(ents) != 0 {
				t.Errorf("a refused policy was cached: %v", ents)
			}
		})
	}
}

// TestSourceNoRecord: no TXT record, or mode none, is no policy and no
// failure; nothing is fetched without a record.
func TestSourceNoRecord(t *testing.T) {
	ps, src, dns, _ := startPolicyServer(t, "mta-sts.example.test")
	dns.TXT = nil
	if l := src.Get(context.Background(), "example.test"); l.Policy != nil || l.Failure != "" || ps.requests.Load() != 0 {
		t.Errorf("no record: %+v, %d fetches", l, ps.requests.Load())
	}
	dns.SetTXT("_mta-sts.example.test", "v=STSv1; id=n;")
	ps.body.Store("version: STSv1\nmode: none\nmax_age: 600\n")
	if l := src.Get(context.Background(), "example.test"); l.Policy != nil || l.Failure != "" {
		t.Errorf("mode none: %+v", l)
	}
}
