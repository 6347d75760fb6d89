package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/mailctl/mailctl/protocol"
)

// heldSettled holds Settled until released, to stand in for a Notifier
// still at work on a settled item (a bounce, after_send) when a test looks.
type heldSettled struct {
	*notes
	entered, release chan struct{}
	returned         atomic.Bool // Settled has returned
}

func (h *heldSettled) Settled(it *Item) {
	close(h.entered)
	<-h.release
	h.notes.Settled(it)
	h.returned.Store(true)
}

// An item reads as settled while its Notifier is still being told of it:
// WaitAnnounced waits until Settled has returned, so a test can look at
// what the notification did (or did not do) once it does.
func TestWaitAnnouncedWaitsForSettledToReturn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &heldSettled{notes: newNotes(), entered: make(chan struct{}), release: make(chan struct{})}
		q, err := Open(t.TempDir(), &countingDeliverer{count: map[string]int{}}, h, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		if _, err := q.WaitAnnounced(context.Background(), "a1"); !isNotFound(err) {
			t.Fatalf("waiting for an item never queued: %v, want not found", err)
		}
		if err := q.Enqueue(testItem("a1", "a@remote.test")); err != nil {
			t.Fatal(err)
		}
		// One waiter comes while the item is queued, one while Settled
		// runs (as a test that saw Get say settled would).
		answered := make(chan *Item, 2)
		wait := func() {
			it, err := q.WaitAnnounced(context.Background(), "a1")
			if err != nil {
				t.Error(err)
			}
			if !h.returned.Load() {
				t.Error("WaitAnnounced returned before Settled did")
			}
			answered <- it
		}
		go wait()
		synctest.Wait() // the early waiter is blocked
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { q.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		release := sync.OnceFunc(func() { close(h.release) })
		defer release() // before the queue stops, should the test end early
		<-h.entered
		if it, err := q.Get("a1"); err != nil || !it.Settled() {
			t.Fatalf("while Settled runs, Get says %+v, %v; want the item settled already", it, err)
		}
		go wait()
		synctest.Wait() // the waiters have returned, or are blocked
		select {
		case <-answered:
			t.Fatal("WaitAnnounced returned while Settled was still running")
		default:
		}
		short, stop := context.WithCancel(context.Background())
		stop()
		if _, err := q.WaitAnnounced(short, "a1"); !errors.Is(err, context.Canceled) {
			t.Fatalf("a wait whose context ended: %v, want its error", err)
		}
		release()
		for range 2 {
			if it := <-answered; it == nil || !it.Settled() {
				t.Fatalf("WaitAnnounced gave %+v, want the settled item", it)
			}
		}
		// Heard of: a later wait returns at once.
		if it, err := q.WaitAnnounced(context.Background(), "a1"); err != nil || !it.Settled() {
			t.Fatalf("waiting again: %+v, %v", it, err)
		}
	})
}

func isNotFound(err error) bool {
	var pe *protocol.Error
	return errors.As(err, &pe) && pe.Code == protocol.CodeNotFound
}

// A wait whose context ends before the item is heard of leaves nothing
// behind: waits that time out, however many, do not grow the queue.
func TestWaitAnnouncedForgetsWaitsThatGaveUp(t *testing.T) {
	q, err := Open(t.TempDir(), &countingDeliverer{count: map[string]int{}}, newNotes(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 100 {
		id := fmt.Sprintf("a%d", i)
		if err := q.Enqueue(testItem(id, "a@remote.test")); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := q.WaitAnnounced(ended, id); !errors.Is(err, context.Canceled) {
				t.Fatalf("a wait whose context ended: %v, want its error", err)
			}
		}
	}
	if n := q.announceWaits(); n != 0 {
		t.Errorf("%d items still have waiters after every wait gave up, want 0", n)
	}
}

// announceWaits is the number of items WaitAnnounced calls wait for.
func (q *Queue) announceWaits() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.hearing)
}
