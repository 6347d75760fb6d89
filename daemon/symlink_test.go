package daemon

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// TestSymlinkAttackThroughDaemon: the owner of a mailbox swaps its folders and
// files for symlinks to root-owned targets; no daemon operation may follow them.
func TestSymlinkAttackThroughDaemon(t *testing.T) {
	testusers.RequireRoot(t)
	owner := testusers.Create(t, "mcts")
	td := startDaemon(t, "")
	if err := td.EnsureMailbox("victim", owner.UID, owner.GID); err != nil {
		t.Fatal(err)
	}
	id, _, err := td.store.Deliver("victim", "inbox", &store.Message{MessageID: "x@example.test", Subject: "s", ReceivedAt: time.Now()}, "b", []byte("Subject: s\r\n\r\nb\r\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	// A root-owned target the attacker would like the daemon to overwrite or delete.
	target := t.TempDir()
	secret := filepath.Join(target, id+".md")
	const content = "+++\nid = \"root-owned\"\n+++\nroot data\n"
	if err := os.WriteFile(secret, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	mbox := td.store.Path("victim")
	// As the owner could: replace inbox with a symlink to the target, and archive likewise.
	os.RemoveAll(filepath.Join(mbox, "archive"))
	if err := os.Rename(filepath.Join(mbox, "inbox"), filepath.Join(mbox, "inbox.real")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"inbox", "archive"} {
		if err := os.Symlink(target, filepath.Join(mbox, name)); err != nil {
			t.Fatal(err)
		}
	}
	var list protocol.MessageList
	td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "victim"}, &list)
	if len(list.Messages) != 0 {
		t.Errorf("listing followed the symlink: %+v", list.Messages)
	}
	td.call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "victim", ID: id}, nil)
	td.call(t, protocol.VerbMessageMark, protocol.MessageMarkArgs{Mailbox: "victim", IDs: []string{id}, Read: true}, nil)
	td.call(t, protocol.VerbMessageMove, protocol.MessageMoveArgs{Mailbox: "victim", ID: id, From: "inbox.real", To: "archive"}, nil)
	td.call(t, protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "victim", Force: true}, nil)

	got, err := os.ReadFile(secret)
	if err != nil || string(got) != content {
		t.Fatalf("root-owned target changed: %v %q", err, got)
	}
	entries, _ := os.ReadDir(target)
	if len(entries) != 1 {
		t.Errorf("daemon created files in the symlink target: %v", entries)
	}
	st, _ := os.Stat(secret)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("target mode changed to %v", st.Mode())
	}
}
