package queue

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/delivery"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/internal/testwait"
)

// journalImage is what a kill -9 of the daemon leaves of the journal in
// dir: every record appended so far (they are in the kernel), whole.
func journalImage(t *testing.T, dir string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, journalName))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// restartFrom writes image as the journal of a new queue directory and
// opens a queue there, as the daemon starting after the crash does.
func restartFrom(t *testing.T, image []byte, d delivery.Deliverer, n Notifier, opts Options) *Queue {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, journalName), image, 0o600); err != nil {
		t.Fatal(err)
	}
	q, err := Open(dir, d, n, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// TestDropMarkSurvivesACrash: the mailbox of an item is deleted while an
// attempt is delivering it, so the item is marked to be dropped when the
// attempt ends (DropEventually). The daemon dies before the drop: in the
// middle of the attempt, once the attempt's outcome is recorded, or after
// the journal was rewritten in between. The restart drops the item, its
// recipient failed as an operator's drop leaves it, and never attempts it
// again, where it used to retry it for days for a mailbox that is gone.
func TestDropMarkSurvivesACrash(t *testing.T) {
	for _, tc := range []struct {
		name string
		// outcome: the crash comes once the attempt's outcome (a
		// deferral, which does not settle the item) is recorded;
		// otherwise while the attempt is under way.
		outcome bool
		compact bool // the journal is rewritten after the mark
	}{
		{name: "mid-attempt"},
		{name: "after the attempt's outcome", outcome: true},
		{name: "after a rewrite of the journal", compact: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			clk := testclock.New()
			started, finish := make(chan struct{}), make(chan struct{})
			d := delivererFunc(func(ctx context.Context, _ string, rcpts []string, _ []byte) []delivery.Result {
				close(started) // one attempt only
				select {
				case <-finish:
				case <-ctx.Done():
				}
				return delivery.AllFailed(rcpts, &delivery.Error{Temporary: true, Code: 451, Message: "try again later"})
			})
			var image []byte
			observed := make(chan struct{})
			n1 := newNotes()
			q1, err := Open(dir, d, n1, Options{Clock: clk.Now, Observe: func(*Item, []delivery.Result, bool) {
				// The outcome is in the journal, the drop not yet.
				if tc.outcome {
					image = journalImage(t, dir)
				}
				close(observed)
			}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { q1.Run(ctx); close(done) }()
			it := testItem("gone", "x@remote.test")
			it.MailboxID = "box-1"
			if err := q1.Enqueue(it); err != nil {
				t.Fatal(err)
			}
			testwait.Recv(t, "the attempt to start", started)
			if err := q1.DropEventually("gone"); err != nil {
				t.Fatal(err)
			}
			if tc.compact {
				q1.j.mu.Lock()
				err := q1.j.compactLocked()
				q1.j.mu.Unlock()
				if err != nil {
					t.Fatal(err)
				}
			}
			if !tc.outcome {
				image = journalImage(t, dir)
			}
			close(finish)
			testwait.Recv(t, "the attempt's outcome to be observed", observed)
			n1.waitSettled(t) // the first queue dropped it too
			cancel()
			testwait.Recv(t, "the queue to stop", done)
			q1.Close()

			d2 := &countingDeliverer{count: map[string]int{}}
			n2 := newNotes()
			q2 := restartFrom(t, image, d2, n2, Options{Clock: clk.Now})
			if l := q2.List(); len(l) != 0 {
				t.Fatalf("after the restart the queue holds %s (%d attempts), want nothing", l[0].ID, l[0].Attempts)
			}
			got, err := q2.Get("gone")
			if err != nil {
				t.Fatal(err)
			}
			if r := recipient(got, "x@remote.test"); r.Status != StatusFailed || r.Detail != DetailDropped {
				t.Errorf("recipient after the restart: %+v, want failed, %q", r, DetailDropped)
			}
			runQueue(t, q2)
			// The sent copy hears of the drop as after Drop.
			if s := n2.waitSettled(t); s.ID != "gone" || recipient(s, "x@remote.test").Detail != DetailDropped {
				t.Errorf("settled %s with %+v, want gone dropped", s.ID, s.Recipients)
			}
			d2.mu.Lock()
			defer d2.mu.Unlock()
			if c := d2.count["x@remote.test"]; c != 0 {
				t.Errorf("the dropped item was attempted %d times after the restart", c)
			}
		})
	}
}

// TestItemOfAnUnknownMailboxIsKept: an item whose mailbox the daemon does
// not know at start (taken out of config.toml for a moment, say) is not
// one its mailbox's delete marked: it stays queued across a crash and is
// delivered.
func TestItemOfAnUnknownMailboxIsKept(t *testing.T) {
	dir := t.TempDir()
	clk := testclock.New()
	unknown := func(string, string) (uint32, bool) { return 0, false }
	d := &countingDeliverer{fail: true, count: map[string]int{}}
	q1, err := Open(dir, d, newNotes(), Options{Clock: clk.Now, Owner: unknown})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q1.Run(ctx); close(done) }()
	it := testItem("kept", "x@remote.test")
	it.MailboxID = "box-2"
	if err := q1.Enqueue(it); err != nil {
		t.Fatal(err)
	}
	if _, err := q1.WaitFirstAttempt(context.Background(), "kept"); err != nil {
		t.Fatal(err)
	}
	image := journalImage(t, dir)
	cancel()
	testwait.Recv(t, "the queue to stop", done)
	q1.Close()

	d.mu.Lock()
	d.fail = false
	d.mu.Unlock()
	n := newNotes()
	q2 := restartFrom(t, image, d, n, Options{Clock: clk.Now, Owner: unknown})
	if l := q2.List(); len(l) != 1 || l[0].ID != "kept" {
		t.Fatalf("after the restart the queue holds %d items, want kept", len(l))
	}
	runQueue(t, q2)
	clk.Advance(time.Minute)
	q2.Kick()
	if s := n.waitSettled(t); recipient(s, "x@remote.test").Status != StatusDelivered {
		t.Errorf("kept settled as %+v, want delivered", s.Recipients)
	}
}

// TestItemOfAMailboxNotServedIsHeld: while Options.Served says an item's
// mailbox is not served as the one that queued it, its attempts send
// nothing and drop nothing: the deliverer is not called, the recipients are
// deferred with DetailNotServed and a next attempt, and the item stays
// queued. Served again, its next attempt delivers. An item that stays
// unserved past its retry window fails there, as after any temporary
// failure, still without a delivery call. Another mailbox's item goes out
// meanwhile.
func TestItemOfAMailboxNotServedIsHeld(t *testing.T) {
	clk := testclock.New()
	d := &countingDeliverer{count: map[string]int{}}
	var mu sync.Mutex
	unserved := map[string]bool{"bot box-1": true, "bot box-3": true}
	n := newNotes()
	q, err := Open(t.TempDir(), d, n, Options{Clock: clk.Now, RetryFor: time.Hour,
		Served: func(mailbox, id string) bool { mu.Lock(); defer mu.Unlock(); return !unserved[mailbox+" "+id] }})
	if err != nil {
		t.Fatal(err)
	}
	runQueue(t, q)
	tries := func(rcpt string) int { d.mu.Lock(); defer d.mu.Unlock(); return d.count[rcpt] }

	held, other := testItem("held", "x@held.test"), testItem("other", "y@other.test")
	held.MailboxID, other.MailboxID = "box-1", "box-2"
	for _, it := range []*Item{held, other} {
		if err := q.Enqueue(it); err != nil {
			t.Fatal(err)
		}
	}
	first, err := q.WaitFirstAttempt(context.Background(), "held")
	if err != nil {
		t.Fatal(err)
	}
	r := recipient(first, "x@held.test")
	if r.Status != StatusDeferred || r.Detail != DetailNotServed || r.NextAttempt.IsZero() || first.Settled() {
		t.Errorf("the unserved item's recipient is %+v after its first attempt, want deferred (not served) with a next attempt", r)
	}
	if s := n.waitSettled(t); s.ID != "other" || recipient(s, "y@other.test").Status != StatusDelivered {
		t.Errorf("settled %s as %+v, want the other mailbox's item delivered", s.ID, s.Recipients)
	}
	if l := q.List(); len(l) != 1 || l[0].ID != "held" {
		t.Errorf("the queue holds %d items, want the unserved one", len(l))
	}
	if c := tries("x@held.test"); c != 0 {
		t.Errorf("the unserved item was handed to the deliverer %d times", c)
	}

	mu.Lock()
	delete(unserved, "bot box-1")
	mu.Unlock()
	clk.Advance(time.Minute)
	q.Kick()
	s := n.waitSettled(t)
	if s.ID != "held" || recipient(s, "x@held.test").Status != StatusDelivered || s.Attempts != 2 {
		t.Errorf("settled %s as %+v after %d attempts, want the item delivered at its second", s.ID, s.Recipients, s.Attempts)
	}
	if c := tries("x@held.test"); c != 1 {
		t.Errorf("the item served again was handed to the deliverer %d times, want once", c)
	}

	expiring := testItem("expiring", "z@expiring.test")
	expiring.MailboxID = "box-3"
	if err := q.Enqueue(expiring); err != nil {
		t.Fatal(err)
	}
	if _, err := q.WaitFirstAttempt(context.Background(), "expiring"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour + time.Minute)
	q.Kick()
	s = n.waitSettled(t)
	r = recipient(s, "z@expiring.test")
	if s.ID != "expiring" || r.Status != StatusFailed || !strings.HasPrefix(r.Detail, "gave up after") || !strings.HasSuffix(r.Detail, "last: "+DetailNotServed) {
		t.Errorf("settled %s as %+v, want its recipient failed at the end of the retry window, last not served", s.ID, r)
	}
	if c := tries("z@expiring.test"); c != 0 {
		t.Errorf("the item never served was handed to the deliverer %d times", c)
	}
}
