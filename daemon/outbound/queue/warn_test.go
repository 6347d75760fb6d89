package queue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/delivery"
	"github.com/mailctl/mailctl/internal/testclock"
)

// warnNotes is a DelayWarner that counts, per item, the warnings made and
// the settlements heard; failNext makes the next warning fail.
type warnNotes struct {
	mu       sync.Mutex
	warned   map[string]int
	until    map[string]time.Time
	settled  map[string]*Item
	failNext int
}

func newWarnNotes() *warnNotes {
	return &warnNotes{warned: map[string]int{}, until: map[string]time.Time{}, settled: map[string]*Item{}}
}

func (n *warnNotes) Queued(*Item)  {}
func (n *warnNotes) Updated(*Item) {}
func (n *warnNotes) Settled(it *Item) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.settled[it.ID] != nil {
		panic("settled twice: " + it.ID)
	}
	n.settled[it.ID] = it
}

func (n *warnNotes) Delayed(it *Item, until time.Time) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.failNext > 0 {
		n.failNext--
		return errors.New("inbox unavailable")
	}
	n.warned[it.ID]++
	n.until[it.ID] = until
	return nil
}

// byDomain answers by the recipient's domain: ok.test takes mail, dead.test
// never does (4xx), slow.test only from a set time on.
type byDomain struct {
	clk       *testclock.Clock
	slowUntil func(rcpt string) time.Time
}

func (b *byDomain) Deliver(_ context.Context, _ string, rcpts []string, _ []byte) []delivery.Result {
	var out []delivery.Result
	for _, r := range rcpts {
		res := delivery.Result{Rcpt: r, Host: "mx"}
		switch {
		case atDomain(r, "dead.test"), atDomain(r, "slow.test") && b.clk.Now().Before(b.slowUntil(r)):
			res.Err = &delivery.Error{Temporary: true, Code: 451, Enhanced: "4.4.1", Message: "try later"}
		}
		out = append(out, res)
	}
	return out
}

// step runs, synchronously, what the queue's loop would do now: every due
// attempt to its end (notifications included), the due delay warnings, and
// a checkpoint. It is the loop without its timers, so a test can move an
// injected clock through months and know what has run at each point.
func step(q *Queue) { q.Step() }

// A year in a minute: for 400 days, three messages a day (to a domain that
// takes them, one that takes them after six hours, one that never does,
// and now and then a scheduled one), the queue restarted every 30 days, and
// one warning that fails on its first try. Every message settles exactly
// once, nothing is lost, every delayed one warns its sender exactly once,
// four hours after it became due (send_at for a scheduled one), and a
// message delivered before that warns nobody.
func TestQueueYearInAMinuteDelayWarnings(t *testing.T) {
	dir := t.TempDir()
	clk := testclock.New()
	start := clk.Now()
	created := map[string]time.Time{}
	due := map[string]time.Time{}
	d := &byDomain{clk: clk, slowUntil: func(rcpt string) time.Time { return due[rcpt].Add(6 * time.Hour) }}
	n := newWarnNotes()
	n.failNext = 1
	opts := Options{Clock: clk.Now, DelayWarning: 4 * time.Hour}
	open := func() *Queue {
		q, err := Open(dir, d, n, opts)
		if err != nil {
			t.Fatal(err)
		}
		// What is durable after a crash is not this test's question (the
		// journal tests ask it): skipping the fsyncs keeps a year short.
		q.j.log.SetFsync(func(*os.File) error { return nil })
		return q
	}
	q := open()
	const days = 400
	tick := 30 * time.Minute
	for day := 0; day < days+7; day++ {
		if day > 0 && day%30 == 0 {
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			q = open()
		}
		if day < days {
			for _, dom := range []string{"ok.test", "slow.test", "dead.test"} {
				id := fmt.Sprintf("d%03d-%s", day, dom)
				rcpt := id + "@" + dom
				it := testItem(id, rcpt)
				due[rcpt] = clk.Now()
				if day%50 == 7 && dom == "dead.test" {
					it.SendAt = clk.Now().Add(24 * time.Hour)
					due[rcpt] = it.SendAt
				}
				if err := q.Enqueue(it); err != nil {
					t.Fatal(err)
				}
				created[id] = clk.Now()
			}
		}
		for range 24 * time.Hour / tick {
			step(q)
			clk.Advance(tick)
		}
	}
	step(q)
	if left := q.List(); len(left) != 0 {
		t.Fatalf("%d item(s) still queued after the year, first %s", len(left), left[0].ID)
	}
	if len(n.settled) != len(created) {
		t.Fatalf("%d items settled, %d queued: some were lost", len(n.settled), len(created))
	}
	for id := range created {
		it := n.settled[id]
		if it == nil {
			t.Fatalf("%s never settled", id)
		}
		rcpt := it.Recipients[0]
		warned := n.warned[id]
		switch {
		case atDomain(rcpt.Address, "ok.test"):
			if rcpt.Status != StatusDelivered || warned != 0 {
				t.Errorf("%s: %s, warned %d times; want delivered, never warned", id, rcpt.Status, warned)
			}
		case atDomain(rcpt.Address, "slow.test"):
			if rcpt.Status != StatusDelivered || warned != 1 {
				t.Errorf("%s: %s, warned %d times; want delivered, warned once", id, rcpt.Status, warned)
			}
		default:
			if rcpt.Status != StatusFailed || warned != 1 {
				t.Errorf("%s: %s, warned %d times; want failed after the retry window, warned once", id, rcpt.Status, warned)
			}
			if want := due[rcpt.Address].Add(5 * 24 * time.Hour); !n.until[id].Equal(want) {
				t.Errorf("%s: warning says retries until %v, want %v", id, n.until[id], want)
			}
		}
		if warned == 1 {
			at := it.DelayWarned
			from := due[rcpt.Address].Add(4 * time.Hour)
			// The one warning that failed is made again warnRetry later.
			if at.Before(from) || at.After(from.Add(tick+warnRetry+tick)) {
				t.Errorf("%s: warned at %v, want at %v (four hours after it became due)", id, at.Sub(start), from.Sub(start))
			}
		}
	}
}

