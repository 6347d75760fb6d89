// Package queue is the durable outbound queue: per-recipient state, retries
// with backoff, the next attempt recorded before dialing, corrupt items set
// aside. It delivers through a delivery.Deliverer and tells a Notifier.
package queue

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/delivery"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/protocol"
)

// Notifier hears about queue changes. Queued comes first, once the new
// item's journal record is durable and before any attempt can start, with
// the item's Data and Copy set; Updated follows every attempt and operator
// action; Settled follows the Updated that made every recipient final.
type Notifier interface {
	Queued(it *Item)
	Updated(it *Item)
	Settled(it *Item)
}

// unheard is the Notifier of a queue that nobody listens to.
type unheard struct{}

func (unheard) Queued(*Item)  {}
func (unheard) Updated(*Item) {}
func (unheard) Settled(*Item) {}

// Restorer is a Notifier that also hears, when Run starts, of every item
// the journal held that has not settled, so that it can redo what a crash
// may have cut short (the sent copy of an item queued just before).
type Restorer interface {
	Restore(it *Item)
}

// Options tunes a Queue. Zero values take the defaults.
type Options struct {
	Clock         func() time.Time
	RetryFor      time.Duration   // default 5 days
	Backoff       []time.Duration // delay after attempt n; the last repeats
	MaxConcurrent int             // default 8
	// MaxPerDestination bounds the attempts in flight to one recipient
	// domain, so that a few slow or tarpitting destinations cannot hold
	// every place while mail to others waits. Default: half of
	// MaxConcurrent (at least 1); never more than MaxConcurrent.
	MaxPerDestination int
	// Owner, when set, tells the uid that owns the mailbox named mailbox
	// with the identity mailboxID ("" on an item from before identities
	// were recorded: whichever has the name), ok false when it does not
	// know (no such mailbox now, or another one under its name). The
	// attempts of one owner's items hold at most OwnerShare(MaxConcurrent)
	// places at once, so that a user whose mail goes to slow destinations
	// cannot hold back everyone else's; an item whose owner is not known
	// counts against its mailbox instead (see shareKey). It is called with
	// the queue's lock held: it must not block or call the queue.
	Owner func(mailbox, mailboxID string) (uid uint32, ok bool)
	// DelayWarning is how long after an item became due its sender is
	// warned, once, that it is still not delivered, when the Notifier is a
	// DelayWarner. Zero: never.
	DelayWarning time.Duration
	// Observe, when set, hears of every attempt once its outcome is
	// recorded (for metrics): the item as the attempt left it, the
	// results, and whether it was the item's first attempt. It must not
	// block.
	Observe func(it *Item, results []delivery.Result, first bool)
	Logger  *slog.Logger
	// Served, when set, tells whether the mailbox named mailbox is still
	// served as the one with the identity mailboxID that queued the item.
	// It is asked before each attempt; while it says no (the mailbox's
	// declaration taken out of config.toml, given another owner, or its
	// owner not resolvable for now), the attempt sends nothing: every
	// recipient not yet final gets the temporary failure
	// DetailNotServed, and backoff, the retry window and the Notifier
	// take it from there as after any deferral. The item is never
	// dropped for it. Nil: every mailbox is served. It is called without
	// the queue's lock and must not call the queue.
	Served func(mailbox, mailboxID string) bool
	// Flush makes durable what the Notifier has written (the sent
	// copies' delivery status, which it may write without fsync). The
	// queue forgets a settled item only after a Flush that began after the
	// item was announced, so a power loss before then announces the item
	// again instead of leaving a stale sent copy. Nil: what the Notifier
	// writes is durable when it returns.
	Flush func() error
}

// DefaultBackoff spaces retries of temporary failures: quick at first for
// greylisting, then hours apart.
var DefaultBackoff = []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour, 16 * time.Hour}

