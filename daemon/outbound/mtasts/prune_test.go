package mtasts

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/testcert"
	"github.com/mailctl/mailctl/internal/testwait"
)

// policyHosts serves the policies of several domains, each with its own
// max_age, and counts the fetches of each.
type policyHosts struct {
	srv  *httptest.Server
	src  *Source
	dns  *resolver.Map
	now  atomic.Int64 // the Source's clock, Unix nanoseconds
	fail atomic.Bool  // answer 500
	// hold, when set, makes each request wait for it to be closed, after
	// saying which domain asked on arrived.
	hold    atomic.Pointer[chan struct{}]
	arrived chan string

	mu      sync.Mutex
	maxAge  map[string]int
	fetches map[string]int
}

func startPolicyHosts(t *testing.T, maxAge map[string]int) *policyHosts {
	t.Helper()
	ph := &policyHosts{maxAge: maxAge, fetches: map[string]int{}, dns: &resolver.Map{}, arrived: make(chan string, 1)}
	ph.now.Store(time.Unix(1_700_000_000, 0).UnixNano())
	var hosts []string
	for d := range maxAge {
		hosts = append(hosts, "mta-sts."+d)
		ph.dns.SetTXT("_mta-sts."+d, "v=STSv1; id=one;")
		ph.dns.SetIP("mta-sts."+d, "127.0.0.1")
	}
	ph.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.Host)
		d, _ := strings.CutPrefix(host, "mta-sts.")
		if h := ph.hold.Load(); h != nil {
			ph.arrived <- d
			<-*h
		}
		ph.mu.Lock()
		age, ok := ph.maxAge[d]
		ph.fetches[d]++
		ph.mu.Unlock()
		if !ok || ph.fail.Load() {
			http.Error(w, "no", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "version: STSv1\nmode: enforce\nmx: mx.%s\nmax_age: %d\n", d, age)
	}))
	cert, pool := testcert.New(t, hosts...)
	ph.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	ph.srv.StartTLS()
	t.Cleanup(ph.srv.Close)
	addr := ph.srv.Listener.Addr().String()
	ph.src = &Source{Resolver: ph.dns, Dir: filepath.Join(t.TempDir(), "mta-sts"), RootCAs: pool,
		Now: func() time.Time { return time.Unix(0, ph.now.Load()) }, Port: mustPort(addr), Timeout: 5 * time.Second,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return new(net.Dialer).DialContext(ctx, network, addr)
		}}
	return ph
}

func (ph *policyHosts) clock() time.Time        { return time.Unix(0, ph.now.Load()) }
func (ph *policyHosts) advance(d time.Duration) { ph.now.Add(int64(d)) }

func (ph *policyHosts) fetched(domain string) int {
	ph.mu.Lock()
	defer ph.mu.Unlock()
	return ph.fetches[domain]
}

