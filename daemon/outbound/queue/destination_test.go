package queue

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/delivery"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// tarpit holds every attempt to tarpit.test until release is closed and
// delivers the others at once, counting attempts in flight per domain.
type tarpit struct {
	release chan struct{}
	entered chan string // each attempt's first recipient, as it starts

	mu      sync.Mutex
	now     map[string]int
	highest map[string]int
}

func newTarpit() *tarpit {
	return &tarpit{release: make(chan struct{}), entered: make(chan string, 64), now: map[string]int{}, highest: map[string]int{}}
}

func (p *tarpit) Deliver(_ context.Context, _ string, rcpts []string, _ []byte) []delivery.Result {
	var doms []string
	for _, r := range rcpts {
		if d := r[strings.LastIndexByte(r, '@')+1:]; !slices.Contains(doms, d) {
			doms = append(doms, d)
		}
	}
	p.mu.Lock()
	for _, d := range doms {
		p.now[d]++
		p.highest[d] = max(p.highest[d], p.now[d])
	}
	p.mu.Unlock()
	p.entered <- rcpts[0]
	if slices.Contains(doms, "tarpit.test") {
		<-p.release
	}
	p.mu.Lock()
	for _, d := range doms {
		p.now[d]--
	}
	p.mu.Unlock()
	var out []delivery.Result
	for _, r := range rcpts {
		out = append(out, delivery.Result{Rcpt: r, TLS: delivery.TLSNone, Host: "mx.test"})
	}
	return out
}

// A destination that holds its connections open cannot take every place:
// with more of its items due than there are places, mail to another domain
// still goes at once, and the slow one never has more than its share.
func TestSlowDestinationLeavesPlacesForOthers(t *testing.T) {
	p := newTarpit()
	n := newNotes()
	q, err := Open(t.TempDir(), p, n, Options{MaxConcurrent: 4}) // 2 per destination by default
	if err != nil {
		t.Fatal(err)
	}
	runQueue(t, q)
	// Runs before runQueue's cleanup, which waits for the attempts to end.
	release := sync.OnceFunc(func() { close(p.release) })
	t.Cleanup(release)
	for i := range 6 {
		if err := q.Enqueue(testItem("slow"+string(rune('a'+i)), "x@tarpit.test")); err != nil {
			t.Fatal(err)
		}
	}
	// Two attempts to the tarpit are under way (and stay so).
	for range 2 {
		if got := testwait.Recv(t, "an attempt to the tarpit to start", p.entered); got != "x@tarpit.test" {
			t.Fatalf("attempt to %s, want the tarpit's", got)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 3 {
		id := "fast" + string(rune('a'+i))
		if err := q.Enqueue(testItem(id, "y@fast.test")); err != nil {
			t.Fatal(err)
		}
		it, err := q.WaitFirstAttempt(ctx, id)
		if err != nil {
			t.Fatalf("%s waited behind the tarpit: %v", id, err)
		}
		if r := recipient(it, "y@fast.test"); r.Status != StatusDelivered {
			t.Fatalf("%s: %+v", id, r)
		}
	}
	// An item for both domains waits for the tarpit's room too.
	if err := q.Enqueue(testItem("both", "z@tarpit.test", "z@fast.test")); err != nil {
		t.Fatal(err)
	}
	release()
	for _, id := range []string{"slowa", "slowb", "slowc", "slowd", "slowe", "slowf", "both"} {
		it, err := q.WaitFirstAttempt(ctx, id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		for _, r := range it.Recipients {
			if r.Status != StatusDelivered {
				t.Fatalf("%s: %+v", id, r)
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.highest["tarpit.test"] != 2 {
		t.Fatalf("at most %d attempts to the tarpit at once, want 2 (max_per_destination)", p.highest["tarpit.test"])
	}
}

func TestDestinations(t *testing.T) {
	it := &Item{Recipients: []protocol.RecipientStatus{
		{Address: "a@Example.COM", Status: StatusPending},
		{Address: "b@example.com", Status: StatusDeferred},
		{Address: "c@done.test", Status: StatusDelivered},
		{Address: "d@failed.test", Status: StatusFailed},
		{Address: "e@held.test", Status: StatusHeld},
		{Address: "f@other.test", Status: StatusPending},
	}}
	if got, want := destinations(it), []string{"example.com", "other.test"}; !slices.Equal(got, want) {
		t.Fatalf("destinations %q, want %q", got, want)
	}
}

func TestPerDestinationDefaultAndBound(t *testing.T) {
	for _, c := range []struct{ total, per, want int }{{0, 0, 4}, {8, 0, 4}, {1, 0, 1}, {3, 0, 1}, {4, 9, 4}, {8, 2, 2}} {
		q, err := Open(t.TempDir(), newScripted(), nil, Options{MaxConcurrent: c.total, MaxPerDestination: c.per})
		if err != nil {
			t.Fatal(err)
		}
		if q.opts.MaxPerDestination != c.want {
			t.Errorf("max_concurrent %d, max_per_destination %d: %d per destination, want %d", c.total, c.per, q.opts.MaxPerDestination, c.want)
		}
		q.Close()
	}
}
