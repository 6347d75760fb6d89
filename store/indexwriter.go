package store

import (
	"database/sql"
	"sync"
	"sync/atomic"
	"time"
)

// The index writer takes the index rows of messages the store just wrote
// and writes them to the database in batches, off the path that answers a
// delivery: a caller hands its row over (indexAfterWrite) and goes on.
// Every read of the index first waits for what is queued to be written
// (flush), so a listing after a write always shows it; under steady
// delivery a row is written within one batch, milliseconds.

// Bounds of what the writer holds: past maxPendingBytes of queued rows a
// caller waits for room (the database is slower than the mail arriving).
const (
	maxBatch        = 512
	maxPendingBytes = 32 << 20
)

// writeDelay is how long the writer lets rows gather before it writes them,
// unless a reader waits for them (flush) or a batch is full: a commit costs
// the full-text index a new segment, so fewer, larger commits cost less.
var writeDelay = 200 * time.Millisecond

// indexOp is one change for the writer.
type indexOp struct {
	gen      uint64
	fid, mid int64
	row      *indexRow // a message to write
	del      string    // a message to remove
	done     chan error
	size     int
	at       time.Time // when it was queued
}

type indexWriter struct {
	x       *indexDB
	mu      sync.Mutex
	cond    *sync.Cond
	ops     []*indexOp
	bytes   int
	closed  bool
	stopped chan struct{}
	// lost records folders whose queued changes could not be written:
	// they are scanned again.
	lost sync.Map // fid -> true
}

// holdRows, set by HoldIndexWrites, keeps message rows queued: a test
// stops the process in that state.
var holdRows atomic.Bool

// HoldIndexWrites makes the index writer keep every message row it is given
// queued, unwritten, for the rest of the process's life. It exists for tests
// that kill the daemon between a delivery's answer and its index write.
func HoldIndexWrites() { holdRows.Store(true) }

func newIndexWriter(x *indexDB) *indexWriter {
	w := &indexWriter{x: x, stopped: make(chan struct{})}
	w.cond = sync.NewCond(&w.mu)
	go w.loop()
	return w
}

// add queues op, waiting while the queue is full.
func (w *indexWriter) add(op *indexOp) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.bytes > maxPendingBytes && !w.closed {
		w.cond.Wait()
	}
	if w.closed {
		if op.done != nil {
			op.done <- errStaleGen
		}
		if op.fid != 0 {
			w.lost.Store(op.fid, true)
		}
		return
	}
	op.at = time.Now()
	w.ops = append(w.ops, op)
	w.bytes += op.size
	w.cond.Broadcast()
}

// flush waits until everything queued before it is written.
func (w *indexWriter) flush() error {
	op := &indexOp{done: make(chan error, 1)}
	w.add(op)
	return <-op.done
}

func (w *indexWriter) flushQuiet() { w.flush() }

// stop writes what is queued and ends the writer.
func (w *indexWriter) stop() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.cond.Broadcast()
	w.mu.Unlock()
	<-w.stopped
}

// take waits for ops and returns the next batch (nil once stopped and
// empty).
func (w *indexWriter) take() []*indexOp {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		if wait := w.gather(); wait > 0 {
			t := time.AfterFunc(wait, func() {
				w.mu.Lock()
				w.cond.Broadcast()
				w.mu.Unlock()
			})
			w.cond.Wait()
			t.Stop()
			continue
		}
		var batch, keep []*indexOp
		hold := holdRows.Load()
		for _, op := range w.ops {
			if len(batch) < maxBatch && !(hold && (op.row != nil || op.del != "" || len(keep) > 0)) {
				batch = append(batch, op)
			} else {
				keep = append(keep, op)
			}
		}
		if len(batch) > 0 {
			w.ops = keep
			for _, op := range batch {
				w.bytes -= op.size
			}
			w.cond.Broadcast()
			return batch
		}
		if w.closed {
			// Held rows stay unwritten: they are read from the files.
			for _, op := range w.ops {
				if op.done != nil {
					op.done <- errStaleGen
				}
			}
			w.ops = nil
			return nil
		}
		w.cond.Wait()
	}
}

// gather returns how long to wait for more rows before taking a batch:
// none when nobody waits for them and the oldest is younger than
// writeDelay. Called with w.mu held.
func (w *indexWriter) gather() time.Duration {
	if len(w.ops) == 0 || w.closed || len(w.ops) >= maxBatch || holdRows.Load() {
		return 0
	}
	for _, op := range w.ops {
		if op.done != nil {
			return 0
		}
	}
	return writeDelay - time.Since(w.ops[0].at)
}

func (w *indexWriter) loop() {
	defer close(w.stopped)
	for {
		batch := w.take()
		if batch == nil {
			return
		}
		err := w.apply(batch)
		for _, op := range batch {
			if err != nil && op.fid != 0 && (op.row != nil || op.del != "") {
				w.lost.Store(op.fid, true)
			}
			if op.done != nil {
				op.done <- err
			}
		}
	}
}

// apply writes a batch in one transaction. Ops meant for an earlier
// database are dropped: the folders they concern are scanned anew.
func (w *indexWriter) apply(batch []*indexOp) error {
	_, gen := w.x.handle()
	work := false
	for _, op := range batch {
		if op.gen == gen && (op.row != nil || op.del != "") {
			work = true
		}
	}
	if !work {
		return nil
	}
	err := w.x.write(gen, func(tx *sql.Tx) error {
		return writeRows(tx, func(rw *rowWriter) error {
			for _, op := range batch {
				if op.gen != gen {
					continue
				}
				var err error
				switch {
				case op.row != nil:
					err = rw.put(op.fid, op.mid, op.row)
				case op.del != "":
					err = rw.remove(op.fid, op.del)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
	})
	w.x.damagedAsync(gen, err)
	return err
}
