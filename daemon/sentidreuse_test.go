package daemon

import (
	"testing"

	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/protocol"
)

// TestSendAfterItsSentCopyPurgedTakesAnotherID: a queue item is named by
// its sent copy's id. An agent that trashes and purges its sent copy while
// the message still waits in the queue (held here; deferred or scheduled
// alike) must not free that id for the next send from the mailbox with the
// same subject in the same second, even after a restart, whose item would
// then collide with the first's and the send fail.
func TestSendAfterItsSentCopyPurgedTakesAnotherID(t *testing.T) {
	clk := testclock.New() // one second for every send
	td := startDaemonWith(t, "[send]\nhold = true\n", Options{Resolver: &resolver.Map{}, Clock: clk.Now})
	td.ensureMine(t, "agent")
	send := func() protocol.SendResult {
		t.Helper()
		var res protocol.SendResult
		if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "agent", To: []string{"x@remote.test"}, Subject: "build failed", Body: "b"}, &res); err != nil {
			t.Fatalf("send: %v", err)
		}
		return res
	}
	first := send()
	if err := td.call(t, protocol.VerbMessageMove, protocol.MessageMoveArgs{Mailbox: "agent", ID: first.ID, From: protocol.FolderSent, To: protocol.FolderTrash}, nil); err != nil {
		t.Fatal(err)
	}
	if err := td.call(t, protocol.VerbMessagePurge, protocol.MessagePurgeArgs{Mailbox: "agent", IDs: []string{first.ID}}, nil); err != nil {
		t.Fatal(err)
	}
	// A restart forgets which ids the folder gave lately; the queue
	// still has the first's item.
	td.stop()
	td = runTestDaemon(t, td.cfg, td.dir, Options{Resolver: &resolver.Map{}, Clock: clk.Now})
	second := send()
	if second.ID == first.ID {
		t.Fatalf("the second send took the first's id %s", first.ID)
	}
}
