package daemon

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/control"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/daemon/smtpin"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// TestInboundStoresInTheMailboxThatJudgedIt: a message to "reused" is
// judged trusted by that mailbox's trusted senders; while it is between
// that verdict and its store, its owner deletes the mailbox. The delete
// waits for the delivery, so the message is stored in the mailbox that
// judged it: a delete without force then finds it there (not empty). Once
// that mailbox is deleted with its mail and the name made again, trusting
// no one, the new mailbox has nothing the first one's list judged.
func TestInboundStoresInTheMailboxThatJudgedIt(t *testing.T) {
	td := startDaemonWith(t, "[mailbox_rules]\nowners_may_set_trusted_senders = true\n", Options{Resolver: &resolver.Map{}})
	td.ensureMine(t, "reused")
	if err := td.call(t, protocol.VerbMailboxUpdate, protocol.MailboxUpdateArgs{Name: "reused", TrustedSenders: &[]string{"boss@example.test"}}, nil); err != nil {
		t.Fatal(err)
	}

	entered, release := pauseJudged(t, "reused")
	waiting := nameWaits(t, "reused")

	// Submitted locally from an address of ours: aligned, so the list
	// "reused" has now makes it trusted.
	raw := "From: boss@example.test\r\nTo: reused@example.test\r\nSubject: judged by the first list\r\nMessage-ID: <judged@example.test>\r\n\r\nrun the deploy\r\n"
	env := smtpin.Envelope{Helo: "mx.example.test", MailFrom: "boss@example.test", Rcpts: []string{"reused@example.test"}}
	delivered := make(chan error, 1)
	go func() {
		delivered <- td.inbound.deliver(context.Background(), env, smtpin.NewMessage([]byte(raw), 0), "boss")[0]
	}()
	testwait.Recv(t, "the delivery to be judged", entered)

	deleted := td.deleteAsync("reused", false)
	select {
	case <-waiting: // the delete waits for the delivery
		close(release)
		if err := testwait.Recv(t, "the delete to be answered once the delivery was stored", deleted); protocol.CodeOf(err) != protocol.CodeConflict {
			t.Errorf("a delete without force that waited for the delivery: %v, want conflict (the message is in the mailbox)", err)
		}
		if err := testwait.Recv(t, "the delivery to end", delivered); err != nil {
			t.Fatalf("delivery: %v", err)
		}
		if err := testwait.Recv(t, "the delete with force to be answered", td.deleteAsync("reused", true)); err != nil {
			t.Fatalf("delete with force: %v", err)
		}
		td.ensureMine(t, "reused")
	case err := <-deleted:
		t.Errorf("the delete did not wait for a delivery between its verdict and its store (%v)", err)
		td.ensureMine(t, "reused")
		close(release)
		if err := testwait.Recv(t, "the delivery to end", delivered); err != nil {
			t.Fatalf("delivery: %v", err)
		}
	case <-time.After(testwait.Timeout):
		close(release)
		t.Fatal("the delete neither waited for the delivery between its verdict and its store nor was answered")
	}

	var l protocol.MessageList
	if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "reused", Folder: protocol.FolderInbox}, &l); err != nil {
		t.Fatal(err)
	}
	for _, m := range l.Messages {
		t.Errorf("the name's new mailbox has a message judged by the first one's trusted senders: %q, trusted %q", m.Subject, m.Trusted)
	}
}

// deleteAsync deletes mailbox name in a request of its own and gives its
// answer on the channel.
func (td *testDaemon) deleteAsync(name string, force bool) <-chan error {
	return td.callAsync(protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: name, Force: force})
}

// callAsync makes one request on a connection of its own and gives its
// answer on the channel.
func (td *testDaemon) callAsync(verb string, args any) <-chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := protocol.Dial(ctx, td.socket)
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		done <- c.Call(ctx, verb, args, nil)
	}()
	return done
}

// pauseJudged holds the first copy judged for mailbox (the judged hook)
// until release is closed; entered is closed when that copy arrives.
func pauseJudged(t *testing.T, mailbox string) (entered <-chan struct{}, release chan struct{}) {
	in, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	keep := judged
	judged = func(m string) {
		if m == mailbox && !held.Swap(true) {
			close(in)
			<-release
		}
	}
	t.Cleanup(func() { judged = keep })
	return in, release
}