// files is the sorted names in the Source's directory.
func (ph *policyHosts) files(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(ph.src.Dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// inMemory is the sorted domains the Source holds in memory, and how many
// fetch locks it holds.
func (s *Source) inMemory() ([]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ds []string
	for d := range s.mem {
		ds = append(ds, d)
	}
	slices.Sort(ds)
	return ds, len(s.fetches)
}

func mustPrune(t *testing.T, s *Source) PruneResult {
	t.Helper()
	res, err := s.Prune()
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	return res
}

// TestPruneAYearInAMinute: two dozen domains with max_ages from a day to
// a year are sent to on and off across a simulated year, pruned after
// each round: exactly the files of the expired policies go, memory holds
// only the policies used within the last MemoryIdle, and no fetch lock
// outlives its fetch.
func TestPruneAYearInAMinute(t *testing.T) {
	ages := []int{86400, 10 * 86400, 30 * 86400, 90 * 86400, int(MaxAgeLimit / time.Second)}
	maxAge := map[string]int{}
	for i := range 24 {
		maxAge[fmt.Sprintf("d%02d.test", i)] = ages[i%len(ages)]
	}
	ph := startPolicyHosts(t, maxAge)
	ctx := context.Background()
	expires := map[string]time.Time{}
	uses := map[string]int{}
	for step := range 34 { // 11 days a step
		ph.advance(11*24*time.Hour - 30*time.Minute)
		var used []string
		for i := range 24 {
			if (i*7+step*3)%4 != 0 && !(step == 0 && i%5 == 4) {
				continue
			}
			d := fmt.Sprintf("d%02d.test", i)
			l := ph.src.Get(ctx, d)
			if l.Policy == nil || !l.Policy.Matches("mx."+d) {
				t.Fatalf("step %d: %s: %+v", step, d, l)
			}
			uses[d]++
			// Eleven days on, past any refresh time: each use fetches.
			if got := ph.fetched(d); got != uses[d] {
				t.Fatalf("step %d: %s fetched %d times, want %d", step, d, got, uses[d])
			}
			expires[d] = ph.clock().Add(time.Duration(maxAge[d]) * time.Second)
			used = append(used, d)
		}
		ph.advance(30 * time.Minute)
		mustPrune(t, ph.src)

		var want []string
		for d, exp := range expires {
			if ph.clock().Before(exp) {
				want = append(want, d+".json")
			}
		}
		slices.Sort(want)
		if got := ph.files(t); !slices.Equal(got, want) {
			t.Fatalf("step %d, day %d: files\n%v\nwant the unexpired\n%v", step, (step+1)*11, got, want)
		}
		mem, locks := ph.src.inMemory()
		if !slices.Equal(mem, used) || locks != 0 {
			t.Fatalf("step %d: in memory %v and %d fetch locks, want %v and none", step, mem, locks, used)
		}
	}
}

// TestPrunedPolicyStaysInForce: a policy past its refresh time whose
// refetch fails stays in force across prunes until it expires, read again
// from its file once dropped from memory; without a directory, it is kept
// in memory until it expires.
func TestPrunedPolicyStaysInForce(t *testing.T) {
	for _, dir := range []bool{true, false} {
		t.Run(fmt.Sprintf("dir=%v", dir), func(t *testing.T) {
			ph := startPolicyHosts(t, map[string]int{"example.test": 86400})
			if !dir {
				ph.src.Dir = ""
			}
			ctx := context.Background()
			inForce := func(what string) {
				t.Helper()
				if l := ph.src.Get(ctx, "example.test"); l.Policy == nil || l.Failure != "" {
					t.Fatalf("%s: %+v, want the cached policy in force", what, l)
				}
			}
			inForce("first fetch")
			ph.fail.Store(true)
			ph.advance(13 * time.Hour) // past the refresh at 12h
			res := mustPrune(t, ph.src)
			if dir && (res.Dropped != 1 || res.Removed != 0) {
				t.Errorf("13h on: %+v, want the idle policy dropped from memory, its file kept", res)
			}
			if !dir && res.Dropped != 0 {
				t.Errorf("13h on: %+v, want the policy kept in memory: it has no file", res)
			}
			inForce("refetch failed after a prune")
			if got := ph.fetched("example.test"); got != 2 {
				t.Errorf("%d fetches, want the refetch tried", got)
			}
			ph.advance(10 * time.Hour)
			mustPrune(t, ph.src)
			inForce("23h on, after another prune")
			ph.advance(2 * time.Hour) // expired
			res = mustPrune(t, ph.src)
			if dir && res.Removed != 1 || res.Dropped != 1 {
				t.Errorf("expired: %+v, want it dropped and its file removed", res)
			}
			if l := ph.src.Get(ctx, "example.test"); l.Policy != nil || l.Failure != FailFetch {
				t.Errorf("after expiry: %+v, want no policy and %s", l, FailFetch)
			}
			if dir {
				if f := ph.files(t); len(f) != 0 {
					t.Errorf("files left: %v", f)
				}
			}
		})
	}
}

// TestPruneDuringAFetchKeepsTheNewPolicy: a prune that reaches an expired
// policy's file while a fetch of the same domain is replacing it passes
// over it, and the new file stays. Run with -race.
func TestPruneDuringAFetchKeepsTheNewPolicy(t *testing.T) {
	ph := startPolicyHosts(t, map[string]int{"example.test": 86400})
	ctx := context.Background()
	if l := ph.src.Get(ctx, "example.test"); l.Policy == nil {
		t.Fatalf("first fetch: %+v", l)
	}
	ph.advance(25 * time.Hour) // the file holds an expired policy
	hold := make(chan struct{})
	ph.hold.Store(&hold)
	got := make(chan Lookup, 1)
	go func() { got <- ph.src.Get(ctx, "example.test") }()
	testwait.Recv(t, "the refetch to reach the policy host", ph.arrived)

	// The prune either passes over the domain being fetched, or (without
	// the fetch lock) it has read the expired file and is about to remove
	// it: let the fetch finish in both cases before the prune goes on.
	readOld := make(chan struct{})
	goOn := make(chan struct{})
	ph.src.pruneRead = func(string) { close(readOld); <-goOn }
	pruned := make(chan PruneResult, 1)
	go func() {
		res, err := ph.src.Prune()
		if err != nil {
			t.Error(err)
		}
		pruned <- res
	}()
	var res *PruneResult
	testwait.For(t, "the prune to finish or to read the old file", func() bool {
		select {
		case <-readOld:
			return true
		case r := <-pruned:
			res = &r
			return true
		default:
			return false
		}
	})
	ph.hold.Store(nil)
	close(hold)
	if l := testwait.Recv(t, "the refetch", got); l.Policy == nil {
		t.Fatalf("refetch: %+v", l)
	}
	close(goOn)
	if res == nil {
		r := testwait.Recv(t, "the prune", pruned)
		res = &r
	}
	if res.Busy != 1 || res.Removed != 0 {
		t.Errorf("prune %+v, want the file being replaced passed over", *res)
	}
	fresh := &Source{Dir: ph.src.Dir}
	if e := fresh.load("example.test"); e == nil || !ph.clock().Before(e.Expires) {
		t.Fatalf("after the prune the file holds %+v, want the refetched policy", e)
	}
	if _, locks := ph.src.inMemory(); locks != 0 {
		t.Errorf("%d fetch locks left", locks)
	}
}

// TestFIFOInTheCache: a FIFO where a policy file should be neither blocks
// a lookup nor a prune, and goes, as a file that does not parse does,
// once it is older than the longest max_age.
func TestFIFOInTheCache(t *testing.T) {
	ph := startPolicyHosts(t, map[string]int{"example.test": 86400})
	if err := os.MkdirAll(ph.src.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(ph.src.Dir, "example.test.json")
	testwait.FIFO(t, fifo)
	junk := filepath.Join(ph.src.Dir, "junk.test.json")
	if err := os.WriteFile(junk, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(ph.src.Dir, "README")
	if err := os.WriteFile(other, []byte("not the cache's"), 0o600); err != nil {
		t.Fatal(err)
	}
	ph.fail.Store(true)
	l := testwait.Returns(t, "a lookup over a FIFO", func() Lookup { return ph.src.Get(context.Background(), "example.test") })
	if l.Policy != nil || l.Failure != FailFetch {
		t.Errorf("lookup over a FIFO: %+v", l)
	}
	prune := func() PruneResult {
		t.Helper()
		type result struct {
			res PruneResult
			err error
		}
		r := testwait.Returns(t, "a prune over a FIFO", func() result { res, err := ph.src.Prune(); return result{res, err} })
		if r.err != nil {
			t.Fatalf("Prune: %v", r.err)
		}
		return r.res
	}
	if res := prune(); res.Removed != 0 {
		t.Errorf("young files removed: %+v", res)
	}
	old := ph.clock().Add(-MaxAgeLimit - time.Hour)
	for _, p := range []string{fifo, junk, other} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if res := prune(); res.Removed != 2 {
		t.Errorf("a year on: %+v, want the FIFO and the junk removed", res)
	}
	if f := ph.files(t); !slices.Equal(f, []string{"README"}) {
		t.Errorf("files left %v, want only the one the cache does not name", f)
	}
}

// TestPruneRemovesInterruptedWrites: a temporary file of a write that
// did not finish goes at the next prune.
func TestPruneRemovesInterruptedWrites(t *testing.T) {
	ph := startPolicyHosts(t, map[string]int{"example.test": 86400})
	if l := ph.src.Get(context.Background(), "example.test"); l.Policy == nil {
		t.Fatalf("fetch: %+v", l)
	}
	tmp := filepath.Join(ph.src.Dir, ".tmp-example.test.json-123")
	if err := os.WriteFile(tmp, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if res := mustPrune(t, ph.src); res.Removed != 1 {
		t.Errorf("%+v, want the temporary file removed", res)
	}
	if f := ph.files(t); !slices.Equal(f, []string{"example.test.json"}) {
		t.Errorf("files %v", f)
	}
}
