package queue

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/delivery"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/internal/testproc"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

func testItem(id string, rcpts ...string) *Item {
	it := &Item{ID: id, Mailbox: "bot", SentID: id, MessageID: id + "@example.com", MailFrom: "bot@example.com", Data: []byte(testMsg)}
	for _, r := range rcpts {
		it.Recipients = append(it.Recipients, protocol.RecipientStatus{Address: r})
	}
	return it
}

// runQueue runs q until the test ends.
func runQueue(t *testing.T, q *Queue) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); testwait.Recv(t, "the queue to stop", done) })
}

// lookedAgain wakes q's loop and waits for a pass over its items that began
// after the call: an attempt that pass did not start, the queue did not
// find due.
func lookedAgain(t *testing.T, q *Queue) {
	t.Helper()
	passes := func() int { q.mu.Lock(); defer q.mu.Unlock(); return q.passes }
	before := passes()
	q.Kick()
	testwait.For(t, "the queue to look at its items again", func() bool { return passes() > before })
}

func recipient(it *Item, addr string) protocol.RecipientStatus {
	for _, r := range it.Recipients {
		if r.Address == addr {
			return r
		}
	}
	return protocol.RecipientStatus{}
}

func TestQueueTemporaryThenSuccess(t *testing.T) {
	f := newScripted()
	f.set("b@retry.test", &delivery.Error{Temporary: true, Code: 451, Enhanced: "4.7.1", Message: "greylisted, come back later"})
	clk := testclock.New()
	n := newNotes()
	q, err := Open(t.TempDir(), f, n, Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	runQueue(t, q)
	if err := q.Enqueue(testItem("m1", "b@retry.test")); err != nil {
		t.Fatal(err)
	}
	it, err := q.WaitFirstAttempt(context.Background(), "m1")
	if err != nil {
		t.Fatal(err)
	}
	r := recipient(it, "b@retry.test")
	if r.Status != StatusDeferred || r.Code != 451 || !strings.Contains(r.Detail, "greylisted") {
		t.Fatalf("after first attempt: %+v", r)
	}
	if want := clk.Now().Add(time.Minute); !r.NextAttempt.Equal(want) || !it.NextAttempt.Equal(want) {
		t.Fatalf("next attempt %v, want %v (first backoff step)", r.NextAttempt, want)
	}
	// Not due yet: a kick must not cause a second attempt.
	lookedAgain(t, q)
	if got, _ := q.Get("m1"); got.Attempts != 1 || got.InFlight {
		t.Fatalf("attempted again before the backoff: %d attempts, in flight %v", got.Attempts, got.InFlight)
	}
	f.set("b@retry.test", nil)
	clk.Advance(time.Minute)
	q.Kick()
	done := n.waitSettled(t)
	r = recipient(done, "b@retry.test")
	if r.Status != StatusDelivered || r.Attempts != 2 {
		t.Fatalf("after retry: %+v", r)
	}
	if got := f.delivered(); got != 1 {
		t.Fatalf("MX got %d copies", got)
	}
	// The item leaves the journal right after the notifier has recorded
	// the outcome.
	testwait.For(t, "m1 to leave the journal", func() bool { _, ok := journalItems(t, q.Dir())["m1"]; return !ok })
}

func TestQueuePermanentFailsAtOnceAndGivesUpAfterRetryFor(t *testing.T) {
	f := newScripted()
	f.set("gone@p.test", &delivery.Error{Code: 550, Enhanced: "5.1.1", Message: "user unknown"})
	f.set("slow@p.test", &delivery.Error{Temporary: true, Code: 450, Enhanced: "4.2.0", Message: "try later"})
	clk := testclock.New()
	n := newNotes()
	q, err := Open(t.TempDir(), f, n, Options{Clock: clk.Now, RetryFor: 2 * time.Hour, Backoff: []time.Duration{time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	runQueue(t, q)
	q.Enqueue(testItem("m2", "gone@p.test", "slow@p.test"))
	it, _ := q.WaitFirstAttempt(context.Background(), "m2")
	if r := recipient(it, "gone@p.test"); r.Status != StatusFailed || !strings.Contains(r.Detail, "user unknown") {
		t.Fatalf("5xx recipient: %+v", r)
	}
	if r := recipient(it, "slow@p.test"); r.Status != StatusDeferred {
		t.Fatalf("4xx recipient: %+v", r)
	}
	// Only the deferred recipient is retried.
	clk.Advance(time.Hour)
	q.Kick()
	testwait.For(t, "m2's second attempt to end", func() bool { got, _ := q.Get("m2"); return !got.InFlight && got.Attempts == 2 })
	clk.Advance(time.Hour)
	q.Kick()
	done := n.waitSettled(t)
	r := recipient(done, "slow@p.test")
	if r.Status != StatusFailed || !strings.Contains(r.Detail, "gave up") || r.Attempts != 3 {
		t.Fatalf("after RetryFor: %+v", r)
	}
	if r := recipient(done, "gone@p.test"); r.Attempts != 1 {
		t.Fatalf("failed recipient retried: %+v", r)
	}
}

// The last retry is made when the retry window ends, not a backoff step
// past it: with a 90-minute window and hourly retries, the second attempt
// schedules the third at 1h30 (it would be 2h), and a 4xx then gives up.
// Otherwise the bounce comes up to a whole step (16h by default) after
// delivery.retry_for, and a delay warning's Will-Retry-Until is not the
// last retry.
func TestQueueLastRetryIsAtTheEndOfRetryFor(t *testing.T) {
	f := newScripted()
	f.set("slow@p.test", &delivery.Error{Temporary: true, Code: 450, Enhanced: "4.2.0", Message: "try later"})
	clk := testclock.New()
	start := clk.Now()
	n := newNotes()
	q, err := Open(t.TempDir(), f, n, Options{Clock: clk.Now, RetryFor: 90 * time.Minute, Backoff: []time.Duration{time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	runQueue(t, q)
	q.Enqueue(testItem("m3", "slow@p.test"))
	if it, _ := q.WaitFirstAttempt(context.Background(), "m3"); !it.NextAttempt.Equal(start.Add(time.Hour)) {
		t.Fatalf("after the first attempt: next attempt %v, want %v", it.NextAttempt, start.Add(time.Hour))
	}
	clk.Advance(time.Hour)
	q.Kick()
	testwait.For(t, "m3's second attempt to end", func() bool { got, _ := q.Get("m3"); return !got.InFlight && got.Attempts == 2 })
	got, _ := q.Get("m3")
	if end := start.Add(90 * time.Minute); !got.NextAttempt.Equal(end) || !recipient(got, "slow@p.test").NextAttempt.Equal(end) {
		t.Fatalf("after the second attempt: next attempt %v, want %v (the end of RetryFor)", got.NextAttempt, end)
	}
	clk.Advance(30 * time.Minute)
	q.Kick()
	done := n.waitSettled(t)
	if r := recipient(done, "slow@p.test"); r.Status != StatusFailed || !strings.Contains(r.Detail, "gave up") || r.Attempts != 3 {
		t.Fatalf("at the end of RetryFor: %+v", r)
	}
}

// countingDeliverer counts attempts per recipient and fails temporarily
// while fail is set.
type countingDeliverer struct {
	mu    sync.Mutex
	fail  bool
	count map[string]int
}

func (c *countingDeliverer) Deliver(_ context.Context, _ string, rcpts []string, _ []byte) []delivery.Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []delivery.Result
	for _, r := range rcpts {
		c.count[r]++
		var err *delivery.Error
		if c.fail {
			err = &delivery.Error{Temporary: true, Code: 421, Message: "down"}
		}
		out = append(out, delivery.Result{Rcpt: r, Err: err, TLS: delivery.TLSNone})
	}
	return out
}

func TestQueueRestartResumesOnceWithoutBurst(t *testing.T) {
	dir := t.TempDir()
	clk := testclock.New()
	d := &countingDeliverer{fail: true, count: map[string]int{}}
	q1, err := Open(dir, d, newNotes(), Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q1.Run(ctx); close(done) }()
	for _, id := range []string{"r1", "r2", "r3"} {
		q1.Enqueue(testItem(id, id+"@remote.test"))
		q1.WaitFirstAttempt(context.Background(), id)
	}
	// A held item is not attempted before or after the restart.
	held := testItem("r4", "r4@remote.test")
	held.Held = true
	q1.Enqueue(held)
	cancel() // the daemon stops
	testwait.Recv(t, "the queue to stop", done)

	// Restarting right away: items wait for their recorded next attempt.
	d.fail = false
	n := newNotes()
	q2, err := Open(dir, d, n, Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(q2.List()); got != 4 {
		t.Fatalf("reloaded %d items, want 4", got)
	}
	runQueue(t, q2)
	lookedAgain(t, q2)
	for _, id := range []string{"r1", "r2", "r3"} {
		if got, _ := q2.Get(id); got.InFlight {
			t.Errorf("%s attempted again right after restart (no burst)", id)
		}
	}
	d.mu.Lock()
	for _, id := range []string{"r1", "r2", "r3"} {
		if c := d.count[id+"@remote.test"]; c != 1 {
			t.Errorf("%s attempted %d times right after restart, want 1 (no burst)", id, c)
		}
	}
	d.mu.Unlock()
	clk.Advance(time.Minute)
	q2.Kick()
	for range 3 {
		n.waitSettled(t)
	}
	lookedAgain(t, q2)
	// An attempt of a held item would deliver to none of its recipients,
	// but it would be under way or counted.
	if got, _ := q2.Get("r4"); got.InFlight || got.Attempts != 0 {
		t.Errorf("held item attempted: in flight %v, %d attempts", got.InFlight, got.Attempts)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, id := range []string{"r1", "r2", "r3"} {
		if c := d.count[id+"@remote.test"]; c != 2 {
			t.Errorf("%s attempted %d times, want 2", id, c)
		}
	}
	if c := d.count["r4@remote.test"]; c != 0 {
		t.Errorf("held item attempted %d times", c)
	}
}

// A crash between recording the next attempt and dialing must not make the
// restarted queue dial at once.
func TestQueueNextAttemptRecordedBeforeDialing(t *testing.T) {
	dir := t.TempDir()
	clk := testclock.New()
	seen := make(chan *Item, 1)
	d := delivererFunc(func(ctx context.Context, from string, rcpts []string, data []byte) []delivery.Result {
		seen <- journalItems(t, dir)["c1"]
		<-ctx.Done() // "crash" mid-attempt: never return a result
		return nil
	})
	q, _ := Open(dir, d, newNotes(), Options{Clock: clk.Now})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	q.Enqueue(testItem("c1", "x@remote.test"))
	it := testwait.Recv(t, "the attempt to start", seen)
	cancel()
	testwait.Recv(t, "the queue to stop mid-attempt", done)
	if want := clk.Now().Add(time.Minute); !it.NextAttempt.Equal(want) {
		t.Fatalf("on disk during the attempt: next attempt %v, want %v", it.NextAttempt, want)
	}
}

type delivererFunc func(ctx context.Context, from string, rcpts []string, data []byte) []delivery.Result

func (f delivererFunc) Deliver(ctx context.Context, from string, rcpts []string, data []byte) []delivery.Result {
	return f(ctx, from, rcpts, data)
}

// journalItems replays a copy of the journal in dir, as a restart would.
func journalItems(t *testing.T, dir string) map[string]*Item {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, journalName))
	if err != nil {
		t.Fatal(err)
	}
	cp := t.TempDir()
	if err := os.WriteFile(filepath.Join(cp, journalName), data, 0o600); err != nil {
		t.Fatal(err)
	}
	j, items, err := openJournal(cp, func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	out := map[string]*Item{}
	for id, x := range items {
		out[id] = x.it
	}
	return out
}

func TestQueueCorruptItemSetAside(t *testing.T) {
	dir := t.TempDir()
	clk := testclock.New()
	d := &countingDeliverer{count: map[string]int{}}
	q1, _ := Open(dir, d, newNotes(), Options{Clock: clk.Now})
	good := testItem("good", "g@remote.test")
	good.Held = true
	q1.Enqueue(good)
	os.WriteFile(filepath.Join(dir, "bad.json"), []byte("{not json"), 0o600)
	os.WriteFile(filepath.Join(dir, "bad.eml"), []byte(testMsg), 0o600)
	os.WriteFile(filepath.Join(dir, "noeml.json"), []byte(`{"id":"noeml","mail_from":"a@b.c","recipients":[{"address":"x@y.z","status":"pending"}]}`), 0o600)
	os.WriteFile(filepath.Join(dir, "orphan.eml"), []byte(testMsg), 0o600)
	os.WriteFile(filepath.Join(dir, safeio.TempPrefix+"good.json-123"), []byte("partial"), 0o600)

	q2, err := Open(dir, d, newNotes(), Options{Clock: clk.Now})
	if err != nil {
		t.Fatalf("a corrupt item stopped the queue: %v", err)
	}
	if l := q2.List(); len(l) != 1 || l[0].ID != "good" {
		t.Fatalf("loaded %+v", l)
	}
	for _, name := range []string{"corrupt/bad.json", "corrupt/bad.eml", "corrupt/noeml.json"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s not set aside: %v", name, err)
		}
	}
	for _, name := range []string{"orphan.eml", safeio.TempPrefix + "good.json-123", "bad.json"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			t.Errorf("%s still in the queue directory", name)
		}
	}
}

func TestQueueOperatorActions(t *testing.T) {
	clk := testclock.New()
	d := &countingDeliverer{count: map[string]int{}, fail: true}
	n := newNotes()
	q, _ := Open(t.TempDir(), d, n, Options{Clock: clk.Now})
	runQueue(t, q)

	held := testItem("h1", "h@remote.test")
	held.Held = true
	q.Enqueue(held)
	it, _ := q.WaitFirstAttempt(context.Background(), "h1")
	if !it.Held || it.Recipients[0].Status != StatusHeld {
		t.Fatalf("held item: %+v", it)
	}
	if err := q.Retry("h1"); protocol.CodeOf(err) != protocol.CodeConflict {
		t.Fatalf("retry of a held item: %v", err)
	}
	if err := q.Approve("h1"); err != nil {
		t.Fatal(err)
	}
	// The attempt's outcome and the end of its flight become visible
	// together: wait for the state an operator acts on, not a counter.
	testwait.For(t, "h1 deferred, out of flight", func() bool {
		got, _ := q.Get("h1")
		return !got.InFlight && got.Recipients[0].Status == StatusDeferred
	})
	if err := q.Approve("h1"); protocol.CodeOf(err) != protocol.CodeConflict {
		t.Fatalf("second approve: %v", err)
	}
	// Retry makes a deferred item due now, without waiting for the backoff.
	if err := q.Retry("h1"); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "h1's retried attempt to end", func() bool {
		got, _ := q.Get("h1")
		return !got.InFlight && got.Recipients[0].Attempts == 2
	})
	if err := q.Drop("h1"); err != nil {
		t.Fatal(err)
	}
	it = n.waitSettled(t)
	if it.Recipients[0].Status != StatusFailed || !strings.Contains(it.Recipients[0].Detail, "dropped") {
		t.Fatalf("dropped: %+v", it.Recipients[0])
	}
	if len(q.List()) != 0 {
		t.Fatal("dropped item still listed")
	}
	if err := q.Drop("nope"); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("drop unknown: %v", err)
	}
	if err := q.Enqueue(testItem("../evil", "x@y.test")); protocol.CodeOf(err) != protocol.CodeInvalidInput {
		t.Fatalf("path-like id: %v", err)
	}
}

func TestQueueUnreadableMessageFails(t *testing.T) {
	clk := testclock.New()
	d := &countingDeliverer{count: map[string]int{}}
	n := newNotes()
	q, _ := Open(t.TempDir(), d, n, Options{Clock: clk.Now})
	runQueue(t, q)
	it := testItem("u1", "u@remote.test")
	it.Held = true
	q.Enqueue(it)
	// The queue holds no copy in memory: the journal has the message.
	if got, _ := q.Get("u1"); got.Data != nil {
		t.Fatal("queue kept the message bytes in memory")
	}
	// Damage the message where it lies in the journal.
	path := filepath.Join(q.Dir(), journalName)
	raw, _ := os.ReadFile(path)
	i := bytes.Index(raw, []byte("hello"))
	if i < 0 {
		t.Fatal("message not found in the journal")
	}
	f, _ := os.OpenFile(path, os.O_WRONLY, 0)
	f.WriteAt([]byte("j"), int64(i))
	f.Close()
	q.Approve("u1")
	done := n.waitSettled(t)
	if r := done.Recipients[0]; r.Status != StatusFailed || !strings.Contains(r.Detail, "unreadable") {
		t.Fatalf("recipient %+v", r)
	}
	if d.count["u@remote.test"] != 0 {
		t.Fatal("delivered a damaged message")
	}
}

func TestQueueRestartSpreadsOverdueItems(t *testing.T) {
	dir := t.TempDir()
	clk := testclock.New()
	d := &countingDeliverer{count: map[string]int{}}
	q1, _ := Open(dir, d, newNotes(), Options{Clock: clk.Now})
	for _, id := range []string{"o1", "o2", "o3"} {
		q1.Enqueue(testItem(id, id+"@remote.test")) // due now, never run
	}
	clk.Advance(3 * time.Hour) // the daemon was down
	q2, err := Open(dir, d, newNotes(), Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	items := q2.List()
	for i, it := range items {
		if want := clk.Now().Add(time.Duration(i) * restartSpacing); !it.NextAttempt.Equal(want) {
			t.Errorf("%s next attempt %v, want %v", it.ID, it.NextAttempt, want)
		}
	}
}

const testMsg = "From: a@example.com\r\nTo: b@remote.test\r\nSubject: hi\r\n\r\nhello\r\n"

// scripted is a Deliverer whose answer per recipient a test sets; it counts
// the attempts that delivered.
type scripted struct {
	mu   sync.Mutex
	errs map[string]*delivery.Error
	n    int
}

func newScripted() *scripted { return &scripted{errs: map[string]*delivery.Error{}} }

func (s *scripted) set(rcpt string, e *delivery.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs[rcpt] = e
}

func (s *scripted) delivered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func (s *scripted) Deliver(_ context.Context, _ string, rcpts []string, _ []byte) []delivery.Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []delivery.Result
	ok := false
	for _, r := range rcpts {
		e := s.errs[r]
		ok = ok || e == nil
		out = append(out, delivery.Result{Rcpt: r, Err: e, TLS: delivery.TLSNone, Host: "mx.test"})
	}
	if ok {
		s.n++
	}
	return out
}

// notes records Notifier calls.
type notes struct {
	mu      sync.Mutex
	updated []*Item
	settled chan *Item
}

func newNotes() *notes        { return &notes{settled: make(chan *Item, 100)} }
func (n *notes) Queued(*Item) {}

func (n *notes) Updated(it *Item) {
	n.mu.Lock()
	n.updated = append(n.updated, it)
	n.mu.Unlock()
}
func (n *notes) Settled(it *Item) { n.settled <- it }

func (n *notes) waitSettled(t testing.TB) *Item {
	t.Helper()
	select {
	case it := <-n.settled:
		return it
	case <-time.After(10 * time.Second):
		t.Fatal("item never settled")
		return nil
	}
}

// TestAttemptLogsOneLinePerRecipient: an attempt leaves one INFO line per
// recipient, with its result and the attempt's number, and nothing else at
// INFO.
func TestAttemptLogsOneLinePerRecipient(t *testing.T) {
	var logs testproc.Output
	f := newScripted()
	f.set("b@p.test", &delivery.Error{Temporary: true, Code: 451, Enhanced: "4.7.1", Message: "later"})
	n := newNotes()
	q, err := Open(t.TempDir(), f, n, Options{Clock: testclock.New().Now,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runQueue(t, q)
	if err := q.Enqueue(testItem("m1", "a@p.test", "b@p.test")); err != nil {
		t.Fatal(err)
	}
	if _, err := q.WaitFirstAttempt(context.Background(), "m1"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	want := []string{"rcpt=a@p.test status=delivered", "rcpt=b@p.test status=deferred"}
	if len(lines) != len(want) {
		t.Fatalf("INFO lines:\n%s\nwant one per recipient", strings.Join(lines, "\n"))
	}
	for i, l := range lines {
		if !strings.Contains(l, `msg="recipient result"`) || !strings.Contains(l, "attempt=1 ") || !strings.Contains(l, want[i]) {
			t.Errorf("line %d: %s\nwant the result %q of attempt 1", i, l, want[i])
		}
	}
}

// gatedNotes is notes whose next Updated, once armed, waits for release.
type gatedNotes struct {
	*notes
	mu      sync.Mutex
	armed   bool
	entered chan struct{}
	release chan struct{}
}

func (g *gatedNotes) Updated(it *Item) {
	g.mu.Lock()
	armed := g.armed
	g.armed = false
	g.mu.Unlock()
	if armed {
		close(g.entered)
		<-g.release
	}
	g.notes.Updated(it)
}

// An operator's retry tells the Notifier of the item made due; the attempt
// it makes due can end while that is still being told. The Notifier hears
// the two states in the order they were made, so the sent copy ends with
// the attempt's outcome, not the older state written over it.
func TestQueueNotifierHearsStatesInOrder(t *testing.T) {
	f := newScripted()
	f.set("gone@remote.test", &delivery.Error{Temporary: true, Code: 451, Enhanced: "4.2.0", Message: "busy"})
	clk := testclock.New()
	n := &gatedNotes{notes: newNotes(), entered: make(chan struct{}), release: make(chan struct{})}
	q, err := Open(t.TempDir(), f, n, Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	runQueue(t, q)
	if err := q.Enqueue(testItem("r1", "gone@remote.test")); err != nil {
		t.Fatal(err)
	}
	if it, _ := q.WaitFirstAttempt(context.Background(), "r1"); recipient(it, "gone@remote.test").Status != StatusDeferred {
		t.Fatalf("first attempt: %+v", it.Recipients)
	}
	f.set("gone@remote.test", &delivery.Error{Code: 550, Enhanced: "5.1.1", Message: "no such user"})
	n.mu.Lock()
	n.armed = true
	n.mu.Unlock()
	retried := make(chan error, 1)
	go func() { retried <- q.Retry("r1") }()
	testwait.Recv(t, "the retry to tell the Notifier", n.entered) // the retry's state is being told
	q.Kick()
	testwait.For(t, "the retried attempt to settle in the queue", func() bool {
		it, err := q.Get("r1")
		return err == nil && recipient(it, "gone@remote.test").Status == StatusFailed
	})
	close(n.release)
	if err := testwait.Recv(t, "Retry to return", retried); err != nil {
		t.Fatal(err)
	}
	if r := recipient(n.waitSettled(t), "gone@remote.test"); r.Status != StatusFailed {
		t.Fatalf("settled with %+v", r)
	}
	n.notes.mu.Lock()
	defer n.notes.mu.Unlock()
	last := n.notes.updated[len(n.notes.updated)-1]
	if r := recipient(last, "gone@remote.test"); r.Status != StatusFailed || r.Attempts != 2 {
		t.Fatalf("the Notifier heard last of %+v: an older state overwrote the outcome", r)
	}
}

// TestQueueOpenCleansIdempotencyTemps: a record a crash left half-written
// (its temporary file) is removed at start, as the queue's own are: the
// sweep of records never touches temporary files, which may be a write in
// progress.
func TestQueueOpenCleansIdempotencyTemps(t *testing.T) {
	dir := t.TempDir()
	idem := filepath.Join(dir, IdempotencyDir)
	os.MkdirAll(idem, 0o700)
	temp := filepath.Join(idem, safeio.TempPrefix+"abc.json-1")
	os.WriteFile(temp, []byte("{"), 0o600)
	q, err := Open(dir, &countingDeliverer{count: map[string]int{}}, newNotes(), Options{Clock: testclock.New().Now})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := os.Stat(temp); err == nil {
		t.Errorf("a crash's temporary record is left in %s", IdempotencyDir)
	}
}
