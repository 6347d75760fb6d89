package queue

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/mailctl/mailctl/protocol"
)

// What callers and operators do with queued items: wait for the first
// attempt, look, retry, drop, approve, reschedule.

func notFound(id string) error {
	return protocol.Errorf(protocol.CodeNotFound, "no queue item %s", id)
}

// WaitFirstAttempt returns once the item's first attempt has finished (or at
// once if it is held or already attempted), or when ctx ends, with the state
// at that moment.
func (q *Queue) WaitFirstAttempt(ctx context.Context, id string) (*Item, error) {
	q.mu.Lock()
	e, ok := q.items[id]
	if !ok {
		e, ok = q.settling[id] // settled, its notifications still running
	}
	if !ok || e.firstDone || e.it.Held || e.it.NextAttempt.After(q.opts.Clock()) && e.it.Scheduled() {
		q.mu.Unlock()
		return q.Get(id)
	}
	ch := e.first
	q.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
	return q.Get(id)
}

// WaitAnnounced returns once the item has settled and its Notifier has
// been told: Settled has returned (or, for an item settled and announced
// before a restart, Run has brought its sent copy up to date). What the
// Notifier started from Settled without waiting for it is not waited for.
// It returns the item's state then, or, when ctx ends first, ctx's error;
// an item the queue does not know (never queued, or settled so long ago
// that it is forgotten) is a not-found error. Tests use it to look at what
// a settled item's notification did: Get's Settled is true before then.
func (q *Queue) WaitAnnounced(ctx context.Context, id string) (*Item, error) {
	q.mu.Lock()
	if q.heard[id] && !q.enqueuing[id] {
		q.mu.Unlock()
		return q.Get(id)
	}
	_, queued := q.items[id]
	_, done := q.done[id]
	if !queued && !done && !q.enqueuing[id] {
		q.mu.Unlock()
		return nil, notFound(id)
	}
	w, ok := q.hearing[id]
	if !ok {
		w = &announceWait{heard: make(chan struct{})}
		q.hearing[id] = w
	}
	w.waiters++
	q.mu.Unlock()
	select {
	case <-w.heard:
		return q.Get(id)
	case <-ctx.Done():
		// The last to give up removes the entry, so that waits that time
		// out on items never heard of leave nothing behind.
		q.mu.Lock()
		if w.waiters--; w.waiters == 0 && q.hearing[id] == w {
			delete(q.hearing, id)
		}
		q.mu.Unlock()
		return nil, ctx.Err()
	}
}

// announceWait is the WaitAnnounced calls waiting for one item.
type announceWait struct {
	heard   chan struct{} // closed once the item is heard of
	waiters int           // calls waiting on heard, under Queue.mu
}

// List returns the items still queued, oldest first.
func (q *Queue) List() []*Item {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []*Item
	for _, e := range q.items {
		out = append(out, e.view())
	}
	slices.SortFunc(out, func(a, b *Item) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.ID, b.ID))
	})
	return out
}

// Get returns a queued item or one settled since the queue was opened.
func (q *Queue) Get(id string) (*Item, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e, ok := q.items[id]; ok {
		return e.view(), nil
	}
	if it, ok := q.done[id]; ok {
		return it.clone(), nil
	}
	return nil, notFound(id)
}

// change applies fn to a queued item that is not being delivered, saves it
// and notifies.
func (q *Queue) change(id string, fn func(it *Item, now time.Time) error) error {
	q.mu.Lock()
	e, ok := q.items[id]
	if !ok {
		q.mu.Unlock()
		if _, done := q.done[id]; done {
			return protocol.Errorf(protocol.CodeConflict, "queue item %s is already settled", id)
		}
		return notFound(id)
	}
	if e.inflight {
		q.mu.Unlock()
		return protocol.Errorf(protocol.CodeConflict, "queue item %s is being delivered right now: try again in a moment", id)
	}
	now := q.opts.Clock()
	backup := e.it.clone()
	if err := fn(e.it, now); err != nil {
		q.mu.Unlock()
		return err
	}
	// As after an attempt, a settled state is saved first and the files go
	// only once the sent copy has heard of it.
	if err := q.save(e.it); err != nil {
		e.it = backup
		q.mu.Unlock()
		return err
	}
	settled := e.it.Settled()
	if settled {
		q.settle(e)
	}
	out := e.it.clone()
	seq := e.next()
	q.mu.Unlock()
	if settled {
		q.notify(e, seq, out, true)
	} else {
		q.tell(e, seq, out, false)
	}
	q.Kick()
	return nil
}

