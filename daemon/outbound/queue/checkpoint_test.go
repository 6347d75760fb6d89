package queue

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/internal/testwait"
)

// flusher is an Options.Flush a test controls: it fails while failing is
// set, and notes whether the item was still in the journal each time.
type flusher struct {
	t       *testing.T
	dir, id string

	mu      sync.Mutex
	failing bool
	calls   int
	held    []bool // the item was in the journal when Flush ran
}

func (f *flusher) Flush() error {
	_, in := journalItems(f.t, f.dir)[f.id]
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.held = append(f.held, in)
	if f.failing {
		return errors.New("disk full")
	}
	return nil
}

func (f *flusher) set(failing bool) {
	f.mu.Lock()
	f.failing = failing
	f.mu.Unlock()
}

func (f *flusher) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// A settled item leaves the journal only after a Flush has made its sent
// copy durable; while Flush fails it stays.
func TestQueueForgetsSettledOnlyAfterFlush(t *testing.T) {
	dir := t.TempDir()
	f := &flusher{t: t, dir: dir, id: "c1", failing: true}
	n := newNotes()
	q, err := Open(dir, &countingDeliverer{count: map[string]int{}}, n, Options{Clock: testclock.New().Now, Flush: f.Flush})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Enqueue(testItem("c1", "a@remote.test")); err != nil {
		t.Fatal(err)
	}
	runQueue(t, q)
	n.waitSettled(t)
	testwait.For(t, "a failed checkpoint", func() bool { return f.count() >= 1 })
	if _, ok := journalItems(t, dir)["c1"]; !ok {
		t.Fatal("the item left the journal although Flush failed")
	}
	f.set(false)
	testwait.For(t, "the item gone from the journal", func() bool { _, ok := journalItems(t, dir)["c1"]; return !ok })
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, in := range f.held {
		if !in {
			t.Fatalf("Flush %d ran after the item had left the journal", i+1)
		}
	}
}

// An item settled and announced, whose sent copy was not yet durable when
// the daemon stopped, brings the sent copy up to date at the next start
// without announcing it again (no second after_send hook).
func TestQueueRestartUpdatesAnnouncedItemOnce(t *testing.T) {
	dir := t.TempDir()
	f := &flusher{t: t, dir: dir, id: "r1", failing: true}
	n1 := newNotes()
	q1, err := Open(dir, &countingDeliverer{count: map[string]int{}}, n1, Options{Clock: testclock.New().Now, Flush: f.Flush})
	if err != nil {
		t.Fatal(err)
	}
	if err := q1.Enqueue(testItem("r1", "a@remote.test")); err != nil {
		t.Fatal(err)
	}
	// Another item that has not settled, to show it is kept apart.
	held := testItem("r2", "b@remote.test")
	held.Held = true
	if err := q1.Enqueue(held); err != nil {
		t.Fatal(err)
	}
	stop := runUntil(t, q1)
	n1.waitSettled(t)
	stop()
	q1.Close()
	if _, ok := journalItems(t, dir)["r1"]; !ok {
		t.Fatal("the settled item left the journal although Flush failed")
	}

	n2 := newNotes()
	q2, err := Open(dir, &countingDeliverer{count: map[string]int{}}, n2, Options{Clock: testclock.New().Now})
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	runQueue(t, q2)
	testwait.For(t, "the settled item gone from the journal", func() bool { _, ok := journalItems(t, dir)["r1"]; return !ok })
	n2.mu.Lock()
	defer n2.mu.Unlock()
	if len(n2.updated) != 1 || n2.updated[0].ID != "r1" {
		t.Fatalf("updates after the restart: %d, want r1 once", len(n2.updated))
	}
	if _, ok := journalItems(t, dir)["r2"]; !ok {
		t.Fatal("the held item left the journal")
	}
	if len(n2.settled) != 0 {
		t.Fatalf("r1 announced again after the restart: %v", (<-n2.settled).ID)
	}
}

// runUntil runs q until the returned stop is called.
func runUntil(t testing.TB, q *Queue) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	return func() { cancel(); testwait.Recv(t, "the queue to stop", done) }
}

// Announcements survive a rewrite of the journal.
func TestJournalCompactionKeepsAnnouncements(t *testing.T) {
	dir := t.TempDir()
	j, _, err := openJournal(dir, func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a1", "a2"} {
		it := testItem(id, "x@remote.test")
		it.Size = int64(len(it.Data))
		if _, err := j.enqueue(it, it.Data, nil); err != nil {
			t.Fatal(err)
		}
	}
	j.announce("a1")
	j.mu.Lock()
	err = j.compactLocked()
	j.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	j.close()
	j2, items, err := openJournal(dir, func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	defer j2.close()
	if !items["a1"].announced || items["a2"].announced {
		t.Fatalf("after the rewrite: a1 announced %v, a2 announced %v", items["a1"].announced, items["a2"].announced)
	}
}

// blockingNotes holds Updated until released, to stand in for a Notifier
// still writing the sent copy when a waiter arrives.
type blockingNotes struct {
	*notes
	entered, release chan struct{}
	settledSeen      chan struct{}
}

func (b *blockingNotes) Queued(*Item) {}

func (b *blockingNotes) Updated(it *Item) {
	b.entered <- struct{}{}
	<-b.release
	b.notes.Updated(it)
}

func (b *blockingNotes) Settled(it *Item) {
	close(b.settledSeen)
	b.notes.Settled(it)
}

// A waiter for the first attempt that arrives after the item has settled,
// but while the Notifier is still at work, waits for the Notifier: a send
// is never answered before its sent copy and after_send.
func TestWaitFirstAttemptWaitsForTheNotifier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &blockingNotes{notes: newNotes(), entered: make(chan struct{}, 1), release: make(chan struct{}), settledSeen: make(chan struct{})}
		q, err := Open(t.TempDir(), &countingDeliverer{count: map[string]int{}}, b, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		if err := q.Enqueue(testItem("w1", "a@remote.test")); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { q.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		<-b.entered // settled, out of the queued items, notifier at work
		type answer struct {
			it           *Item
			afterSettled bool
		}
		answered := make(chan answer, 1)
		go func() {
			it, _ := q.WaitFirstAttempt(context.Background(), "w1")
			select {
			case <-b.settledSeen:
				answered <- answer{it, true}
			default:
				answered <- answer{it, false}
			}
		}()
		synctest.Wait() // the waiter has returned, or is blocked
		select {
		case <-answered:
			t.Fatal("the waiter returned while the notifier was still at work")
		default:
		}
		close(b.release)
		a := <-answered
		if !a.afterSettled {
			t.Fatal("the waiter returned before Settled ran")
		}
		if a.it == nil || !a.it.Settled() {
			t.Fatalf("waiter got %+v", a.it)
		}
	})
}
