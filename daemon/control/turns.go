package control

import (
	"context"
	"sync"

	"github.com/mailctl/mailctl/store"
)

// runSlots is how many users' requests run at once, and perUIDSlots how
// many of them one uid may run. Nearly every request reads the message
// index, which has store.IndexConns connections for every caller: without
// a bound, one user's flood of listings (up to 64 connections of 32
// requests each) queued thousands of queries in front of every other
// user's, whose one listing then waited seconds. With it, one uid's
// requests wait behind each other and another uid's start at the next
// free slot.
const (
	runSlots    = store.IndexConns
	perUIDSlots = max(runSlots-1, 1)
)

// turns hands the slots out: a request of a uid with a slot of its share
// free runs at once; the others wait, and a slot that frees goes to the
// waiting request of the uid that runs fewest, the oldest one of those
// first.
type turns struct {
	mu      sync.Mutex
	running int
	byUID   map[uint32]int
	queue   []*turn // in arrival order
}

type turn struct {
	uid     uint32
	ready   chan struct{}
	granted bool
}

// fits says whether a request of uid may start now; called under mu.
func (t *turns) fits(uid uint32) bool {
	return t.running < runSlots && t.byUID[uid] < perUIDSlots
}

func (t *turns) start(uid uint32) {
	if t.byUID == nil {
		t.byUID = map[uint32]int{}
	}
	t.running++
	t.byUID[uid]++
}

// acquire waits for a slot for uid, or for ctx to end.
func (t *turns) acquire(ctx context.Context, uid uint32) error {
	t.mu.Lock()
	if t.fits(uid) {
		t.start(uid)
		t.mu.Unlock()
		return nil
	}
	w := &turn{uid: uid, ready: make(chan struct{})}
	t.queue = append(t.queue, w)
	t.mu.Unlock()
	turnWait(uid)
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		t.mu.Lock()
		if w.granted {
			t.mu.Unlock()
			t.release(uid)
		} else {
			for i, q := range t.queue {
				if q == w {
					t.queue = append(t.queue[:i], t.queue[i+1:]...)
					break
				}
			}
			t.mu.Unlock()
		}
		return ctx.Err()
	}
}

// release gives uid's slot back and hands what is free to the waiting.
func (t *turns) release(uid uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.running--
	if t.byUID[uid]--; t.byUID[uid] <= 0 {
		delete(t.byUID, uid)
	}
	for {
		next := -1
		for i, q := range t.queue {
			if t.fits(q.uid) && (next < 0 || t.byUID[q.uid] < t.byUID[t.queue[next].uid]) {
				next = i
			}
		}
		if next < 0 {
			return
		}
		w := t.queue[next]
		t.queue = append(t.queue[:next], t.queue[next+1:]...)
		t.start(w.uid)
		w.granted = true
		close(w.ready)
	}
}

// turnWait is told of each request that waits for a slot, with its uid
// (tests wait for it).
var turnWait = func(uid uint32) {}
