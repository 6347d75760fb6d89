package daemon

import (
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/mailctl/mailctl/daemon/outbound"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// bounceLater sends from a new mailbox "reused" to a recipient the remote
// server defers, then makes the server refuse it: the retry the caller
// asks for (retry) settles the message failed, and its bounce goes to
// "reused"'s inbox.
func bounceLater(t *testing.T) (td *testDaemon, inbox func() []protocol.MessageSummary, retry func()) {
	t.Helper()
	td, mx := startWithRemoteMX(t)
	td.ensureMine(t, "reused")
	mx.SetRcptErr("gone@remote.test", &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 2, 0}, Message: "mailbox busy"})
	var res protocol.SendResult
	if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "reused", To: []string{"gone@remote.test"}, Subject: "the first owner's numbers", Body: "q3"}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Status != "deferred" {
		t.Fatalf("first attempt: %+v, want deferred", res)
	}
	mx.SetRcptErr("gone@remote.test", &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user"})
	inbox = func() []protocol.MessageSummary {
		t.Helper()
		var l protocol.MessageList
		if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "reused", Folder: protocol.FolderInbox}, &l); err != nil {
			t.Fatal(err)
		}
		return l.Messages
	}
	// As queue.retry does, without holding the mailbox's name as a request
	// on it would.
	retry = func() {
		t.Helper()
		if err := td.out.queue.Retry(outbound.QueueID("reused", res.ID)); err != nil {
			t.Fatal(err)
		}
	}
	return td, inbox, retry
}

// TestBounceGoesToTheMailboxThatSent: the bounce of a message that failed
// after its send was answered is on its way into the sending mailbox when
// the owner deletes the mailbox, and another mailbox is made under the
// name. The delete waits for the bounce, which goes with the mailbox that
// sent; the name's new mailbox never holds a report quoting the first
// owner's message.
func TestBounceGoesToTheMailboxThatSent(t *testing.T) {
	td, inbox, retry := bounceLater(t)
	entered, release := pauseJudged(t, "reused")
	waiting := nameWaits(t, "reused")

	retry()
	testwait.Recv(t, "the bounce to be judged", entered) // the bounce is judged, not yet stored
	deleted := td.deleteAsync("reused", true)
	select {
	case <-waiting:
		close(release)
		if err := testwait.Recv(t, "the delete to be answered once the bounce was stored", deleted); err != nil {
			t.Fatalf("delete: %v", err)
		}
		td.ensureMine(t, "reused")
	case err := <-deleted:
		t.Errorf("the delete did not wait for the bounce on its way into the mailbox (%v)", err)
		td.ensureMine(t, "reused")
		close(release)
		testwait.For(t, "the bounce to be stored", func() bool { return len(inbox()) > 0 })
	case <-time.After(testwait.Timeout):
		close(release)
		t.Fatal("the delete neither waited for the bounce on its way into the mailbox nor was answered")
	}
	for _, m := range inbox() {
		t.Errorf("the name's new mailbox holds the first owner's bounce: %q", m.Subject)
	}
}

// TestSettledWaitsForADeleteOfItsMailbox: a message settles while a delete
// of its mailbox waits for the name. The queue tells of it with the item's
// lock held, which the delete takes to drop the mailbox's mail, so the
// after_send hooks and the bounce do not wait for the name there but on
// their own, and find the mailbox gone: nothing is stored, nothing hangs.
func TestSettledWaitsForADeleteOfItsMailbox(t *testing.T) {
	td, inbox, retry := bounceLater(t)
	waiting := nameWaits(t, "reused")
	later := make(chan struct{}, 4)
	keepLater := settledLater
	settledLater = func(name string) {
		if name == "reused" {
			later <- struct{}{}
		}
	}
	defer func() { settledLater = keepLater }()

	// A request on the mailbox holds its name; a delete waits behind it.
	free := td.ctl.HoldNames("reused")
	deleted := td.deleteAsync("reused", true)
	testwait.Recv(t, "the delete to wait for the name", waiting)
	retry()
	select {
	case <-later:
	case <-time.After(30 * time.Second):
		free()
		t.Fatal("the settled message's hooks and bounce did not step aside for the delete waiting for the name")
	}
	// Told that they wait, they are already counted: Stop waits for them
	// from then on, and cannot be done while the name is held.
	stopped := make(chan struct{})
	go func() { td.out.later.Wait(); close(stopped) }()
	if err := td.call(t, protocol.VerbStatus, nil, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stopped:
		free()
		t.Fatal("the hooks and bounce told to wait for the name were not counted: Stop would not wait for them")
	default:
	}
	free()
	if err := testwait.Recv(t, "the delete to be answered once the name was free", deleted); err != nil {
		t.Fatalf("delete: %v", err)
	}
	td.ensureMine(t, "reused")
	// What waited has run once the delete let the name go: Stop waits for it.
	testwait.Recv(t, "the hooks and bounce that waited to end", stopped)
	if got := inbox(); len(got) != 0 {
		t.Errorf("the name's new mailbox holds a bounce of the deleted one's message: %+v", got)
	}
}

