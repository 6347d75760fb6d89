package mcpshim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMailboxFileOfAnotherUIDIsNotRead: a shim run by root (who sees every
// mailbox) read a stored attachment, for email_attachment and
// email_forward, whatever the file's owner. Where hard links are not
// protected (fs.protected_hardlinks=0), a mailbox's owner can link any file
// of the host into its mailbox and have root's agent read or forward it.
// As the daemon does, the shim now reads only files of the mailbox
// folder's owner.
func TestMailboxFileOfAnotherUIDIsNotRead(t *testing.T) {
	u := newUserTree(t)
	box := u.home
	atts := filepath.Join(box, "inbox", "x.attachments")
	if err := os.MkdirAll(atts, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(atts, "mine.txt"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	u.link(u.secret, filepath.Join(atts, "linked.txt"))
	u.give(filepath.Join(box, "inbox"), atts, filepath.Join(atts, "mine.txt"))
	if data, _, err := readInRoot(box, "inbox/x.attachments/mine.txt", 1<<20); err != nil || string(data) != "mine" {
		t.Fatalf("the owner's file: %q %v", data, err)
	}
	data, _, err := readInRoot(box, "inbox/x.attachments/linked.txt", 1<<20)
	if err == nil || strings.Contains(string(data), "ROOT") {
		t.Fatalf("a link to root's file in the mailbox was read: %q %v", data, err)
	}
}
