package daemon

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/internal/fakemx"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// rewriteConfig replaces old with new in td's config.toml.
func rewriteConfig(t *testing.T, td *testDaemon, old, new string) string {
	t.Helper()
	path := filepath.Join(td.dir, "config.toml")
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), old) {
		t.Fatalf("config.toml has no %q", old)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(text), old, new, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// sendDeferred sends from mailbox to the deferring MX and waits for the
// first attempt to have been deferred; it returns the queue item's id.
func sendDeferred(t *testing.T, td *testDaemon, mailbox, subject string) string {
	t.Helper()
	var res protocol.SendResult
	if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: mailbox, To: []string{"x@remote.test"}, Subject: subject, Body: "b"}, &res); err != nil {
		t.Fatal(err)
	}
	qid := outbound.QueueID(mailbox, res.ID)
	testwait.For(t, "the first attempt of "+subject+" to be deferred", func() bool {
		it, err := td.out.queue.Get(qid)
		return err == nil && it.Attempts == 1 && !it.InFlight && !it.Settled()
	})
	return qid
}

// undeclared stands in config.toml where declaration was, so that the
// declaration can be put back in its place.
const undeclared = "\n# decl\n"

// declaration declares the mailbox "decl" for owner.
func declaration(owner string) string {
	return fmt.Sprintf("%s[[mailboxes]]\nname = \"decl\"\nowner = %q\n", undeclared, owner)
}

// retryHeld makes the queue item qid due and waits for that attempt to
// end; it fails unless the attempt held the item: still queued, each
// recipient deferred as not served, with a next attempt.
func retryHeld(t *testing.T, td *testDaemon, qid string) {
	t.Helper()
	before, err := td.out.queue.Get(qid)
	if err != nil {
		t.Fatal(err)
	}
	if err := td.out.queue.Retry(qid); err != nil {
		t.Fatal(err)
	}
	var it *queue.Item
	testwait.For(t, "the retry of "+qid+" to end", func() bool {
		it, err = td.out.queue.Get(qid)
		return err == nil && it.Attempts > before.Attempts && !it.InFlight
	})
	if it.Settled() || !slices.ContainsFunc(td.out.queue.List(), func(l *queue.Item) bool { return l.ID == qid }) {
		t.Fatalf("%s left the queue: %+v", qid, it.Recipients)
	}
	for _, r := range it.Recipients {
		if r.Status != queue.StatusDeferred || r.Detail != queue.DetailNotServed || r.NextAttempt.IsZero() {
			t.Errorf("%s: recipient %+v, want deferred as not served, with a next attempt", qid, r)
		}
	}
}

// requireDelivered waits for the queue item qid to settle and fails
// unless each of its recipients was delivered.
func requireDelivered(t *testing.T, td *testDaemon, qid string) {
	t.Helper()
	var it *queue.Item
	testwait.For(t, qid+" to settle", func() bool {
		var err error
		it, err = td.out.queue.Get(qid)
		return err == nil && it.Settled()
	})
	for _, r := range it.Recipients {
		if r.Status != queue.StatusDelivered {
			t.Errorf("%s: recipient %+v, want delivered", qid, r)
		}
	}
}

// announced waits for the queue item qid to settle and for what its
// settling started to be done: the Notifier told of it (the queue's
// WaitAnnounced; Get says settled before then) and the hooks and bounce it
// left to run later (o.later).
func announced(t *testing.T, td *testDaemon, qid string) *queue.Item {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Timeout)
	defer cancel()
	it, err := td.out.queue.WaitAnnounced(ctx, qid)
	if err != nil {
		t.Fatalf("waiting for %s to settle and be announced: %v", qid, err)
	}
	td.out.later.Wait()
	return it
}

