package daemon

import (
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

// requireDropped fails unless the queue item qid has left the queue,
// its recipients failed as dropped.
func requireDropped(t *testing.T, td *testDaemon, qid string) {
	t.Helper()
	for _, it := range td.out.queue.List() {
		if it.ID == qid {
			t.Fatalf("%s is still queued: %+v", qid, it.Recipients)
		}
	}
	it, err := td.out.queue.Get(qid)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range it.Recipients {
		if r.Status != queue.StatusFailed || r.Detail != queue.DetailDropped {
			t.Errorf("%s: recipient %+v, want failed (dropped)", qid, r)
		}
	}
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

// TestReloadDropsQueuedMailOfAMailboxItStopsDeclaring: the operator takes
// a declared mailbox out of config.toml and reloads while its mail waits in
// the queue, one message for a retry and one scheduled for later. Neither
// is sent, signed in the name of a mailbox the operator withdrew: both are
// dropped as a delete drops them. Another mailbox's message, waiting
// beside them, goes out.
func TestReloadDropsQueuedMailOfAMailboxItStopsDeclaring(t *testing.T) {
	mx, dns, delivery := deferringMX(t)
	declared := fmt.Sprintf("\n[[mailboxes]]\nname = \"decl\"\nowner = %q\n", myName(t))
	td := startDaemonWith(t, delivery+declared, Options{Resolver: dns})
	if err := td.call(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "other"}, nil); err != nil {
		t.Fatal(err)
	}
	retried := sendDeferred(t, td, "decl", "withdrawn")
	kept := sendDeferred(t, td, "other", "unrelated")
	at := td.now().Add(time.Hour).UTC()
	var res protocol.SendResult
	if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "decl", To: []string{"x@remote.test"}, Subject: "scheduled", Body: "b", SendAt: &at}, &res); err != nil {
		t.Fatal(err)
	}
	scheduled := outbound.QueueID("decl", res.ID)

	if err := td.Reload(rewriteConfig(t, td, declared, "\n")); err != nil {
		t.Fatal(err)
	}
	requireDropped(t, td, retried)
	requireDropped(t, td, scheduled)

	mx.SetDataErr(nil)
	if err := td.out.queue.Retry(kept); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the other mailbox's message to be delivered", func() bool { return len(mx.Messages()) > 0 })
	if got := subjects(mx); len(got) != 1 || got[0] != "unrelated" {
		t.Errorf("the MX accepted %q, want the other mailbox's message alone", got)
	}
}

// TestReloadDropsQueuedMailOfAMailboxGivenAnotherOwner: the operator
// declares a mailbox for another user (and gives that user its folder)
// and reloads while the first owner's mail waits in the queue. The name is
// served, but for someone else: the first owner's message is dropped, not
// sent from the new owner's address, and no bounce of it lands in the new
// owner's inbox. The new owner's own mail goes out.
func TestReloadDropsQueuedMailOfAMailboxGivenAnotherOwner(t *testing.T) {
	testusers.RequireRoot(t)
	u1 := testusers.Create(t, "mcrq1")
	u2 := testusers.Create(t, "mcrq2")
	declare := func(u testusers.User) string {
		return fmt.Sprintf("\n[[mailboxes]]\nname = \"decl\"\nowner = %q\n", u.Name)
	}
	mx, dns, delivery := deferringMX(t)
	td := startDaemonWith(t, delivery+declare(u1), Options{Resolver: dns})
	before, _ := td.lookupMailbox("decl")
	qid := sendDeferred(t, td, "decl", "first owner's")

	path := rewriteConfig(t, td, declare(u1), declare(u2))
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
	requireDropped(t, td, qid)
	td.out.later.Wait() // the settled item's bounce, had it one
	if n, err := td.store.Counts("decl"); err != nil || n.Total != 0 {
		t.Errorf("decl's inbox holds %d messages (%v), want none: the first owner's message is not the new owner's to hear of", n.Total, err)
	}

	mx.SetDataErr(nil)
	if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "decl", To: []string{"x@remote.test"}, Subject: "new owner's", Body: "b"}, nil); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the new owner's message to be delivered", func() bool { return len(mx.Messages()) > 0 })
	if got := subjects(mx); len(got) != 1 || got[0] != "new owner's" {
		t.Errorf("the MX accepted %q, want the new owner's message alone", got)
	}
}

// TestReloadDropsQueuedMailInFlight: the reload that takes a declared
// mailbox out of config.toml comes while its message is in a delivery
// attempt, held at DATA, which then ends with a temporary failure. As
// after a delete, the message is dropped as soon as the attempt ends,
// never tried again.
func TestReloadDropsQueuedMailInFlight(t *testing.T) {
	mx, dns, delivery := deferringMX(t)
	declared := fmt.Sprintf("\n[[mailboxes]]\nname = \"decl\"\nowner = %q\n", myName(t))
	td := startDaemonWith(t, delivery+declared, Options{Resolver: dns})
	gate := mx.Gate()
	var res protocol.SendResult
	if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "decl", To: []string{"x@remote.test"}, Subject: "s", Body: "b"}, &res); err != nil {
		t.Fatal(err)
	}
	qid := outbound.QueueID("decl", res.ID)
	testwait.For(t, "the attempt to be held at DATA", func() bool { return mx.Waiting() == 1 })
	if err := td.Reload(rewriteConfig(t, td, declared, "\n")); err != nil {
		t.Fatal(err)
	}
	gate <- struct{}{}
	testwait.For(t, "the message to leave the queue", func() bool {
		it, err := td.out.queue.Get(qid)
		return err == nil && it.Settled()
	})
	requireDropped(t, td, qid)
	if it, _ := td.out.queue.Get(qid); it.Attempts != 1 {
		t.Errorf("the item was attempted %d times, want the one in flight only", it.Attempts)
	}
}
