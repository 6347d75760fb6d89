package daemon

import (
	"fmt"
	"os"
	"testing"

	"github.com/mailctl/mailctl/protocol"
)

// The queue shares its delivery places by the owner of the sending mailbox,
// declared or created, and only while the mailbox is the one that sent the
// item: a name made again by someone else is not its owner's.
func TestDeliveryShareIsTheMailboxOwners(t *testing.T) {
	td := startDaemon(t, fmt.Sprintf("\n[[mailboxes]]\nname = \"ops\"\nowner = %q\n", myName(t)))
	if err := td.call(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "made"}, nil); err != nil {
		t.Fatal(err)
	}
	me := uint32(os.Getuid())
	for _, name := range []string{"ops", "made"} {
		id := td.currentID(name)
		for _, asked := range []string{id, ""} {
			if uid, ok := td.mailboxOwner(name, asked); !ok || uid != me {
				t.Errorf("owner of %s (identity %q): %d, %v; want %d", name, asked, uid, ok, me)
			}
		}
		if uid, ok := td.mailboxOwner(name, id+"-gone"); ok {
			t.Errorf("owner of %s under another identity: %d, want none", name, uid)
		}
	}
	if uid, ok := td.mailboxOwner("nosuch", ""); ok {
		t.Errorf("owner of a mailbox that does not exist: %d", uid)
	}
}
