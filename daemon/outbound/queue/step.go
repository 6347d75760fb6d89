package queue

import (
	"context"
	"sync"
)

// Step does at once what Run's loop does when woken, and returns when it
// is done: every attempt due at the queue's clock, then the delay
// warnings due, then a checkpoint. It is for a test that steps its clock
// and must read a state no attempt is still changing (the year-in-a-minute
// tests), with Run not running.
func (q *Queue) Step() {
	var wg sync.WaitGroup
	slots := make(chan struct{}, 1<<16)
	// Rounds until none starts: the limit per destination leaves items of
	// a busy destination for the round after its attempts end.
	for {
		_, started := q.dispatch(context.Background(), slots, make(chan struct{}, 1), &wg)
		wg.Wait()
		if started == 0 {
			break
		}
	}
	if due, _ := q.dueWarnings(); len(due) > 0 {
		q.warn(due)
	}
	q.checkpoint()
}
