package smtpin

import (
	"io"
	"runtime"
	"sync"
	"time"
)

// transfers keeps a connection's BDAT transfers from leaking goroutines.
// go-smtp runs Data for a transfer in a goroutine of its own, which, once
// Data returns, sends the result to the channel of the connection's current
// transfer, one slot deep (docs/go-smtp.md, point 6). When a transfer ends
// without BDAT LAST (RSET, a chunk past the limit) after the client has begun
// another, its result takes that one's slot; if that one ends the same way,
// its own send finds the slot taken and blocks for ever, and the goroutine
// keeps the connection with it. A client repeating that leaked a goroutine
// on most tries, as fast as it could send (TestBDATAbortsLeakNoGoroutines).
//
// A transfer needs a MAIL first, so MAIL waits until the Data of every
// earlier transfer has returned and its goroutine has sent the result, to the
// slot of its own transfer, which is free: it closes the transfer's pipe
// reader right after. A transfer whose first chunk is
// empty may not have entered Data yet when the next MAIL comes (go-smtp
// starts its goroutine and answers without waiting for it); so when the
// transaction before had recipients and no Data was seen for it, MAIL first
// gives that goroutine a moment (lateData) to show up.
type transfers struct {
	mu      sync.Mutex
	running []transfer
	// armed: a recipient was accepted and no Data has begun since.
	armed bool
	// begun is closed (and replaced) when a Data begins.
	begun chan struct{}
}

// transfer is a BDAT transfer's Data: done is closed when it returns, and
// go-smtp closes r once it has sent the result on.
type transfer struct {
	done chan struct{}
	r    *io.PipeReader
}

// lateData is how long MAIL waits for the Data of a transaction that had
// recipients but no Data yet: time for a goroutine already started to be
// scheduled, paid only by a client that begins a new transaction after
// accepted recipients without sending any data.
const lateData = 50 * time.Millisecond

// rcpt notes that the transaction has a recipient, so a BDAT may follow.
func (t *transfers) rcpt() {
	t.mu.Lock()
	t.armed = true
	t.mu.Unlock()
}

// begin records a Data as running; r is its transfer's pipe when it is a
// BDAT transfer's, run in go-smtp's own goroutine, else nil. Call end when
// Data returns.
func (t *transfers) begin(r *io.PipeReader) (end func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.armed = false
	if t.begun != nil {
		close(t.begun)
		t.begun = nil
	}
	if r == nil {
		return func() {}
	}
	tr := transfer{done: make(chan struct{}), r: r}
	t.running = append(t.running, tr)
	return func() { close(tr.done) }
}

// settle waits, at most limit, until the Data of every transfer begun so far
// has returned and its result is sent on, and reports whether that happened.
// Data returns promptly once its transfer is over (its pipe is closed, as it
// is by the time of a MAIL), and the result is sent right after; the wait is
// bounded all the same.
func (t *transfers) settle(limit time.Duration) bool {
	// A goroutine just started by this one gets to run here.
	runtime.Gosched()
	t.mu.Lock()
	if t.armed {
		if t.begun == nil {
			t.begun = make(chan struct{})
		}
		begun := t.begun
		t.mu.Unlock()
		wait := time.NewTimer(lateData)
		select {
		case <-begun:
		case <-wait.C:
		}
		wait.Stop()
		t.mu.Lock()
		t.armed = false
	}
	running := t.running
	t.running = nil
	t.mu.Unlock()
	if len(running) == 0 {
		return true
	}
	deadline := time.Now().Add(limit)
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for i, tr := range running {
		select {
		case <-tr.done:
		case <-timer.C:
			t.keep(running[i:])
			return false
		}
		// The pipe's writer is closed, so reading it never blocks: it says
		// how the transfer ended until go-smtp closes the reader too, which
		// it does right after sending the result. Should that send ever
		// block, the wait backs off to a millisecond a try rather than
		// spin a CPU until the deadline.
		for try := 0; ; try++ {
			if _, err := tr.r.Read(nil); err == io.ErrClosedPipe {
				break
			}
			if time.Now().After(deadline) {
				t.keep(running[i:])
				return false
			}
			if try < 64 {
				runtime.Gosched()
			} else {
				time.Sleep(time.Millisecond)
			}
		}
	}
	return true
}

// keep puts back transfers a settle could not wait for.
func (t *transfers) keep(running []transfer) {
	t.mu.Lock()
	t.running = append(running, t.running...)
	t.mu.Unlock()
}