type entry struct {
	it        *Item
	inflight  bool
	firstDone bool
	first     chan struct{} // closed when the first attempt has finished
	// seq numbers the states the Notifier is to hear of (with q.mu
	// held). The Notifier hears of them in that order: an operator's
	// change and the attempt it makes due can end at once, and the
	// change's older state must not overwrite the attempt's outcome.
	seq     uint64
	tellMu  sync.Mutex // held while the Notifier hears of a state
	toldSeq uint64     // the newest state told (with tellMu held)
	// warning is true while the sender is being warned of the delay: no
	// attempt starts meanwhile, so the attempt's outcome cannot overwrite
	// the warning's record. warnAfter holds off a warning that failed.
	warning   bool
	warnAfter time.Time
	// dropAfter drops the item as soon as the attempt in flight ends
	// without settling it (DropEventually).
	dropAfter bool
}

// next numbers a new state of e for the Notifier; call with q.mu held.
func (e *entry) next() uint64 {
	e.seq++
	return e.seq
}

// view is the copy of the item an observer gets; call with q.mu held.
func (e *entry) view() *Item {
	c := e.it.clone()
	c.InFlight = e.inflight
	return c
}

// Queue is the durable outbound queue. Its state and the signed messages are
// in one append-only journal in dir (see journal.go).
type Queue struct {
	dir  string
	j    *journal
	d    delivery.Deliverer
	n    Notifier
	opts Options
	log  *slog.Logger

	mu        sync.Mutex
	items     map[string]*entry
	done      map[string]*Item // settled items kept for status queries
	doneOrder []string
	settling  map[string]*entry        // settled, their notifications not yet run
	heard     map[string]bool          // settled items of done whose Settled the Notifier has returned from
	hearing   map[string]*announceWait // WaitAnnounced's, until the item is heard of or they give up
	settled   []*Item                  // settled while loading, announced when Run starts
	loaded    []string                 // ids of the unsettled items found at Open, for the Restorer
	announced []*Item                  // settled and announced before a restart: sent copy brought up to date when Run starts
	forget    []string                 // settled, announced items waiting for a checkpoint
	ckMu      sync.Mutex               // one checkpoint at a time
	lastCk    time.Time                // when the last checkpoint began (wall clock)
	enqueuing map[string]bool          // ids whose files Enqueue is writing
	busy      map[string]int           // attempts in flight per recipient domain
	sharing   map[string]int           // attempts in flight per sender (shareKey)
	kick      chan struct{}
	warnings  bool // a batch of delay warnings is being made
	passes    int  // dispatch passes begun; tests wait on it to see the loop has looked
}

// maxDone bounds the settled items remembered in memory.
const maxDone = 4096

var itemIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$`)

// Open loads the queue in dir, creating it (0700) if needed. Items that
// do not load are moved to dir/corrupt and logged; they never stop the queue.
// A nil n means no one listens.
func Open(dir string, d delivery.Deliverer, n Notifier, opts Options) (*Queue, error) {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.RetryFor <= 0 {
		opts.RetryFor = 5 * 24 * time.Hour
	}
	if len(opts.Backoff) == 0 {
		opts.Backoff = DefaultBackoff
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = 8
	}
	if opts.MaxPerDestination <= 0 {
		opts.MaxPerDestination = max(opts.MaxConcurrent/2, 1)
	}
	opts.MaxPerDestination = min(opts.MaxPerDestination, opts.MaxConcurrent)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating queue directory: %w", err)
	}
	if n == nil {
		n = unheard{}
	}
	q := &Queue{dir: dir, d: d, n: n, opts: opts, log: opts.Logger, items: map[string]*entry{},
		settling: map[string]*entry{}, heard: map[string]bool{}, hearing: map[string]*announceWait{}, done: map[string]*Item{}, enqueuing: map[string]bool{}, busy: map[string]int{},
		sharing: map[string]int{}, kick: make(chan struct{}, 1)}
	safeio.CleanTemps(dir, "", time.Now()) // no writer runs yet: every temp is a crash's
	safeio.CleanTemps(filepath.Join(dir, IdempotencyDir), "", time.Now())
	j, replayed, err := openJournal(dir, func(msg string, args ...any) { q.log.Error(msg, args...) })
	if err != nil {
		return nil, err
	}
	q.j = j
	if err := q.migrate(replayed); err != nil {
		j.close()
		return nil, err
	}
	for id, x := range replayed {
		it := x.it
		if it.Dropping && !it.Settled() {
			q.dropAtStart(it)
		}
		if it.Settled() {
			// Final but perhaps not yet (durably) written to the sent
			// copy: Run announces it again, or only updates the sent copy
			// if it was announced, and a checkpoint then drops it.
			q.remember(it)
			if x.announced {
				q.announced = append(q.announced, it)
			} else {
				q.settled = append(q.settled, it)
			}
			continue
		}
		q.items[id] = &entry{it: it, firstDone: it.Attempts > 0, first: make(chan struct{})}
		q.loaded = append(q.loaded, id)
	}
	sort.Strings(q.loaded)
	sort.Slice(q.settled, func(i, k int) bool { return q.settled[i].ID < q.settled[k].ID })
	sort.Slice(q.announced, func(i, k int) bool { return q.announced[i].ID < q.announced[k].ID })
	q.staggerOverdue()
	return q, nil
}

// dropAtStart drops an item that DropEventually marked while an attempt
// was delivering it, and whose drop the daemon did not live to make: as
// Drop would have once the attempt ended. Recipients the journal has as
// delivered stay so, and nothing is tried again. Its failed state is
// appended without fsync: lost to a power loss, the item comes back marked
// and is dropped again. Run then tells the Notifier, as after a Drop.
func (q *Queue) dropAtStart(it *Item) {
	dropRecipients(it, q.opts.Clock())
	if _, err := q.j.put(it); err != nil {
		q.log.Error("cannot record the drop of an item marked to be dropped", "item", it.ID, "err", err)
	}
	q.log.Info("queue item dropped at start: it was marked to be dropped when its attempt ended", "item", it.ID, "mailbox", it.Mailbox)
}

// Close closes the journal. Call it after Run has returned.
func (q *Queue) Close() error { return q.j.close() }

// restartSpacing spreads items that fell due while the daemon was down, so a
// restart after an outage does not dial every destination at once.
const restartSpacing = 250 * time.Millisecond

func (q *Queue) staggerOverdue() {
	now := q.opts.Clock()
	var overdue []*Item
	for _, e := range q.items {
		if !e.it.NextAttempt.After(now) {
			overdue = append(overdue, e.it)
		}
	}
	slices.SortFunc(overdue, func(a, b *Item) int {
		return cmp.Or(a.NextAttempt.Compare(b.NextAttempt), strings.Compare(a.ID, b.ID))
	})
	for i, it := range overdue {
		it.NextAttempt = now.Add(time.Duration(i) * restartSpacing)
	}
}

// Dir is the queue's directory.
func (q *Queue) Dir() string { return q.dir }

// save makes an item's state durable: appended to the journal, then
// synced together with whatever else was appended meanwhile.
func (q *Queue) save(it *Item) error {
	w, err := q.j.put(it)
	if err != nil {
		return err
	}
	return q.j.commit(w)
}

// stored reads what the journal holds for it: the signed message, then the
// sent copy's data.
func (q *Queue) stored(it *Item) ([]byte, error) {
	data, err := q.j.read(it.ID)
	if err == nil && int64(len(data)) != it.Size+it.CopySize {
		err = fmt.Errorf("%d bytes, the item says %d", len(data), it.Size+it.CopySize)
	}
	return data, err
}

// message returns it's signed message.
func (q *Queue) message(it *Item) ([]byte, error) {
	data, err := q.stored(it)
	if err != nil {
		return nil, err
	}
	return data[:it.Size], nil
}

// told is the copy of it a Notifier gets: with ReadCopy and ReadMessage.
func (q *Queue) told(it *Item) *Item {
	c := it.clone()
	snap := it.clone()
	c.ReadCopy = func() ([]byte, error) {
		data, err := q.stored(snap)
		if err != nil {
			return nil, err
		}
		return data[snap.Size:], nil
	}
	c.ReadMessage = func() ([]byte, error) { return q.message(snap) }
	return c
}

func (q *Queue) remember(it *Item) {
	if _, ok := q.done[it.ID]; !ok {
		q.doneOrder = append(q.doneOrder, it.ID)
	}
	q.done[it.ID] = it
	for len(q.doneOrder) > maxDone {
		delete(q.done, q.doneOrder[0])
		delete(q.heard, q.doneOrder[0])
		q.doneOrder = q.doneOrder[1:]
	}
}

// Enqueue stores it durably, then wakes the loop. Held items wait for Approve.
func (q *Queue) Enqueue(it *Item) error {
	if !itemIDRE.MatchString(it.ID) {
		return protocol.Errorf(protocol.CodeInvalidInput, "queue id %q is not a valid name", it.ID)
	}
	if len(it.Recipients) == 0 {
		return protocol.Errorf(protocol.CodeInvalidInput, "queue item %s has no recipients", it.ID)
	}
	now := q.opts.Clock()
	it = it.clone()
	if it.Created.IsZero() {
		it.Created = now
	}
	if it.NextAttempt.IsZero() {
		it.NextAttempt = now
	}
	if it.SendAt.After(it.NextAttempt) {
		it.NextAttempt = it.SendAt
	}
	it.Size, it.CopySize = int64(len(it.Data)), int64(len(it.Copy))
	for i := range it.Recipients {
		r := &it.Recipients[i]
		if it.Held {
			r.Status = StatusHeld
		} else if r.Status == "" || r.Status == StatusHeld {
			r.Status = StatusPending
		}
		r.UpdatedAt = now
	}
	// The id is reserved under the lock and the record is appended and
	// synced outside it, so concurrent senders share fsyncs instead of
	// queueing behind one another (and behind the delivery loop).
	q.mu.Lock()
	if _, dup := q.items[it.ID]; dup || q.enqueuing[it.ID] {
		q.mu.Unlock()
		return protocol.Errorf(protocol.CodeConflict, "queue item %s already exists", it.ID)
	}
	q.enqueuing[it.ID] = true
	q.mu.Unlock()
	w, err := q.j.enqueue(it, it.Data, it.Copy)
	if err == nil {
		err = q.j.commit(w)
	}
	if err == nil {
		// The item is not among q.items yet, so no attempt (and no
		// Updated) can come before the Notifier has heard of it.
		q.n.Queued(q.told(it))
	}
	q.mu.Lock()
	delete(q.enqueuing, it.ID)
	if err != nil {
		if w, ok := q.hearing[it.ID]; ok && q.heard[it.ID] {
			// Waiters that came while the id was being queued again: the
			// item they find is the earlier one, heard of already.
			close(w.heard)
			delete(q.hearing, it.ID)
		}
		q.mu.Unlock()
		return fmt.Errorf("queueing %s: %w", it.ID, err)
	}
	it.Data, it.Copy = nil, nil
	q.items[it.ID] = &entry{it: it, first: make(chan struct{})}
	delete(q.heard, it.ID) // an earlier item of that id's: this one is not heard of yet
	q.mu.Unlock()
	q.Kick()
	return nil
}

// Kick wakes the loop to look for due items.
func (q *Queue) Kick() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

func (q *Queue) backoff(attempts int) time.Duration {
	return q.opts.Backoff[min(attempts, len(q.opts.Backoff)-1)]
}

// nextAttempt is when to try it again after an attempt that starts now: a
// backoff step later, but no later than the end of its retry window, so
// that the last retry (the one that gives up on a temporary failure) is
// made when the window ends and not up to a whole step past it.
func (q *Queue) nextAttempt(it *Item, now time.Time) time.Time {
	next := now.Add(q.backoff(it.Attempts))
	if end := it.start().Add(q.opts.RetryFor); now.Before(end) && next.After(end) {
		return end
	}
	return next
}

// Run delivers due items until ctx ends, then waits for attempts in flight.
func (q *Queue) Run(ctx context.Context) {
	q.mu.Lock()
	settled, announced, loaded := q.settled, q.announced, q.loaded
	q.settled, q.announced, q.loaded = nil, nil, nil
	q.mu.Unlock()
	// Only what a restart found: an item queued since is its sender's to
	// finish, and Restore must not race it.
	if r, ok := q.n.(Restorer); ok {
		for _, id := range loaded {
			if it, err := q.Get(id); err == nil {
				r.Restore(q.told(it))
			}
		}
	}
	for _, it := range announced {
		q.n.Updated(q.told(it))
		q.settledAnnounced(it.ID)
	}
	for _, it := range settled {
		q.n.Updated(q.told(it))
		q.n.Settled(q.told(it))
		q.settledAnnounced(it.ID)
	}
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		q.checkpoint()
	}()
	slots := make(chan struct{}, q.opts.MaxConcurrent)
	freed := make(chan struct{}, 1)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait, _ := q.dispatch(ctx, slots, freed, &wg)
		due, warnWait := q.dueWarnings()
		if len(due) > 0 {
			// Off the loop: a warning is stored like inbound mail, and
			// attempts of other items go on meanwhile. The loop is woken
			// when the batch is done, for warnings that fell due since.
			wg.Add(1)
			go func() {
				defer wg.Done()
				q.warn(due)
				select {
				case freed <- struct{}{}:
				default:
				}
			}()
		}
		wait = min(wait, warnWait)
		if q.checkpointDue() == 0 {
			q.checkpoint()
		}
		// Wake for the next checkpoint too (one failed, or items wait for
		// it), and at least once a minute: the clock may be a test's, or
		// the wall clock may jump. Reset drops a tick that fired meanwhile.
		timer.Reset(min(wait, q.checkpointDue(), time.Minute))
		select {
		case <-ctx.Done():
			return
		case <-q.kick:
		case <-freed:
		case <-timer.C:
		}
	}
}

// dispatch starts attempts for due items while slots are free and returns
// how long to sleep until the next one is due, and how many it started.
func (q *Queue) dispatch(ctx context.Context, slots, freed chan struct{}, wg *sync.WaitGroup) (time.Duration, int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	// Counted under the lock the whole pass holds: once a reader sees the
	// count, the pass is over and what it started is marked in flight.
	q.passes++
	now := q.opts.Clock()
	var due []*entry
	wait := time.Hour
	for _, e := range q.items {
		if e.inflight || e.warning || e.it.Held {
			continue
		}
		if d := e.it.NextAttempt.Sub(now); d > 0 {
			if d < wait {
				wait = d
			}
			continue
		}
		due = append(due, e)
	}
	// Oldest first; ties by id, so the order is the same every time.
	slices.SortFunc(due, func(a, b *entry) int {
		return cmp.Or(a.it.NextAttempt.Compare(b.it.NextAttempt), strings.Compare(a.it.ID, b.it.ID))
	})
	started := 0
	for _, e := range due {
		// An item whose destination or sender is at its limit is passed
		// over, not waited on: it keeps its place among the due, and the
		// attempt of that destination or sender that ends signals freed.
		doms := destinations(e.it)
		if !q.roomFor(doms) {
			continue
		}
		who := q.shareKey(e.it)
		if !q.shareLeft(who) {
			continue
		}
		select {
		case slots <- struct{}{}:
		default:
			return wait, started // a finishing attempt signals freed
		}
		started++
		q.take(doms, who)
		// Record the next attempt before dialing: if the daemon dies
		// mid-attempt, the restart waits for it instead of retrying at once.
		// The record is appended, not synced: a crash of the daemon keeps
		// it (it is in the kernel), and a power loss before the next
		// group fsync only makes the restart retry at once, as for any
		// attempt in flight. The item is marked in flight first, so the
		// append can run outside the lock: nothing else writes an item
		// while it is in flight.
		prev := e.it.NextAttempt
		e.it.NextAttempt = q.nextAttempt(e.it, now)
		e.inflight = true
		it := e.it.clone()
		wg.Add(1)
		// The slot bounds attempts on the wire; it is given back once the
		// outcome is recorded, before the Notifier's work on it. Run is
		// woken then (another attempt may start) and again at the end
		// (a checkpoint may be due once the outcome is announced).
		wake := func() {
			select {
			case freed <- struct{}{}:
			default:
			}
		}
		free := sync.OnceFunc(func() { q.release(doms, who); <-slots; wake() })
		go func() {
			defer wg.Done()
			defer wake()
			defer free()
			if _, err := q.j.put(it); err != nil {
				q.log.Error("cannot record next attempt; not delivering", "item", it.ID, "err", err)
				q.mu.Lock()
				e.it.NextAttempt = prev.Add(time.Minute)
				e.inflight = false
				q.mu.Unlock()
				return
			}
			q.attempt(ctx, e, it, free)
		}()
	}
	return wait, started
}

func (q *Queue) attempt(ctx context.Context, e *entry, snap *Item, free func()) {
	var rcpts []string
	for _, r := range snap.Recipients {
		if !Final(r.Status) && r.Status != StatusHeld {
			rcpts = append(rcpts, r.Address)
		}
	}
	log := q.log.With("item", snap.ID, "message_id", snap.MessageID)
	// The attempt's INFO lines are its results, one per recipient; that
	// it starts is a DEBUG line.
	log.Debug("delivery attempt", "attempt", snap.Attempts+1, "recipients", len(rcpts))
	var results []delivery.Result
	if q.opts.Served != nil && !q.opts.Served(snap.Mailbox, snap.MailboxID) {
		// Held, not dropped: the mailbox may be served as it was again
		// (its declaration put back, its owner resolvable again), and
		// only a delete or root drops queued mail. Until then nothing is
		// sent under its name, signed, for another owner or for none.
		log.Warn("queue item held: its mailbox is not served as the one that queued it", "mailbox", snap.Mailbox, "mailbox_id", snap.MailboxID)
		results = delivery.AllFailed(rcpts, &delivery.Error{Temporary: true, Message: DetailNotServed})
	} else if data, err := q.message(snap); err != nil {
		// The signed message is gone or damaged: no attempt can succeed.
		log.Error("queued message unreadable", "err", err)
		results = delivery.AllFailed(rcpts, &delivery.Error{Code: 554, Enhanced: "5.3.0", Message: "the queued message file is unreadable: " + err.Error()})
	} else {
		results = q.d.Deliver(ctx, snap.MailFrom, rcpts, data)
	}
	byRcpt := delivery.ByRcpt(results)

	// The outcome is computed on the snapshot and becomes the item's state
	// in the same critical section that ends the flight, so an observer
	// sees either the attempt under way or its result, never a mix.
	now := q.opts.Clock()
	it := snap.clone()
	it.Attempts++
	expired := now.Sub(it.start()) >= q.opts.RetryFor
	for i := range it.Recipients {
		r := &it.Recipients[i]
		if Final(r.Status) || r.Status == StatusHeld {
			continue
		}
		res, ok := byRcpt[strings.ToLower(r.Address)]
		if !ok {
			res = delivery.Result{Rcpt: r.Address, Err: &delivery.Error{Temporary: true, Message: "no result from the delivery attempt"}}
		}
		r.Attempts++
		r.UpdatedAt = now
		r.TLS = res.TLS
		r.NextAttempt = time.Time{}
		de := res.Err
		switch {
		case res.Err == nil:
			r.Status, r.Code = StatusDelivered, 250
			r.Captured = res.Captured != ""
			switch {
			case r.Captured:
				r.Detail = fmt.Sprintf(DetailCaptured+"%q, not sent", res.Captured)
			case res.Host == "":
				r.Detail = "delivered"
			case res.Host == "local":
				r.Detail = "delivered locally"
			default:
				r.Detail = "delivered to " + res.Host
			}
		case !de.Temporary:
			r.Status, r.Code, r.Detail = StatusFailed, de.Code, de.Error()
		default:
			r.Code = de.Code
			if expired {
				r.Status = StatusFailed
				r.Detail = fmt.Sprintf("gave up after %s of temporary failures; last: %v", q.opts.RetryFor, de)
			} else {
				r.Status, r.Detail, r.NextAttempt = StatusDeferred, de.Error(), it.NextAttempt
			}
		}
		log.Info("recipient result", "attempt", it.Attempts, "rcpt", r.Address, "status", r.Status, "code", r.Code, "tls", r.TLS, "host", res.Host)
	}
	settled := it.Settled()
	out := it.clone()
	// The outcome is appended before the sent copy hears of it, and the
	// item's records go only at a checkpoint after the sent copy is
	// durable: a crash in between leaves a settled item that the next
	// start announces again, never a sent copy stuck at "pending". The
	// append is not synced: a crash of the daemon keeps it, and a power
	// loss before the next group fsync or checkpoint loses the outcome
	// with the sent copy's update, so the restart attempts again, as for
	// an attempt in flight.
	if _, err := q.j.put(out); err != nil {
		log.Error("cannot record attempt result", "err", err)
	}
	q.mu.Lock()
	e.it = it
	e.inflight = false
	seq := e.next()
	if settled {
		q.settle(e)
	}
	drop := e.dropAfter && !settled
	q.mu.Unlock()
	free()
	if q.opts.Observe != nil {
		q.opts.Observe(out.clone(), results, snap.Attempts == 0)
	}
	q.notify(e, seq, out, settled)
	if drop {
		if err := q.DropEventually(snap.ID); err != nil {
			log.Error("cannot drop the item after its attempt", "err", err)
		}
	}
}

// tell tells the Notifier of out, e's state number seq, unless it has
// heard of a newer one already. A settled state is the last an entry has,
// so Settled is never skipped.
func (q *Queue) tell(e *entry, seq uint64, out *Item, settled bool) {
	e.tellMu.Lock()
	defer e.tellMu.Unlock()
	if seq <= e.toldSeq {
		return
	}
	e.toldSeq = seq
	q.n.Updated(q.told(out))
	if settled {
		q.n.Settled(q.told(out))
		q.settledAnnounced(out.ID)
	}
}

// settle moves a settled entry from the queued items to the settled ones.
// Until its notifications have run it stays findable (settling), so that a
// waiter for its first attempt still waits for them. Call with q.mu held.
func (q *Queue) settle(e *entry) {
	delete(q.items, e.it.ID)
	q.remember(e.it)
	if !e.firstDone {
		q.settling[e.it.ID] = e
	}
}

// notify tells the Notifier of out, then wakes the waiters for e's first
// attempt: a send's answer comes after its sent copy is written and its
// after_send has run, whatever the order in which the waiter arrived.
func (q *Queue) notify(e *entry, seq uint64, out *Item, settled bool) {
	q.tell(e, seq, out, settled)
	q.mu.Lock()
	if !e.firstDone {
		e.firstDone = true
		close(e.first)
	}
	if q.settling[out.ID] == e {
		delete(q.settling, out.ID)
	}
	q.mu.Unlock()
}
