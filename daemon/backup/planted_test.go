package backup

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
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

// TestBackupLeavesOutAnOversizedFileAnOwnerPlanted: a mailbox's owner may
// swap a message's raw copy for a sparse file larger than a backup holds
// (it costs them no disk). The backup of every mailbox must not fail for
// it: that file is left out, with a warning naming it, and everything
// else is in the archive.
func TestBackupLeavesOutAnOversizedFileAnOwnerPlanted(t *testing.T) {
	snap := t.TempDir()
	id := "2026-01-01-000000-a"
	writeFiles(t, snap, map[string]string{
		"mailboxes/agent/inbox/" + id + ".md":                  "+++\n+++\nbody",
		"mailboxes/agent/inbox/" + id + ".attachments/a.txt":   "attachment",
		"mailboxes/other/inbox/2026-01-02-000000-b.md":         "+++\n+++\nother",
		"mailboxes/agent/inbox/" + id + ".attachments/big.bin": "",
	})
	for _, p := range []string{"mailboxes/agent/inbox/" + id + ".eml", "mailboxes/agent/inbox/" + id + ".attachments/big.bin"} {
		f, err := os.OpenFile(filepath.Join(snap, p), os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(MaxFile + 1); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	var out bytes.Buffer
	st, err := Write(&out, Source{Snapshot: protocol.BackupSnapshot{Dir: snap, Mailboxes: []protocol.BackupMailbox{{Name: "agent", Messages: 1}, {Name: "other", Messages: 1}}}})
	if err != nil {
		t.Fatalf("backup with an oversized file planted in one mailbox: %v", err)
	}
	names, err := readAllEntries(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	// A directory's files are in the archive in the order it lists them.
	slices.Sort(names)
	want := []string{
		prefix + dirMailboxes + "agent/inbox/" + id + ".attachments/a.txt",
		prefix + dirMailboxes + "agent/inbox/" + id + ".md",
		prefix + dirMailboxes + "other/inbox/2026-01-02-000000-b.md"}
	if !slices.Equal(names, want) {
		t.Errorf("archive holds\n%v\nwant\n%v", names, want)
	}
	warned := strings.Join(st.Warnings, "\n")
	if st.Skipped != 2 || len(st.Warnings) != 2 || !strings.Contains(warned, id+".attachments/big.bin") || !strings.Contains(warned, id+".eml") {
		t.Errorf("skipped %d, warnings %q: want both oversized files named", st.Skipped, st.Warnings)
	}
}

// TestBackupOfPlantedNamesRestores: an owner may name a file in a
// message's attachment folder anything the file system takes (a newline,
// a backslash, bytes that are not UTF-8), names the store never writes
// and a restore refuses. The backup leaves such a file out, naming it in
// a warning, so that the archive it writes restores: one owner's file
// name must not make every mailbox's backup unrestorable.
func TestBackupOfPlantedNamesRestores(t *testing.T) {
	snap := t.TempDir()
	att := "mailboxes/agent/inbox/2026-01-01-000000-a.attachments/"
	writeFiles(t, snap, map[string]string{
		"mailboxes/agent/inbox/2026-01-01-000000-a.md": "+++\n+++\nbody",
		att + "report.pdf":     "%PDF",
		att + "new\nline":      "x",
		att + "back\\slash":    "x",
		att + "not-utf8-\xff":  "x",
		att + "escape-\x1b[2J": "x",
	})
	var out bytes.Buffer
	st, err := Write(&out, Source{Snapshot: protocol.BackupSnapshot{Dir: snap, Mailboxes: []protocol.BackupMailbox{{Name: "agent", Messages: 1}}},
		UserName: func(uint32) string { return "someone" }})
	if err != nil {
		t.Fatal(err)
	}
	if st.Skipped != 4 || len(st.Warnings) != 4 {
		t.Errorf("skipped %d, warnings %q: want the 4 planted names", st.Skipped, st.Warnings)
	}
	for _, w := range st.Warnings {
		if strings.ContainsAny(w, "\n\x1b") || strings.Contains(w, "\xff") {
			t.Errorf("warning %q carries the planted name as it is", w)
		}
	}
	state := filepath.Join(t.TempDir(), "state")
	res, err := Restore(bytes.NewReader(out.Bytes()), RestoreOptions{StateDir: state, DKIMDir: filepath.Join(t.TempDir(), "dkim"), LookupUser: selfOwner})
	if err != nil {
		t.Fatalf("restore of the backup of a mailbox with planted names: %v", err)
	}
	if res.Files != 2 {
		t.Errorf("restored %d files, want the message and report.pdf", res.Files)
	}
	if _, err := os.Stat(filepath.Join(state, att, "report.pdf")); err != nil {
		t.Error(err)
	}
}

// TestBackupNamesWhatTheSnapshotLeftOut: what the snapshot of a mailbox
// left out and named (a mount inside it, store TestSnapshotLeavesOutMounts)
// reaches the operator among the backup's warnings.
func TestBackupNamesWhatTheSnapshotLeftOut(t *testing.T) {
	snap := t.TempDir()
	writeFiles(t, snap, map[string]string{"mailboxes/agent/inbox/2026-01-01-000000-a.md": "+++\n+++\nbody"})
	left := "agent/archive: on another file system than the store (a mount): left out"
	var out bytes.Buffer
	st, err := Write(&out, Source{Snapshot: protocol.BackupSnapshot{Dir: snap,
		Mailboxes: []protocol.BackupMailbox{{Name: "agent", Messages: 1, Skipped: 1, Warnings: []string{left}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(st.Warnings, left) {
		t.Errorf("warnings %q, want %q among them", st.Warnings, left)
	}
}

// TestSyncDirRefusesFIFO: the restore syncs the state directory by name
// once it is in place; a FIFO there is refused at once, not waited on.
func TestSyncDirRefusesFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "state")
	testwait.FIFO(t, fifo)
	if err := testwait.Returns(t, "syncDir of a FIFO", func() error { return syncDir(fifo) }); err == nil {
		t.Error("syncDir of a FIFO: no error")
	}
}
