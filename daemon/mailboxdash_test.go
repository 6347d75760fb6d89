package daemon

import (
	"testing"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// TestMailboxCreateRefusesALeadingDash: an address that starts with '-' is
// an option to every program that takes addresses as arguments (sendmail,
// a hook's script), so no one creates such a mailbox; a dash inside or at
// the end is an ordinary character.
func TestMailboxCreateRefusesALeadingDash(t *testing.T) {
	td := startDaemon(t, "")
	for _, name := range []string{"-x", "-", "--help", "-oq"} {
		err := td.call(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: name}, nil)
		if protocol.CodeOf(err) != protocol.CodeInvalidInput {
			t.Errorf("creating %q: %v, want invalid_input", name, err)
		}
	}
	for _, name := range []string{"a-b", "x-"} {
		if err := td.call(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: name}, nil); err != nil {
			t.Errorf("creating %q: %v", name, err)
		}
	}
	// The rule is for new names: a mailbox made before it stays readable.
	if err := store.ValidMailboxName("-old"); err != nil {
		t.Errorf("ValidMailboxName(-old): %v; an existing mailbox of that name would be lost", err)
	}
}
