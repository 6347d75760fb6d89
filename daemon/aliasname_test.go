package daemon

import (
	"fmt"
	"testing"

	"github.com/mailctl/mailctl/protocol"
)

// TestMailboxCreateRefusesADeclaredAlias: routing gives an address that is
// an alias of an operator-declared mailbox to that mailbox, before any
// mailbox of the same name. A mailbox created under such a name would never
// get its mail, and the replies to what it sends would reach the declared
// mailbox's owner, so the name is taken.
func TestMailboxCreateRefusesADeclaredAlias(t *testing.T) {
	td := startDaemon(t, fmt.Sprintf(`
[[mailboxes]]
name = "ops"
owner = %q
aliases = ["Help", "contact@example.test", "desk@elsewhere.test"]
`, myName(t)))
	for _, name := range []string{"help", "contact"} {
		err := td.call(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: name}, nil)
		if protocol.CodeOf(err) != protocol.CodeConflict {
			t.Errorf("creating %q, an alias of ops: %v, want conflict", name, err)
		}
		if rt, err := td.route(name + "@example.test"); err != nil || rt.Mailbox != "ops" {
			t.Errorf("%s@example.test routes to %+v, %v; want ops", name, rt, err)
		}
	}
	// An alias at a domain that is not ours takes nothing of ours.
	if err := td.call(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "desk"}, nil); err != nil {
		t.Errorf("creating desk: %v", err)
	}
}