// TestDelayWarningGoesToTheMailboxThatSent: as the bounce above, for the
// warning of a delay, which the queue asks for holding none of its locks:
// the delete waits for the warning, which goes with the mailbox that sent.
func TestDelayWarningGoesToTheMailboxThatSent(t *testing.T) {
	td, clk := startDelayWarning(t, "reused")
	var res protocol.SendResult
	if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "reused", To: []string{"slow@remote.test"}, Subject: "the first owner's numbers", Body: "q3"}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Status != "deferred" {
		t.Fatalf("first attempt: %+v, want deferred", res)
	}
	entered, release := pauseJudged(t, "reused")
	waiting := nameWaits(t, "reused")

	clk.Advance(time.Hour + time.Minute)
	td.out.queue.Kick()
	testwait.Recv(t, "the delay warning to be judged", entered) // the warning is judged, not yet stored
	deleted := td.deleteAsync("reused", true)
	inbox := func() []protocol.MessageSummary {
		var l protocol.MessageList
		if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "reused", Folder: protocol.FolderInbox}, &l); err != nil {
			t.Fatal(err)
		}
		return l.Messages
	}
	select {
	case <-waiting:
		close(release)
		if err := testwait.Recv(t, "the delete to be answered once the warning was stored", deleted); err != nil {
			t.Fatalf("delete: %v", err)
		}
		td.ensureMine(t, "reused")
	case err := <-deleted:
		t.Errorf("the delete did not wait for the delay warning on its way into the mailbox (%v)", err)
		td.ensureMine(t, "reused")
		close(release)
		testwait.For(t, "the warning to be stored", func() bool { return len(inbox()) > 0 })
	case <-time.After(testwait.Timeout):
		close(release)
		t.Fatal("the delete neither waited for the delay warning on its way into the mailbox nor was answered")
	}
	for _, m := range inbox() {
		t.Errorf("the name's new mailbox holds the first owner's delay warning: %q", m.Subject)
	}
}

// TestDeliveryStatusReachesOnlyTheMailboxThatSent: a change of a sent
// message's delivery state is told to the watchers of the mailbox that
// sent it, never to those of a mailbox made under its name since.
func TestDeliveryStatusReachesOnlyTheMailboxThatSent(t *testing.T) {
	td := startDaemon(t, "")
	for _, name := range []string{"w", "sentinel"} {
		td.ensureMine(t, name)
	}
	first, ok := td.lookupMailbox("w")
	if !ok {
		t.Fatal("no mailbox w")
	}
	if err := td.call(t, protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "w", Force: true}, nil); err != nil {
		t.Fatal(err)
	}
	td.ensureMine(t, "w")
	ctx, events := td.watch(t, "w", "sentinel")
	// The first mailbox's message changes state (its queue item settles
	// after the name changed hands); events reach one watch in order, so
	// the sentinel's comes first only if that one was not sent.
	td.out.updated("w", first.ID, "of-the-first-mailbox", protocol.SendResult{Status: "sent", Recipients: []protocol.RecipientStatus{{Address: "partner@remote.test", Status: "delivered"}}})
	td.ctl.Emit(protocol.Event{Type: protocol.EventNewMail, Mailbox: "sentinel", ID: "sentinel"}, "")
	select {
	case ev := <-events:
		if ev.ID != "sentinel" {
			t.Errorf("the name's new mailbox was told of the first one's delivery: %+v", ev)
		}
	case <-ctx.Done():
		t.Fatal("no event")
	}
}
