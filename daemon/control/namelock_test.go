package control_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/control"
	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// A request checked against a mailbox acts on that mailbox: deleted and
// made again under the same name while the request is between its access
// check and its handler, the new mailbox gets nothing of it (the delete
// waits for the request), and a listing shows nothing of the new one.
func TestRequestActsOnTheMailboxItWasCheckedOn(t *testing.T) {
	for _, verb := range []string{protocol.VerbDraftCreate, protocol.VerbMessageList} {
		t.Run(verb, func(t *testing.T) {
			td := testdaemon.Start(t)
			td.Call(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "reused"}, nil)
			entered, release := make(chan struct{}), make(chan struct{})
			var held atomic.Bool // the first request of the verb waits
			keep := control.SwapGated(func(v string) {
				if v == verb && !held.Swap(true) {
					close(entered)
					<-release
				}
			})
			defer func() { control.SwapGated(keep) }()
			waiting := make(chan struct{}, 4)
			keepWait := control.SwapNameWait(func(name string) {
				if name == "reused" {
					waiting <- struct{}{}
				}
			})
			defer func() { control.SwapNameWait(keepWait) }()

			var args any = protocol.DraftArgs{Mailbox: "reused", To: []string{"a@remote.test"}, Subject: "of the first mailbox", Body: "x\n"}
			if verb == protocol.VerbMessageList {
				args = protocol.MessageListArgs{Mailbox: "reused", Folder: protocol.FolderInbox}
			}
			var list protocol.MessageList
			answered := make(chan error, 1)
			go func() { answered <- td.TryCall(verb, args, &list) }()
			testwait.Returns(t, "the request to be between its check and its handler", func() struct{} { <-entered; return struct{}{} })

			recreate := func() {
				td.Call(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "reused"}, nil)
				td.Deliver(t, "reused@"+testdaemon.Domain, testdaemon.Message{From: "x@" + testdaemon.TrustedDomain, Subject: "of the second mailbox", Body: "y"})
			}
			deleted := make(chan error, 1)
			go func() {
				deleted <- td.TryCall(protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "reused", Force: true}, nil)
			}()
			select {
			case <-waiting: // the delete waits for the request
				close(release)
				if err := testwait.Recv(t, "the delete to be answered once the request ended", deleted); err != nil {
					t.Fatalf("delete: %v", err)
				}
				recreate()
			case err := <-deleted:
				t.Errorf("the delete did not wait for a request on the mailbox (%v)", err)
				recreate()
				close(release)
			case <-time.After(testwait.Timeout):
				close(release)
				t.Fatal("the delete neither waited for the request on the mailbox nor was answered")
			}
			err := testwait.Recv(t, "the request to be answered", answered)

			var drafts protocol.MessageList
			td.Call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "reused", Folder: protocol.FolderDrafts}, &drafts)
			if len(drafts.Messages) != 0 {
				t.Errorf("the new mailbox has the first one's draft: %+v", drafts.Messages)
			}
			if verb == protocol.VerbMessageList {
				if err != nil {
					t.Fatalf("list: %v", err)
				}
				if len(list.Messages) != 0 {
					t.Errorf("a listing checked on the first mailbox shows the second one's mail: %+v", list.Messages)
				}
			}
		})
	}
}
