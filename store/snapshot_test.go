package store

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSnapshotMailboxLinksCommittedMessagesOnly: the snapshot of a mailbox
// has every committed message once, in the folder it is in, with its raw
// copy and attachments, and nothing else: not a raw copy whose .md was
// never written, a symlink, a FIFO, a directory posing as a message, a
// hidden or temporary file. The links stay what they were when the store
// replaces a message afterwards.
func TestSnapshotMailboxLinksCommittedMessagesOnly(t *testing.T) {
	s := newTestStore(t)
	var ids []string
	for _, subj := range []string{"one", "two", "three"} {
		id, _, err := s.Deliver("agent", "inbox", &Message{Subject: subj, MessageID: "<" + subj + "@x>"}, "body "+subj, []byte("Subject: "+subj+"\r\n\r\nbody\r\n"),
			[]AttachmentData{{Filename: "a.txt", ContentType: "text/plain", Data: []byte("att " + subj)}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := s.Move("agent", ids[2], "inbox", "archive"); err != nil {
		t.Fatal(err)
	}
	inbox := filepath.Join(s.Path("agent"), "inbox")
	os.WriteFile(filepath.Join(inbox, "2026-01-01-000000-orphan.eml"), []byte("half"), 0o600)
	os.Symlink("/etc/passwd", filepath.Join(inbox, "2026-01-01-000000-link.md"))
	syscall.Mkfifo(filepath.Join(inbox, "2026-01-01-000000-fifo.md"), 0o600)
	os.Mkdir(filepath.Join(inbox, "2026-01-01-000000-dir.md"), 0o700)
	os.WriteFile(filepath.Join(inbox, TempPrefix+"x"), []byte("temp"), 0o600)

	dst := filepath.Join(t.TempDir(), "snap")
	os.Mkdir(dst, 0o700)
	d, err := OpenDir(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	snap, err := s.SnapshotMailbox("agent", d)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Messages != 3 || snap.Files != 9 {
		t.Errorf("snapshot: %d messages, %d files, want 3 and 9", snap.Messages, snap.Files)
	}
	var got []string
	filepath.Walk(dst, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			rel, _ := filepath.Rel(dst, p)
			got = append(got, rel)
		}
		return nil
	})
	var want []string
	for i, id := range ids {
		folder := "inbox"
		if i == 2 {
			folder = "archive"
		}
		want = append(want, folder+"/"+id+".md", folder+"/"+id+".eml", folder+"/"+id+".attachments/a.txt")
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("snapshot holds\n%v\nwant\n%v", got, want)
	}
	// The store replaces a message's .md when it changes; the snapshot's
	// link keeps the version it took.
	before, _ := os.ReadFile(filepath.Join(dst, "inbox", ids[0]+".md"))
	if _, _, err := s.SetRead("agent", "inbox", []string{ids[0]}, true, s.now()); err != nil {
		t.Fatal(err)
	}
	if live, _ := os.ReadFile(filepath.Join(inbox, ids[0]+".md")); string(live) == string(before) {
		t.Fatal("marking the message read did not change its file")
	}
	after, _ := os.ReadFile(filepath.Join(dst, "inbox", ids[0]+".md"))
	if string(before) != string(after) {
		t.Error("the snapshot's copy of a message changed when the store rewrote the message")
	}
}

// TestSnapshotOfAFileLinkedToTheLimit: an owner can give one of their
// message files as many hard links as the file system allows (65000 on
// ext4), in a directory of their mailbox, so that the snapshot's link
// fails with EMLINK. That message is left out, counted as skipped; the
// snapshot of everything else, and so every mailbox's backup, goes on.
func TestSnapshotOfAFileLinkedToTheLimit(t *testing.T) {
	s := newTestStore(t)
	var fs unix.Statfs_t
	if err := unix.Statfs(s.Root(), &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Type != unix.EXT4_SUPER_MAGIC {
		t.Skipf("%s is not on ext2/3/4, whose limit of 65000 links per file this test reaches: set TMPDIR to a directory on one", s.Root())
	}
	var ids []string
	for _, subj := range []string{"hoarded", "kept"} {
		id, _, err := s.Deliver("agent", "inbox", &Message{Subject: subj, MessageID: "<" + subj + "@x>"}, "body", []byte("Subject: "+subj+"\r\n\r\nbody\r\n"), nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	hoard := filepath.Join(s.Path("agent"), "hoard")
	if err := os.Mkdir(hoard, 0o700); err != nil {
		t.Fatal(err)
	}
	md := filepath.Join(s.Path("agent"), "inbox", ids[0]+".md")
	for i := 0; ; i++ {
		err := os.Link(md, filepath.Join(hoard, strconv.Itoa(i)))
		if errors.Is(err, syscall.EMLINK) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	dst := filepath.Join(t.TempDir(), "snap")
	os.Mkdir(dst, 0o700)
	d, err := OpenDir(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	snap, err := s.SnapshotMailbox("agent", d)
	if err != nil {
		t.Fatalf("snapshot of a mailbox with a message file linked to the limit: %v", err)
	}
	if snap.Messages != 1 || snap.Skipped == 0 {
		t.Errorf("snapshot: %d messages, %d skipped; want the other message, and the hoarded one skipped", snap.Messages, snap.Skipped)
	}
	if _, err := os.Stat(filepath.Join(dst, "inbox", ids[1]+".md")); err != nil {
		t.Error(err)
	}
}
