package control_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/protocol"
)

// TestCreateAgainRepairsFolders: doctor's fix for mailbox.folder_missing is
// `mailctl mailboxes create NAME --owner UID (repairs folders)`; creating an
// existing mailbox of the same owner again must put the missing folder back.
func TestCreateAgainRepairsFolders(t *testing.T) {
	d := testdaemon.Start(t)
	d.Call(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "agent"}, nil)
	junk := filepath.Join(d.Dir, "state", "mailboxes", "agent", "junk")
	if err := os.Remove(junk); err != nil {
		t.Fatal(err)
	}
	var out protocol.MailboxCreated
	d.Call(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "agent", Owner: strconv.Itoa(os.Getuid())}, &out)
	if out.Created {
		t.Error("the second create reported a new mailbox")
	}
	fi, err := os.Stat(junk)
	if err != nil || !fi.IsDir() {
		t.Fatalf("create of an existing mailbox did not repair its junk folder: %v", err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("repaired folder mode %o, want 700", fi.Mode().Perm())
	}
}