// Retry makes an item due now.
func (q *Queue) Retry(id string) error {
	return q.change(id, func(it *Item, now time.Time) error {
		if it.Held {
			return protocol.Errorf(protocol.CodeConflict, "queue item %s is held for approval: approve it to send", id)
		}
		it.NextAttempt = now
		for i := range it.Recipients {
			if it.Recipients[i].Status == StatusDeferred {
				it.Recipients[i].NextAttempt = now
			}
		}
		return nil
	})
}

// Drop removes an item; its undelivered recipients are marked failed.
func (q *Queue) Drop(id string) error {
	return q.change(id, func(it *Item, now time.Time) error {
		dropRecipients(it, now)
		return nil
	})
}

// dropRecipients fails its recipients not yet final as dropped: a
// decision, not a delivery failure.
func dropRecipients(it *Item, now time.Time) {
	for i := range it.Recipients {
		r := &it.Recipients[i]
		if !Final(r.Status) {
			r.Status, r.Detail, r.UpdatedAt, r.NextAttempt = StatusFailed, DetailDropped, now, time.Time{}
		}
	}
}

// DropEventually drops an item now, or, when an attempt is delivering it
// right now, as soon as that attempt ends without settling it: what the
// attempt delivered stays delivered, and nothing is tried again. An item
// no longer queued (settled meanwhile) is no error. The mark on an item in
// flight is durable when it returns: if the daemon dies before the attempt
// ends, the next start drops the item (Item.Dropping).
func (q *Queue) DropEventually(id string) error {
	for {
		err := q.Drop(id)
		var pe *protocol.Error
		if err == nil || !errors.As(err, &pe) || pe.Code != protocol.CodeConflict {
			return err
		}
		q.mu.Lock()
		e, ok := q.items[id]
		switch {
		case !ok:
			q.mu.Unlock()
			return nil // settled
		case e.inflight:
			e.dropAfter = true
			q.mu.Unlock()
			w, ok, err := q.j.markDropping(id)
			if err != nil || !ok {
				return err
			}
			return q.j.commit(w)
		}
		q.mu.Unlock()
		// The attempt ended between the two looks: drop it now.
	}
}

// Approve releases a held item for delivery now.
func (q *Queue) Approve(id string) error {
	return q.change(id, func(it *Item, now time.Time) error {
		if !it.Held {
			return protocol.Errorf(protocol.CodeConflict, "queue item %s is not held", id)
		}
		it.Held = false
		it.NextAttempt = now
		if it.Attempts == 0 && it.SendAt.After(now) {
			it.NextAttempt = it.SendAt // released, and still waits for its time
		}
		for i := range it.Recipients {
			if it.Recipients[i].Status == StatusHeld {
				it.Recipients[i].Status, it.Recipients[i].UpdatedAt = StatusPending, now
			}
		}
		return nil
	})
}

// Reschedule sets when an item not yet attempted goes out. at must not be
// zero; bounds on it are the caller's.
func (q *Queue) Reschedule(id string, at time.Time) error {
	return q.change(id, func(it *Item, now time.Time) error {
		if it.Attempts > 0 {
			return protocol.Errorf(protocol.CodeConflict, "queue item %s has already been attempted: retry it instead", id)
		}
		it.SendAt = at.UTC()
		it.NextAttempt = it.SendAt
		return nil
	})
}
