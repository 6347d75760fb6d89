package queue

import (
	"time"
)

// DelayWarner is a Notifier that also warns the sender of an item that is
// still not delivered Options.DelayWarning after it became due (RFC 3464,
// action "delayed"). Delayed returns nil once the warning is stored where
// the sender will find it; the queue then records in its journal that it
// was made, so it is made once per item. A crash between the two makes it
// again on the next start: the warner must recognise one it already made.
type DelayWarner interface {
	Delayed(it *Item, retryUntil time.Time) error
}

// warnRetry holds off a warning that could not be made.
const warnRetry = 10 * time.Minute

// warnAt is when it's sender is due a delay warning; zero when never: it is
// warned already, held, not yet attempted, or has no recipient waiting for
// a retry.
func (q *Queue) warnAt(e *entry) time.Time {
	it := e.it
	if q.opts.DelayWarning <= 0 || !it.DelayWarned.IsZero() || it.Held || it.Attempts == 0 {
		return time.Time{}
	}
	deferred := false
	for _, r := range it.Recipients {
		deferred = deferred || r.Status == StatusDeferred
	}
	if !deferred {
		return time.Time{}
	}
	at := it.start().Add(q.opts.DelayWarning)
	if e.warnAfter.After(at) {
		at = e.warnAfter
	}
	return at
}

// dueWarnings marks the items whose senders are due a warning now and
// returns them (none while a batch is still being made), with how long
// until the next warning falls due.
func (q *Queue) dueWarnings() ([]*entry, time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	wait := time.Hour
	if _, ok := q.n.(DelayWarner); !ok || q.opts.DelayWarning <= 0 || q.warnings {
		return nil, wait
	}
	now := q.opts.Clock()
	var due []*entry
	for _, e := range q.items {
		at := q.warnAt(e)
		switch {
		case at.IsZero() || e.inflight:
		case at.After(now):
			wait = min(wait, at.Sub(now))
		case !now.Before(e.it.start().Add(q.opts.RetryFor)):
			// Its retry window is over (the daemon was down, or the
			// clock stepped): its next attempt gives up on it, and that
			// failure is what its sender hears, not a warning promising
			// retries until a time already past.
		default:
			e.warning = true
			due = append(due, e)
		}
	}
	q.warnings = len(due) > 0
	return due, wait
}

// warn makes the delay warnings of due, one after another, and records
// each one made in the journal (one fsync for the batch).
func (q *Queue) warn(due []*entry) {
	w := q.n.(DelayWarner)
	var last uint64
	for _, e := range due {
		q.mu.Lock()
		it := e.it.clone()
		q.mu.Unlock()
		err := w.Delayed(q.told(it), it.start().Add(q.opts.RetryFor))
		q.mu.Lock()
		e.warning = false
		switch {
		case err != nil:
			e.warnAfter = q.opts.Clock().Add(warnRetry)
			q.log.Error("delay warning not made; trying again later", "item", it.ID, "err", err)
		case q.items[it.ID] != e:
			// Settled (dropped) meanwhile: nothing left to record.
		default:
			e.it.DelayWarned = q.opts.Clock()
			if n, err := q.j.put(e.it); err != nil {
				q.log.Error("delay warning made but not recorded: a restart may make it again", "item", it.ID, "err", err)
			} else {
				last = n
			}
			q.log.Info("delay warning made", "item", it.ID, "message_id", it.MessageID)
		}
		q.mu.Unlock()
	}
	if last > 0 {
		if err := q.j.commit(last); err != nil {
			q.log.Error("delay warnings not synced", "err", err)
		}
	}
	q.mu.Lock()
	q.warnings = false
	q.mu.Unlock()
}