// nameWaits tells of each delete or create of a mailbox named name that has
// to wait for the name.
func nameWaits(t *testing.T, name string) <-chan struct{} {
	waiting := make(chan struct{}, 4)
	keep := control.SwapNameWait(func(n string) {
		if n == name {
			waiting <- struct{}{}
		}
	})
	t.Cleanup(func() { control.SwapNameWait(keep) })
	return waiting
}

// TestCopyDoesNotWaitForAnotherMailboxsDelete: a mailbox's delete waits
// behind a request on it (its owner's long send, here a hold the test
// keeps). A message for that mailbox and another one is stored in the other
// at once, and the first's copy is answered "try again" when its wait runs
// out, instead of the whole message waiting for the delete.
func TestCopyDoesNotWaitForAnotherMailboxsDelete(t *testing.T) {
	td := startDaemonWith(t, "", Options{Resolver: &resolver.Map{}})
	td.ensureMine(t, "leaving")
	td.ensureMine(t, "staying")
	keep := nameWait
	nameWait = 50 * time.Millisecond
	t.Cleanup(func() { nameWait = keep })

	waiting := nameWaits(t, "leaving")
	release := sync.OnceFunc(td.ctl.HoldNames("leaving")) // the owner's long request
	t.Cleanup(release)
	deleted := td.deleteAsync("leaving", true)
	testwait.Recv(t, "the delete to wait for the name", waiting)

	raw := "From: boss@example.test\r\nTo: leaving@example.test, staying@example.test\r\nSubject: for both\r\nMessage-ID: <both@example.test>\r\n\r\nhello\r\n"
	env := smtpin.Envelope{Helo: "mx.example.test", MailFrom: "boss@example.test", Rcpts: []string{"leaving@example.test", "staying@example.test"}}
	errs := testwait.Returns(t, "the delivery", func() []error {
		return td.inbound.deliver(context.Background(), env, smtpin.NewMessage([]byte(raw), 0), "boss")
	})
	if errs[0] != errNameBusy {
		t.Errorf("the copy for the mailbox being deleted: %v, want %v", errs[0], errNameBusy)
	}
	if errs[1] != nil {
		t.Fatalf("the copy for the other mailbox: %v", errs[1])
	}
	var l protocol.MessageList
	if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "staying", Folder: protocol.FolderInbox}, &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Messages) != 1 || l.Messages[0].Subject != "for both" {
		t.Errorf("the other mailbox holds %+v, want the message", l.Messages)
	}

	release()
	if err := testwait.Returns(t, "the delete", func() error { return <-deleted }); err != nil {
		t.Fatalf("delete: %v", err)
	}
}

// TestDelayWarningDoesNotWaitForADelete: the queue makes its delay
// warnings one after another, so one for a mailbox whose delete waits
// behind its owner's long request must not wait for it (every other
// mailbox's warning would): it gives up within the bound and is made
// later.
func TestDelayWarningDoesNotWaitForADelete(t *testing.T) {
	td := startDaemonWith(t, "", Options{Resolver: &resolver.Map{}})
	td.ensureMine(t, "leaving")
	keep := nameWait
	nameWait = 50 * time.Millisecond
	t.Cleanup(func() { nameWait = keep })

	waiting := nameWaits(t, "leaving")
	release := sync.OnceFunc(td.ctl.HoldNames("leaving"))
	t.Cleanup(release)
	deleted := td.deleteAsync("leaving", true)
	testwait.Recv(t, "the delete to wait for the name", waiting)

	id := td.currentID("leaving")
	err := testwait.Returns(t, "the delay warning", func() error {
		return td.out.delayWarning("leaving", id, "2026-01-01-000000-s", "m@example.test",
			[]protocol.RecipientStatus{{Address: "x@remote.test", Status: "deferred"}}, time.Now().Add(time.Hour))
	})
	if err == nil {
		t.Error("a delay warning for a mailbox whose delete holds its name was made, or given up without an error the queue retries")
	}
	release()
	if err := testwait.Returns(t, "the delete", func() error { return <-deleted }); err != nil {
		t.Fatalf("delete: %v", err)
	}
}
