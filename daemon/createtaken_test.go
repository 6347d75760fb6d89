package daemon

import (
	"encoding/json"
	"testing"

	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// TestCreateOfATakenNameHoldsNothing: another user's mailbox.create of a
// name taken by someone else is refused at once. It used to wait to hold
// the name alone before looking, and while it waited (behind the owner's
// send waiting for its first delivery attempt, say) every new request on
// the owner's mailbox, and every delivery into it, waited behind it: a
// user could stall another's mailbox by creating its name over and over.
func TestCreateOfATakenNameHoldsNothing(t *testing.T) {
	testusers.RequireRoot(t)
	other := testusers.Create(t, "mcct")
	td := startDaemon(t, "")
	td.ensureMine(t, "taken")
	cp := startClient(t, testusers.Executable(t), td.socket, principal{name: other.Name, uid: other.UID, gid: other.GID})

	// A request of the owner on its mailbox, in flight.
	inFlight := td.ctl.HoldNames("taken")
	released := false
	release := func() {
		if !released {
			released = true
			inFlight()
		}
	}
	defer release()

	answered := make(chan clientOutcome, 1)
	go func() {
		raw, _ := json.Marshal(protocol.MailboxCreateArgs{Name: "taken"})
		line, _ := json.Marshal(clientRequest{Verb: protocol.VerbMailboxCreate, Args: raw})
		var o clientOutcome
		if _, err := cp.in.Write(append(line, '\n')); err == nil && cp.out.Scan() {
			json.Unmarshal(cp.out.Bytes(), &o)
		}
		answered <- o
	}()
	var got *clientOutcome
	blocked := false
	testwait.For(t, "the create is answered, or holds up the owner's mailbox", func() bool {
		select {
		case o := <-answered:
			got = &o
			return true
		default:
		}
		r, ok := td.ctl.TryHoldName("taken")
		if !ok {
			blocked = true
			return true
		}
		r()
		return false
	})
	if blocked {
		release()
		o := testwait.Recv(t, "the create to be answered once the owner's request ended", answered)
		t.Fatalf("another user's create of the taken name held up the owner's mailbox until the owner's request ended (then answered %+v)", o)
	}
	if got.Code != protocol.CodeConflict {
		t.Fatalf("another user's create of the taken name: %+v; want conflict", *got)
	}
}