// A warning made but not yet recorded when the daemon died is made again
// at the next start (the warner recognises it); one recorded is not.
func TestQueueDelayWarningRecordedInTheJournal(t *testing.T) {
	dir := t.TempDir()
	clk := testclock.New()
	d := &byDomain{clk: clk}
	n := newWarnNotes()
	opts := Options{Clock: clk.Now, DelayWarning: time.Hour}
	q, err := Open(dir, d, n, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Enqueue(testItem("w1", "x@dead.test")); err != nil {
		t.Fatal(err)
	}
	step(q)
	clk.Advance(time.Hour)
	step(q)
	if n.warned["w1"] != 1 {
		t.Fatalf("warned %d times after an hour, want 1", n.warned["w1"])
	}
	got := journalItems(t, dir)["w1"]
	if got == nil || got.DelayWarned.IsZero() {
		t.Fatalf("the journal does not record the warning: %+v", got)
	}
	if qi := got.QueueItem(); qi.DelayWarnedAt == nil || qi.State != "deferred" {
		t.Fatalf("queue item shows %+v, want delay_warned_at and state deferred", qi)
	}
	// kill -9 and start again, hours later: no second warning.
	q2, err := Open(dir, d, n, opts)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(3 * time.Hour)
	step(q2)
	if n.warned["w1"] != 1 {
		t.Fatalf("warned %d times after a restart, want 1", n.warned["w1"])
	}
	q.Close()
	q2.Close()
}

// TestNoDelayWarningPastTheRetryWindow: the daemon stopped soon after two
// messages were first deferred and started again after their retry window
// had ended. The restart spaces their attempts; the one not yet attempted
// must not warn its sender that it is still being retried until a time
// already past: its attempt gives up on it, and the failure is the only
// report its sender gets.
func TestNoDelayWarningPastTheRetryWindow(t *testing.T) {
	dir := t.TempDir()
	clk := testclock.New()
	d := &byDomain{clk: clk}
	n := newWarnNotes()
	opts := Options{Clock: clk.Now, DelayWarning: 4 * time.Hour}
	q, err := Open(dir, d, n, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"p1", "p2"} {
		if err := q.Enqueue(testItem(id, id+"@dead.test")); err != nil {
			t.Fatal(err)
		}
	}
	step(q)
	q.Close()
	clk.Advance(6 * 24 * time.Hour) // down for longer than the five days of retries
	q, err = Open(dir, d, n, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for len(q.List()) > 0 {
		step(q)
		clk.Advance(restartSpacing)
	}
	for _, id := range []string{"p1", "p2"} {
		it := n.settled[id]
		if it == nil || it.Recipients[0].Status != StatusFailed {
			t.Fatalf("%s settled as %+v, want failed", id, it)
		}
		if n.warned[id] != 0 {
			t.Errorf("%s: warned %d times that it is retried until %v, after that time; want only its failure", id, n.warned[id], n.until[id])
		}
	}
}
