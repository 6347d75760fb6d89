package queue

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/delivery"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/internal/wal"
	"github.com/mailctl/mailctl/protocol"
)

// bulkQueue is a queue (not running) with deferred, held, scheduled and
// pending items of two mailboxes, some of them older than a day.
func bulkQueue(t *testing.T) (*Queue, *testclock.Clock, *warnNotes) {
	t.Helper()
	clk := testclock.New()
	n := newWarnNotes()
	q, err := Open(t.TempDir(), &byDomain{clk: clk}, n, Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	add := func(id, mailbox string, mod func(*Item), rcpts ...string) {
		it := testItem(id, rcpts...)
		it.Mailbox = mailbox
		if mod != nil {
			mod(it)
		}
		if err := q.Enqueue(it); err != nil {
			t.Fatal(err)
		}
	}
	add("old1", "bot", nil, "a@dead.test", "b@ok.test")
	add("old2", "ann", nil, "c@dead.test")
	step(q) // attempted: old1 keeps a@dead.test deferred, old2 deferred
	clk.Advance(26 * time.Hour)
	add("held", "bot", func(it *Item) { it.Held = true }, "d@dead.test")
	add("sched", "ann", func(it *Item) { it.SendAt = clk.Now().Add(time.Hour) }, "e@Dead.Test")
	add("new", "bot", nil, "f@other.test") // pending: not yet attempted
	return q, clk, n
}

func allIDs(q *Queue) []string {
	var out []string
	for _, it := range q.List() {
		out = append(out, it.ID)
	}
	return out
}

func TestQueueMatchFilters(t *testing.T) {
	q, clk, _ := bulkQueue(t)
	now := clk.Now()
	for _, c := range []struct {
		f    protocol.QueueFilter
		want []string
	}{
		{protocol.QueueFilter{}, []string{"old1", "old2", "held", "sched", "new"}},
		{protocol.QueueFilter{Domain: "DEAD.test"}, []string{"old1", "old2", "held", "sched"}},
		{protocol.QueueFilter{Domain: "ok.test"}, nil}, // delivered: final
		{protocol.QueueFilter{Mailbox: "ann"}, []string{"old2", "sched"}},
		{protocol.QueueFilter{State: "deferred"}, []string{"old1", "old2"}},
		{protocol.QueueFilter{State: "held"}, []string{"held"}},
		{protocol.QueueFilter{State: "scheduled"}, []string{"sched"}},
		{protocol.QueueFilter{State: "pending"}, []string{"new"}},
		{protocol.QueueFilter{OlderThan: "1d"}, []string{"old1", "old2"}},
		{protocol.QueueFilter{OlderThan: "27h"}, nil},
		{protocol.QueueFilter{Mailbox: "bot", Domain: "dead.test", OlderThan: "25h"}, []string{"old1"}},
	} {
		if err := c.f.Check(); err != nil {
			t.Fatalf("%+v: %v", c.f, err)
		}
		m := NewMatch(c.f, now)
		var got []string
		for _, it := range q.List() {
			if m.Matches(it) {
				got = append(got, it.ID)
			}
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(c.want))
		if !slices.Equal(got, want) {
			t.Errorf("filter %+v matches %v, want %v", c.f, got, want)
		}
	}
	for _, bad := range []protocol.QueueFilter{{State: "delivering"}, {State: "stuck"}, {OlderThan: "yesterday"}, {OlderThan: "-1h"}, {Domain: "x@y.test"}, {OlderThan: "9999d"}} {
		if err := bad.Check(); err == nil {
			t.Errorf("filter %+v accepted", bad)
		}
	}
}

// Flushing by domain makes the matching items due now, and says how many;
// a held item is counted, not released, and a scheduled one keeps its
// send_at (docs/outbound.md: no attempt is made before that time; the
// operator's `queue flush --domain` after an outage is for deferred mail)
// unless the flush names scheduled items by state.
func TestQueueFlushMany(t *testing.T) {
	q, clk, _ := bulkQueue(t)
	sendAt := clk.Now().Add(time.Hour)
	res := q.FlushMany(allIDs(q), NewMatch(protocol.QueueFilter{Domain: "dead.test"}, clk.Now()))
	if res.Matched != 4 || res.Changed != 2 || res.Held != 1 || res.Scheduled != 1 || res.Recipients != 2 || res.Busy != 0 {
		t.Fatalf("flush: %+v, want 4 matched, 2 changed (2 recipients), 1 held, 1 scheduled", res)
	}
	for _, id := range []string{"old1", "old2"} {
		it, _ := q.Get(id)
		if !it.NextAttempt.Equal(clk.Now()) {
			t.Errorf("%s next attempt %v, want now", id, it.NextAttempt)
		}
	}
	if it, _ := q.Get("sched"); !it.NextAttempt.Equal(sendAt) {
		t.Errorf("a flush by domain moved the scheduled item to %v, want its send_at %v", it.NextAttempt, sendAt)
	}
	if it, _ := q.Get("held"); !it.Held {
		t.Error("flush released a held item")
	}
	res = q.FlushMany(allIDs(q), NewMatch(protocol.QueueFilter{State: "scheduled"}, clk.Now()))
	if it, _ := q.Get("sched"); res.Changed != 1 || !it.NextAttempt.Equal(clk.Now()) {
		t.Errorf("flush --state scheduled: %+v, next attempt %v, want the item due now", res, it.NextAttempt)
	}
	// An id the caller was not given is never touched.
	res = q.FlushMany([]string{"old2"}, Match{})
	if res.Matched != 1 || !slices.Equal(res.IDs, []string{"old2"}) {
		t.Fatalf("flush of one id: %+v", res)
	}
}

// recorder is byDomain noting the recipients of each attempt.
type recorder struct {
	byDomain
	tried [][]string
}

func (r *recorder) Deliver(ctx context.Context, from string, rcpts []string, data []byte) []delivery.Result {
	r.tried = append(r.tried, slices.Clone(rcpts))
	return r.byDomain.Deliver(ctx, from, rcpts, data)
}

// Regression: `queue flush --domain dead.test` answered "1 recipient" for
// an item with recipients at dead.test and slow.test, showed the one at
// slow.test still due hours later, and then tried both at once: an item
// has one due time and its attempt tries every recipient not yet
// delivered. The answer counts every recipient the flush makes due, says
// how many are at other domains, and shows each due now, as it is.
func TestQueueFlushByDomainSaysWhoIsTried(t *testing.T) {
	clk := testclock.New()
	d := &recorder{byDomain: byDomain{clk: clk, slowUntil: func(string) time.Time { return clk.Now().Add(time.Hour) }}}
	q, err := Open(t.TempDir(), d, newWarnNotes(), Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	if err := q.Enqueue(testItem("two", "a@dead.test", "b@slow.test", "c@ok.test")); err != nil {
		t.Fatal(err)
	}
	step(q) // c@ok.test delivered; the other two deferred
	clk.Advance(time.Minute)
	d.tried = nil
	res := q.FlushMany(allIDs(q), NewMatch(protocol.QueueFilter{Domain: "dead.test"}, clk.Now()))
	if res.Changed != 1 || res.Recipients != 2 || res.OtherDomains != 1 {
		t.Fatalf("flush --domain dead.test: %+v, want 1 item changed, 2 recipients made due, 1 of them at another domain", res)
	}
	it, _ := q.Get("two")
	for _, r := range it.Recipients {
		if r.Status == StatusDeferred && !r.NextAttempt.Equal(clk.Now()) {
			t.Errorf("%s shown due at %v after the flush, want now (%v): it is tried now", r.Address, r.NextAttempt, clk.Now())
		}
	}
	step(q)
	if want := [][]string{{"a@dead.test", "b@slow.test"}}; !slices.EqualFunc(d.tried, want, slices.Equal) {
		t.Fatalf("attempts after the flush %v, want %v", d.tried, want)
	}
}

// Dropping by domain drops only the recipients there; an item left with
// nothing to deliver settles, with no bounce (the drop detail), and the
// journal keeps the change across a restart.
func TestQueueDropMany(t *testing.T) {
	q, clk, n := bulkQueue(t)
	q.Enqueue(testItem("mixed", "g@dead.test", "h@other.test"))
	res := q.DropMany(allIDs(q), NewMatch(protocol.QueueFilter{Domain: "dead.test", Mailbox: "bot"}, clk.Now()))
	if res.Matched != 3 || res.Changed != 3 || res.Recipients != 3 {
		t.Fatalf("drop: %+v, want old1, held and mixed, one recipient each", res)
	}
	if n.settled["old1"] == nil || n.settled["held"] == nil || n.settled["mixed"] != nil {
		t.Fatalf("settled: %v; want old1 and held, not mixed", n.settled)
	}
	if r := recipient(n.settled["old1"], "a@dead.test"); r.Status != StatusFailed || r.Detail != DetailDropped {
		t.Errorf("dropped recipient: %+v", r)
	}
	mixed, _ := q.Get("mixed")
	if r := recipient(mixed, "h@other.test"); r.Status != StatusPending {
		t.Errorf("the other domain's recipient was touched: %+v", r)
	}
	got := journalItems(t, q.Dir())
	if r := recipient(got["mixed"], "g@dead.test"); r.Status != StatusFailed {
		t.Errorf("the journal does not keep the drop: %+v", r)
	}
	if left := allIDs(q); !slices.Equal(left, []string{"old2", "mixed", "new", "sched"}) {
		t.Errorf("left in the queue: %v", left)
	}
}

func TestQueueSummarize(t *testing.T) {
	q, clk, _ := bulkQueue(t)
	s := Summarize(q.List(), clk.Now(), 1)
	// old1, old2 are 26h old (past the last bound, 1280 minutes); the
	// others are new. dead.test has four items, other.test one.
	last := len(protocol.QueueAgeBuckets)
	if s.Total.Items != 5 || s.Total.Buckets[last] != 2 || s.Total.Buckets[0] != 3 {
		t.Fatalf("total: %+v", s.Total)
	}
	if len(s.Domains) != 1 || s.Domains[0].Domain != "dead.test" || s.Domains[0].Items != 4 || s.Domains[0].Buckets[last] != 2 {
		t.Fatalf("domains: %+v", s.Domains)
	}
	if s.Other == nil || s.OtherDomains != 1 || s.Other.Items != 1 {
		t.Fatalf("other: %+v (%d domains)", s.Other, s.OtherDomains)
	}
	// Aging moves an item along the buckets: 30 minutes is in (20, 40].
	clk.Advance(30 * time.Minute)
	s = Summarize(q.List(), clk.Now(), 10)
	if s.Total.Buckets[3] != 3 {
		t.Fatalf("after 30 minutes: %+v", s.Total)
	}
}

// Inspect reads the journal the daemon is writing, without its lock: it
// counts by state, sees a record being appended as partial (not damage),
// and reports a record that fails its checksum.
func TestInspectJournal(t *testing.T) {
	q, _, _ := bulkQueue(t)
	in, err := Inspect(q.Dir())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"deferred": 2, "held": 1, "scheduled": 1, "pending": 1}
	if in.Items != 5 || !mapsEqual(in.ByState, want) || in.Damaged != "" || in.Partial {
		t.Fatalf("inspect: %+v, want 5 items %v, no damage", in, want)
	}
	path := filepath.Join(q.Dir(), journalName)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// An append under way: the file ends inside a record.
	rec := wal.Record([]byte{'D'}, []byte("old1"))
	cut := filepath.Join(t.TempDir(), "q")
	os.MkdirAll(cut, 0o700)
	os.WriteFile(filepath.Join(cut, journalName), append(slices.Clone(data), rec[:len(rec)-2]...), 0o600)
	if in, err := Inspect(cut); err != nil || !in.Partial || in.Damaged != "" || in.Items != 5 {
		t.Fatalf("journal with an append under way: %+v %v", in, err)
	}
	// A flipped byte in the middle: damage, and the items before it counted.
	bad := slices.Clone(data)
	bad[len(bad)-3] ^= 0xff
	os.WriteFile(filepath.Join(cut, journalName), bad, 0o600)
	if in, err := Inspect(cut); err != nil || in.Damaged == "" {
		t.Fatalf("damaged journal: %+v %v", in, err)
	}
	os.WriteFile(filepath.Join(cut, journalName), []byte("something else entirely\n"), 0o600)
	if in, err := Inspect(cut); err != nil || in.Damaged == "" {
		t.Fatalf("not a journal: %+v %v", in, err)
	}
	if in, err := Inspect(t.TempDir()); err != nil || in.Items != 0 || in.Damaged != "" {
		t.Fatalf("no journal: %+v %v", in, err)
	}
}

// TestInspectCountsDroppingApart: items marked to be dropped (their
// mailbox deleted while an attempt was delivering them) are dropped at the
// daemon's next start if not before; Inspect used to count them as queued
// mail, by state and for the oldest one's age.
func TestInspectCountsDroppingApart(t *testing.T) {
	q, clk, _ := bulkQueue(t)
	queuedLater := clk.Now() // held, sched and new: old1 and old2 are 26 hours older
	for _, id := range []string{"old1", "old2"} {
		w, ok, err := q.j.markDropping(id) // what DropEventually records for an item in flight
		if err != nil || !ok {
			t.Fatalf("marking %s: %v %v", id, ok, err)
		}
		if err := q.j.commit(w); err != nil {
			t.Fatal(err)
		}
	}
	in, err := Inspect(q.Dir())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"held": 1, "scheduled": 1, "pending": 1}
	if in.Items != 3 || in.Dropping != 2 || !mapsEqual(in.ByState, want) || in.Damaged != "" {
		t.Fatalf("inspect: %d items %v, %d dropping (%+v), want 3 items %v, 2 dropping", in.Items, in.ByState, in.Dropping, in, want)
	}
	if !in.Oldest.Equal(queuedLater) {
		t.Errorf("oldest queued %v, want %v: the dropping items are not waiting", in.Oldest, queuedLater)
	}
}

// Inspect while the queue appends and compacts: every read sees a whole
// journal (items counted, never damage).
func TestInspectDuringAppends(t *testing.T) {
	q, _, _ := bulkQueue(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 300 {
			it, _ := q.Get("old2")
			it.Attempts = i + 1
			q.save(it)
		}
	}()
	for {
		in, err := Inspect(q.Dir())
		if err != nil || in.Damaged != "" || in.Items < 5 {
			t.Fatalf("inspect during appends: %+v %v", in, err)
		}
		select {
		case <-done:
			return
		default:
		}
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
