package queue

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/delivery"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/internal/testwait"
)

// clockedDeliverer records the clock's time at each attempt, so an attempt
// made too early shows in what it recorded, whenever the test looks.
type clockedDeliverer struct {
	clk *testclock.Clock
	mu  sync.Mutex
	at  map[string][]time.Time
}

func (c *clockedDeliverer) Deliver(_ context.Context, _ string, rcpts []string, _ []byte) []delivery.Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []delivery.Result
	for _, r := range rcpts {
		c.at[r] = append(c.at[r], c.clk.Now())
		out = append(out, delivery.Result{Rcpt: r, TLS: delivery.TLSNone})
	}
	return out
}

func (c *clockedDeliverer) attempts(rcpt string) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.at[rcpt]...)
}

// A scheduled item survives the daemon dying without a clean shutdown (the
// queue reopened from disk while the first one was never closed), is not
// attempted before its time, and goes out once at it.
func TestQueueScheduledSurvivesKillAndGoesOutAtItsTime(t *testing.T) {
	dir := t.TempDir()
	clk := testclock.New()
	d := &clockedDeliverer{clk: clk, at: map[string][]time.Time{}}
	q1, err := Open(dir, d, newNotes(), Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q1.Run(ctx); close(done) }()
	sendAt := clk.Now().Add(2 * time.Hour)
	it := testItem("s1", "later@remote.test")
	it.SendAt = sendAt
	if err := q1.Enqueue(it); err != nil {
		t.Fatal(err)
	}
	// The sender is answered at once: nothing will be attempted for hours.
	got, err := q1.WaitFirstAttempt(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	if !got.Scheduled() || !got.NextAttempt.Equal(sendAt) || got.Attempts != 0 {
		t.Fatalf("after enqueue: scheduled=%v next=%v attempts=%d, want scheduled for %v", got.Scheduled(), got.NextAttempt, got.Attempts, sendAt)
	}
	if qi := got.QueueItem(); !qi.Scheduled || qi.SendAt == nil || !qi.SendAt.Equal(sendAt) {
		t.Fatalf("listed as %+v, want scheduled with send_at %v", qi, sendAt)
	}
	// kill -9: the loop stops, the journal is never closed or compacted.
	cancel()
	testwait.Recv(t, "the queue to stop", done)

	clk.Advance(time.Hour)
	n := newNotes()
	q2, err := Open(dir, d, n, Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	got, err = q2.Get("s1")
	if err != nil {
		t.Fatalf("scheduled item lost by the restart: %v", err)
	}
	if !got.Scheduled() || !got.NextAttempt.Equal(sendAt) {
		t.Fatalf("after restart: scheduled=%v next=%v, want %v", got.Scheduled(), got.NextAttempt, sendAt)
	}
	runQueue(t, q2)
	clk.Advance(time.Hour - time.Second)
	q2.Kick()
	clk.Advance(time.Second)
	q2.Kick()
	settled := n.waitSettled(t)
	if r := recipient(settled, "later@remote.test"); r.Status != StatusDelivered {
		t.Fatalf("at its time: %+v", r)
	}
	at := d.attempts("later@remote.test")
	if len(at) != 1 || at[0].Before(sendAt) {
		t.Fatalf("attempts at %v, want exactly one at or after %v", at, sendAt)
	}
}

func TestQueueRescheduleAndApproveKeepTheTime(t *testing.T) {
	clk := testclock.New()
	d := &clockedDeliverer{clk: clk, at: map[string][]time.Time{}}
	n := newNotes()
	q, err := Open(t.TempDir(), d, n, Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	runQueue(t, q)
	it := testItem("s2", "x@remote.test")
	it.SendAt = clk.Now().Add(time.Hour)
	it.Held = true
	if err := q.Enqueue(it); err != nil {
		t.Fatal(err)
	}
	// Approving a held scheduled send releases it for its time, not now.
	if err := q.Approve("s2"); err != nil {
		t.Fatal(err)
	}
	if got, _ := q.Get("s2"); !got.Scheduled() || got.Held {
		t.Fatalf("after approve: %+v", got)
	}
	later := clk.Now().Add(3 * time.Hour)
	if err := q.Reschedule("s2", later); err != nil {
		t.Fatal(err)
	}
	if got, _ := q.Get("s2"); !got.NextAttempt.Equal(later) || !got.SendAt.Equal(later) {
		t.Fatalf("after reschedule: next %v send_at %v, want %v", got.NextAttempt, got.SendAt, later)
	}
	clk.Advance(time.Hour)
	q.Kick()
	clk.Advance(2 * time.Hour)
	q.Kick()
	n.waitSettled(t)
	if at := d.attempts("x@remote.test"); len(at) != 1 || at[0].Before(later) {
		t.Fatalf("attempts at %v, want one at or after %v", at, later)
	}
	// A settled item cannot be rescheduled.
	testwait.For(t, "s2 to leave the queue", func() bool { return len(q.List()) == 0 })
	if err := q.Reschedule("s2", later); err == nil {
		t.Fatal("rescheduled a settled item")
	}
}