// subjects are the subjects of the messages mx accepted.
func subjects(mx *fakemx.Server) []string {
	var out []string
	for _, m := range mx.Messages() {
		for _, line := range strings.Split(string(m.Data), "\r\n") {
			if s, ok := strings.CutPrefix(line, "Subject: "); ok {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// TestReloadHoldsQueuedMailOfAMailboxItStopsDeclaring: the operator takes
// a declared mailbox out of config.toml and reloads while its mail waits in
// the queue, one message for a retry and one scheduled for later. Neither
// is sent, signed in the name of a mailbox the operator withdrew: the retry
// is deferred without a connection to the MX. Neither is dropped either:
// with the declaration put back and reloaded, both go out. Another
// mailbox's message, waiting beside them, goes out meanwhile.
func TestReloadHoldsQueuedMailOfAMailboxItStopsDeclaring(t *testing.T) {
	mx, dns, delivery := deferringMX(t)
	td := startDaemonWith(t, delivery+declaration(myName(t)), Options{Resolver: dns})
	if err := td.call(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "other"}, nil); err != nil {
		t.Fatal(err)
	}
	before, _ := td.lookupMailbox("decl")
	retried := sendDeferred(t, td, "decl", "withdrawn")
	kept := sendDeferred(t, td, "other", "unrelated")
	at := td.now().Add(time.Hour).UTC()
	var res protocol.SendResult
	if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "decl", To: []string{"x@remote.test"}, Subject: "scheduled", Body: "b", SendAt: &at}, &res); err != nil {
		t.Fatal(err)
	}
	scheduled := outbound.QueueID("decl", res.ID)

	if err := td.Reload(rewriteConfig(t, td, declaration(myName(t)), undeclared)); err != nil {
		t.Fatal(err)
	}
	if _, ok := td.lookupMailbox("decl"); ok {
		t.Fatal("decl is still served after its declaration was taken out")
	}
	if it, err := td.out.queue.Get(scheduled); err != nil || it.Settled() || !it.Scheduled() {
		t.Errorf("after the reload the scheduled item is %+v (%v), want it still scheduled", it, err)
	}
	mx.SetDataErr(nil)
	conns := mx.Conns()
	retryHeld(t, td, retried)
	if n, c := len(mx.Messages()), mx.Conns(); n != 0 || c != conns {
		t.Errorf("the MX accepted %d messages over %d new connections, want none", n, c-conns)
	}
	if err := td.out.queue.Retry(kept); err != nil {
		t.Fatal(err)
	}
	requireDelivered(t, td, kept)
	if got := subjects(mx); len(got) != 1 || got[0] != "unrelated" {
		t.Errorf("the MX accepted %q, want the other mailbox's message alone", got)
	}

	if err := td.Reload(rewriteConfig(t, td, undeclared, declaration(myName(t)))); err != nil {
		t.Fatal(err)
	}
	if m, ok := td.lookupMailbox("decl"); !ok || m.ID != before.ID {
		t.Fatalf("after the declaration is back decl is %+v (%v), want it served as before", m, ok)
	}
	for _, qid := range []string{retried, scheduled} {
		if err := td.out.queue.Retry(qid); err != nil {
			t.Fatal(err)
		}
		requireDelivered(t, td, qid)
	}
	got := subjects(mx)
	slices.Sort(got)
	if want := []string{"scheduled", "unrelated", "withdrawn"}; !slices.Equal(got, want) {
		t.Errorf("the MX accepted %q, want %q", got, want)
	}
}

// TestReloadHoldsQueuedMailOfAMailboxGivenAnotherOwner: the operator
// declares a mailbox for another user (and gives that user its folder)
// and reloads while the first owner's mail waits in the queue. The name is
// served, but for someone else: the first owner's message is not sent
// from the new owner's address but deferred at each attempt, and when the
// retry window ends it fails, with no delay warning or bounce of it in the
// new owner's inbox. The new owner's own mail goes out.
func TestReloadHoldsQueuedMailOfAMailboxGivenAnotherOwner(t *testing.T) {
	testusers.RequireRoot(t)
	u1 := testusers.Create(t, "mcrq1")
	u2 := testusers.Create(t, "mcrq2")
	clk := testclock.New()
	clk.Advance(time.Since(clk.Now()))
	mx, dns, delivery := deferringMX(t)
	delivery += "delay_warning = \"1h\"\nretry_for = \"3h\"\n"
	td := startDaemonWith(t, delivery+declaration(u1.Name), Options{Resolver: dns, Clock: clk.Now})
	before, _ := td.lookupMailbox("decl")
	qid := sendDeferred(t, td, "decl", "first owner's")

	path := rewriteConfig(t, td, declaration(u1.Name), declaration(u2.Name))
	if err := filepath.WalkDir(td.store.Path("decl"), func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(u2.UID), int(u2.GID))
	}); err != nil {
		t.Fatal(err)
	}
	if err := td.Reload(path); err != nil {
		t.Fatal(err)
	}
	if m, ok := td.lookupMailbox("decl"); !ok || m.UID != u2.UID || m.ID == before.ID {
		t.Fatalf("after the reload decl is %+v (%v), want served for uid %d under a new identity", m, ok, u2.UID)
	}
	mx.SetDataErr(nil)
	retryHeld(t, td, qid)
	if n := len(mx.Messages()); n != 0 {
		t.Errorf("the MX accepted %d messages, want none", n)
	}

	if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "decl", To: []string{"x@remote.test"}, Subject: "new owner's", Body: "b"}, nil); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the new owner's message to be delivered", func() bool { return len(mx.Messages()) > 0 })

	// The delay warning falls due, then the retry window ends.
	clk.Advance(time.Hour + time.Minute)
	td.out.queue.Kick()
	testwait.For(t, "the delay warning to be counted as made", func() bool {
		it, err := td.out.queue.Get(qid)
		return err == nil && !it.DelayWarned.IsZero()
	})
	clk.Advance(3 * time.Hour)
	td.out.queue.Kick()
	it := announced(t, td, qid) // the retry window has ended
	if r := it.Recipients[0]; r.Status != queue.StatusFailed || !strings.HasPrefix(r.Detail, "gave up after") || !strings.HasSuffix(r.Detail, "last: "+queue.DetailNotServed) {
		t.Errorf("recipient at the end of the retry window: %+v, want failed, last not served", r)
	}
	var inbox protocol.MessageList
	if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "decl"}, &inbox); err != nil {
		t.Fatal(err)
	}
	if len(inbox.Messages) != 0 {
		t.Errorf("decl's inbox holds %+v, want nothing: the first owner's message is not the new owner's to hear of", inbox.Messages)
	}
	if got := subjects(mx); len(got) != 1 || got[0] != "new owner's" {
		t.Errorf("the MX accepted %q, want the new owner's message alone", got)
	}
}
