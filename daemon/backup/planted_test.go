package backup

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/mailctl/mailctl/internal/testwait"
)

// TestRestoreNeverOpensWhatAnOwnerPlanted: deciding whether the store is
// empty reads the mailboxes, which their owners write. A FIFO an owner
// planted where a folder goes must not hang the restore in open(2), and a
// symlink to a directory elsewhere (with files in it) must not be followed:
// the store is empty, so the restore goes ahead without --force.
func TestRestoreNeverOpensWhatAnOwnerPlanted(t *testing.T) {
	root := t.TempDir()
	state := filepath.Join(root, "state")
	outside := filepath.Join(root, "outside")
	writeFiles(t, outside, map[string]string{"secret": "not the owner's"})
	mbox := filepath.Join(state, "mailboxes", "agent")
	for _, f := range []string{"inbox", "sent"} {
		if err := os.MkdirAll(filepath.Join(mbox, f), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	testwait.FIFO(t, filepath.Join(mbox, "0-fifo"))
	if err := os.Symlink(outside, filepath.Join(mbox, "1-link")); err != nil {
		t.Fatal(err)
	}
	data := archive(t, manifestEntry("agent"),
		entry{name: prefix + dirMailboxes + "agent/inbox/2026-01-01-000000-a.md", data: "+++\n+++\n"})
	err := testwait.Returns(t, "a restore over a mailbox holding a FIFO", func() error {
		_, err := Restore(bytes.NewReader(data), RestoreOptions{StateDir: state, DKIMDir: filepath.Join(root, "dkim"), LookupUser: selfOwner})
		return err
	})
	if err != nil {
		t.Fatalf("restore over an empty store whose owner planted a FIFO and a symlink: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "secret")); err != nil || string(b) != "not the owner's" {
		t.Fatalf("the file the symlink points to: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(state, "mailboxes", "agent", "inbox", "2026-01-01-000000-a.md")); err != nil {
		t.Fatal(err)
	}
}
