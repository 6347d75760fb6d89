package queue

import "time"

// A checkpoint (a Flush, then the settled items' drop records) runs once a
// second while items wait for one, or at once when checkpointBatch wait.
const (
	checkpointEvery = time.Second
	checkpointBatch = 256
)

// settledAnnounced records that a settled item has been announced and
// leaves its removal to the next checkpoint, once what the notifier wrote
// is durable. The item counts as heard of from then on, and its
// WaitAnnounced waiters are woken, in the critical section that records it.
func (q *Queue) settledAnnounced(id string) {
	q.j.announce(id)
	q.mu.Lock()
	q.forget = append(q.forget, id)
	if _, ok := q.done[id]; ok {
		q.heard[id] = true
	}
	if w, ok := q.hearing[id]; ok {
		close(w.heard)
		delete(q.hearing, id)
	}
	n := len(q.forget)
	q.mu.Unlock()
	if q.opts.Flush == nil {
		q.checkpoint()
	} else if n >= checkpointBatch {
		q.Kick()
	}
}

// checkpoint makes what the notifier wrote durable (Flush), then drops the
// settled items announced before it from the journal. Losing a drop record
// to a crash only makes the next start update the sent copy again.
func (q *Queue) checkpoint() {
	q.ckMu.Lock()
	defer q.ckMu.Unlock()
	q.mu.Lock()
	ids := q.forget
	q.forget = nil
	q.lastCk = time.Now()
	q.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	if q.opts.Flush != nil {
		if err := q.opts.Flush(); err != nil {
			q.log.Error("cannot make the sent copies durable; settled items stay in the queue journal", "items", len(ids), "err", err)
			q.mu.Lock()
			q.forget = append(ids, q.forget...)
			q.mu.Unlock()
			return
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, id := range ids {
		if _, requeued := q.items[id]; !requeued {
			q.j.drop(id)
		}
	}
}

// checkpointDue is how long until a checkpoint is due: 0 when one is, an
// hour when no settled item waits for one.
func (q *Queue) checkpointDue() time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.forget) == 0 {
		return time.Hour
	}
	if len(q.forget) >= checkpointBatch {
		return 0
	}
	return max(checkpointEvery-time.Since(q.lastCk), 0)
}
