package control_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/control"
	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// Removing a deleted mailbox's files can take long (its owner may have
// filled it with files); meanwhile other mailboxes are created and deleted,
// and hooks made, as usual: the removal holds no lock they need.
func TestMailboxRemovalHoldsNoOneElse(t *testing.T) {
	td := testdaemon.Start(t)
	td.Mailbox(t, "full")
	td.Mailbox(t, "busy")
	entered, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool // the first removal, the full mailbox's, waits
	keep := control.SwapRemoveDetached(func(d *store.Detached) error {
		if !held.Swap(true) {
			close(entered)
			<-release
		}
		return d.Remove()
	})
	defer func() { control.SwapRemoveDetached(keep) }()
	deleted := make(chan error, 1)
	go func() {
		deleted <- td.TryCall(protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "full", Force: true}, nil)
	}()
	select {
	case <-entered:
	case err := <-deleted:
		// Refused, or done without removing anything: never hang waiting.
		t.Fatalf("the delete answered before its files' removal began: %v", err)
	case <-time.After(testwait.Timeout):
		close(release)
		t.Fatal("the delete neither began removing the mailbox's files nor was answered")
	}
	func() {
		defer close(release) // whatever happens below, let the delete finish
		if err := td.TryCall(protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "fresh"}, nil); err != nil {
			t.Errorf("creating a mailbox while another's files are removed: %v", err)
		}
		if err := td.TryCall(protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "busy", Event: "on_receive", Cmd: []string{"/bin/true"}}, nil); err != nil {
			t.Errorf("creating a hook while another mailbox's files are removed: %v", err)
		}
		if err := td.TryCall(protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "fresh"}, nil); err != nil {
			t.Errorf("deleting a mailbox while another's files are removed: %v", err)
		}
	}()
	if err := testwait.Recv(t, "the delete of the full mailbox to be answered", deleted); err != nil {
		t.Fatalf("deleting the full mailbox: %v", err)
	}
	if err := td.TryCall(protocol.VerbMailboxShow, protocol.NameArgs{Name: "full"}, nil); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("the deleted mailbox: %v, want not_found", err)
	}
}
