package store

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mailctl/mailctl/internal/testmount"
	"github.com/mailctl/mailctl/internal/testwait"
)

// TestSnapshotLeavesOutMounts: a folder, a message's attachment folder or a
// file of a mailbox that is a mount (an operator's disk, an owner's FUSE
// file system) cannot be hard-linked into a snapshot. Each is left out and
// named, and the snapshot of the rest, this mailbox's and so every other's
// in a backup, goes on.
func TestSnapshotLeavesOutMounts(t *testing.T) {
	if !testmount.InNamespace(t) {
		return
	}
	s := newTestStore(t)
	att := []AttachmentData{{Filename: "a.txt", ContentType: "text/plain", Data: []byte("att")}}
	var ids []string
	for _, subj := range []string{"one", "two", "three"} {
		id, _, err := s.Deliver("agent", "inbox", &Message{Subject: subj, MessageID: "<" + subj + "@x>"}, "body", []byte("Subject: "+subj+"\r\n\r\nbody\r\n"), att)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := s.Move("agent", ids[2], "inbox", "archive"); err != nil {
		t.Fatal(err)
	}
	mb := s.Path("agent")
	testmount.Tmpfs(t, filepath.Join(mb, "archive"))
	testmount.Tmpfs(t, filepath.Join(mb, "inbox", ids[0]+attSuffix))
	// A file mounted over the raw copy of the second message.
	other := filepath.Join(t.TempDir(), "raw")
	os.WriteFile(other, []byte("Subject: other\r\n\r\n"), 0o600)
	eml := filepath.Join(mb, "inbox", ids[1]+".eml")
	testmount.Bind(t, other, eml)

	dst := filepath.Join(filepath.Dir(mb), "snap")
	os.Mkdir(dst, 0o700)
	d, err := OpenDir(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	snap, err := s.SnapshotMailbox("agent", d)
	if err != nil {
		t.Fatalf("one mount ended the snapshot: %v", err)
	}
	if snap.Messages != 2 {
		t.Errorf("snapshot holds %d messages, want the 2 of the inbox", snap.Messages)
	}
	want := []string{"agent/archive", "agent/inbox/" + ids[0] + attSuffix, "agent/inbox/" + ids[1] + ".eml"}
	if len(snap.Warnings) != len(want) {
		t.Fatalf("warnings %q, want one for each of %q", snap.Warnings, want)
	}
	slices.Sort(snap.Warnings) // in the order the folders list their entries
	for i, w := range want {
		if !strings.HasPrefix(snap.Warnings[i], w+": on another file system") {
			t.Errorf("warning %q, want it to name %s", snap.Warnings[i], w)
		}
	}
	for _, f := range []string{"inbox/" + ids[0] + ".md", "inbox/" + ids[0] + ".eml", "inbox/" + ids[1] + ".md", "inbox/" + ids[1] + attSuffix + "/a.txt"} {
		if _, err := os.Lstat(filepath.Join(dst, f)); err != nil {
			t.Errorf("%s is not in the snapshot: %v", f, err)
		}
	}
	for _, f := range []string{"archive", "inbox/" + ids[0] + attSuffix, "inbox/" + ids[1] + ".eml"} {
		if _, err := os.Lstat(filepath.Join(dst, f)); err == nil {
			t.Errorf("%s, a mount, is in the snapshot", f)
		}
	}
}

// TestDraftAttachmentsOnAMountAreRefused: a draft's attachment folder that
// is a mount is not the draft's: sending it is refused, naming the folder,
// and nothing in the mount is opened.
func TestDraftAttachmentsOnAMountAreRefused(t *testing.T) {
	if !testmount.InNamespace(t) {
		return
	}
	s := newTestStore(t)
	att := []AttachmentData{{Filename: "a.txt", ContentType: "text/plain", Data: []byte("mine")}}
	id, _, err := s.Deliver("agent", "drafts", testMessage(1), "draft", nil, att)
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := s.Get("agent", "drafts", id)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(s.Path("agent"), "drafts", id+attSuffix)
	testmount.Tmpfs(t, dir)
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("not the draft's"), 0o600)
	got, err := s.ReadAttachments("agent", "drafts", id, m)
	if err == nil || !strings.Contains(err.Error(), "another file system") || !strings.Contains(err.Error(), id+attSuffix) {
		t.Fatalf("attachments on a mount: %d read, %v; want refused, naming the folder", len(got), err)
	}
}

// TestMountsInsideAMailboxAreNeverAsked: an owner's FUSE file system
// mounted inside a mailbox (on a draft's attachment folder, a message's,
// a folder, a message's files, or the whole mailbox) whose daemon never
// answers holds up nothing root runs: each mount is refused or left out
// without its file system being asked anything, and the rest is read.
func TestMountsInsideAMailboxAreNeverAsked(t *testing.T) {
	if !testmount.InNamespace(t) {
		return
	}
	s := newTestStore(t)
	if _, err := s.Create("bob", os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	att := []AttachmentData{{Filename: "a.txt", ContentType: "text/plain", Data: []byte("att")}}
	draft, _, err := s.Deliver("agent", "drafts", testMessage(0), "draft", nil, att)
	if err != nil {
		t.Fatal(err)
	}
	dm, _, err := s.Get("agent", "drafts", draft)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 1; i <= 4; i++ {
		id, _, err := s.Deliver("agent", "inbox", testMessage(i), "body", []byte("Subject: x\r\n\r\nbody\r\n"), att)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if _, _, err := s.Deliver("agent", "archive", testMessage(9), "body", nil, nil); err != nil {
		t.Fatal(err)
	}
	mb := s.Path("agent")
	draftAtts := filepath.Join(mb, "drafts", draft+attSuffix)
	testmount.DeadFUSE(t, draftAtts, false)
	testmount.DeadFUSE(t, filepath.Join(mb, "archive"), false)
	testmount.DeadFUSE(t, filepath.Join(mb, "inbox", ids[0]+attSuffix), false)
	testmount.DeadFUSE(t, filepath.Join(mb, "inbox", ids[1]+".eml"), true)
	testmount.DeadFUSE(t, filepath.Join(mb, "inbox", ids[2]+".md"), true)
	testmount.DeadFUSE(t, s.Path("bob"), false)

	err = testwait.Returns(t, "draft.send's read of attachments on a FUSE mount", func() error {
		_, err := s.ReadAttachments("agent", "drafts", draft, dm)
		return err
	})
	if !errors.Is(err, ErrOtherMount) || !strings.Contains(err.Error(), draftAtts) {
		t.Errorf("attachments on a FUSE mount: %v; want ErrOtherMount naming %s", err, draftAtts)
	}

	dst := filepath.Join(filepath.Dir(mb), "snap")
	snapshot := func(name string) MailboxSnapshot {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dst, name), 0o700); err != nil {
			t.Fatal(err)
		}
		d, err := OpenDir(filepath.Join(dst, name))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		type result struct {
			snap MailboxSnapshot
			err  error
		}
		r := testwait.Returns(t, "the snapshot of "+name, func() result {
			snap, err := s.SnapshotMailbox(name, d)
			return result{snap, err}
		})
		if r.err != nil {
			t.Fatalf("snapshot of %s: %v", name, r.err)
		}
		slices.Sort(r.snap.Warnings)
		return r.snap
	}
	snap := snapshot("agent")
	want := []string{"agent/archive", "agent/drafts/" + draft + attSuffix, "agent/inbox/" + ids[0] + attSuffix,
		"agent/inbox/" + ids[1] + ".eml", "agent/inbox/" + ids[2] + ".md"}
	slices.Sort(want)
	if len(snap.Warnings) != len(want) {
		t.Fatalf("warnings %q, want one for each of %q", snap.Warnings, want)
	}
	for i, w := range want {
		if snap.Warnings[i] != leftOut(w) {
			t.Errorf("warning %q, want %q", snap.Warnings[i], leftOut(w))
		}
	}
	if snap.Messages != 4 { // the draft and three of the inbox
		t.Errorf("snapshot holds %d messages, want 4", snap.Messages)
	}
	if snap := snapshot("bob"); !slices.Equal(snap.Warnings, []string{leftOut("bob")}) || snap.Messages != 0 {
		t.Errorf("snapshot of a mailbox that is a mount: %d messages, warnings %q; want none, and it named", snap.Messages, snap.Warnings)
	}

	if err := testwait.Returns(t, "IndexAll", func() error { _, err := s.IndexAll(t.Context()); return err }); err != nil {
		t.Errorf("one mount stopped the indexing of every mailbox: %v", err)
	}
	list := testwait.Returns(t, "listing the inbox", func() error {
		p, err := s.List("agent", "inbox", Query{Limit: 10})
		if err == nil && len(p.Items) != 3 {
			err = errors.New("not the 3 messages whose .md is not a mount")
		}
		return err
	})
	if list != nil {
		t.Errorf("inbox: %v", list)
	}
	testwait.Returns(t, "the start-up sweep", func() error { _, err := s.Sweep(); return err })

	d, err := s.OpenMailboxDir("agent")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var seen []string
	if err := testwait.Returns(t, "a walk of the mailbox", func() error {
		return d.Walk(func(depth int, name string, st *unix.Stat_t) { seen = append(seen, name) })
	}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"archive", draft + attSuffix, ids[0] + attSuffix, ids[1] + ".eml", ids[2] + ".md"} {
		if slices.Contains(seen, n) {
			t.Errorf("the walk gave %s, a mount", n)
		}
	}
	if !slices.Contains(seen, ids[3]+".md") {
		t.Errorf("the walk left out %s: saw %q", ids[3]+".md", seen)
	}
}

// TestDeleteStopsAtAMount: deleting a mailbox with force removes its own
// files and stops at a mount inside it, naming it, rather than remove what
// the mount holds (an operator's disk) or wait on an owner's FUSE file
// system that never answers.
func TestDeleteStopsAtAMount(t *testing.T) {
	if !testmount.InNamespace(t) {
		return
	}
	for _, fuse := range []bool{false, true} {
		s := newTestStore(t)
		if _, _, err := s.Deliver("agent", "inbox", testMessage(1), "body", nil, nil); err != nil {
			t.Fatal(err)
		}
		archive := filepath.Join(s.Path("agent"), "archive")
		disk := filepath.Join(archive, "on-the-disk")
		if fuse {
			testmount.DeadFUSE(t, archive, false)
		} else {
			testmount.Tmpfs(t, archive)
			if err := os.WriteFile(disk, []byte("not the mailbox's"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		err := testwait.Returns(t, "a forced delete of a mailbox holding a mount", func() error { return s.Delete("agent", true) })
		if !errors.Is(err, ErrOtherMount) || !strings.Contains(err.Error(), "archive") {
			t.Errorf("delete of a mailbox with a mount on archive (FUSE %v): %v; want ErrOtherMount naming the folder", fuse, err)
		}
		// The mount moved with the detached mailbox, whose name the next
		// start-up sweep tries again.
		var moved string
		s.root.EachName(func(n string) error {
			if strings.HasPrefix(n, TempPrefix+"del-") {
				moved = filepath.Join(s.root.Path(), n, "archive")
			}
			return nil
		})
		if moved == "" {
			t.Fatal("no detached mailbox left")
		}
		t.Cleanup(func() { unix.Unmount(moved, unix.MNT_DETACH) })
		if !fuse {
			if _, err := os.Stat(filepath.Join(moved, "on-the-disk")); err != nil {
				t.Errorf("the delete removed a file on the mount: %v", err)
			}
		}
		if _, err := os.Stat(filepath.Join(s.Path("agent"))); err == nil {
			t.Error("the mailbox is still under its name")
		}
	}
}

// TestOpenRefusesAMountEitherWay: a folder or a file that is a mount point
// is refused as ErrOtherMount both with openat2 (the kernel refuses to
// cross it) and without it (before Linux 5.6, or filtered out: statx looks
// first), and what is on the directory's own file system opens.
func TestOpenRefusesAMountEitherWay(t *testing.T) {
	if !testmount.InNamespace(t) {
		return
	}
	base := t.TempDir()
	for _, d := range []string{"folder", "mounted"} {
		if err := os.Mkdir(filepath.Join(base, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	own, bound := filepath.Join(base, "folder", "own.eml"), filepath.Join(base, "folder", "bound.eml")
	other := filepath.Join(t.TempDir(), "other.eml")
	for p, data := range map[string]string{own: "own", bound: "placeholder", other: "OTHER FILE SYSTEM"} {
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	testmount.Bind(t, other, bound)
	testmount.Tmpfs(t, filepath.Join(base, "mounted"))
	keep := noOpenat2.Load()
	t.Cleanup(func() { noOpenat2.Store(keep) })
	for _, without := range []bool{false, true} {
		noOpenat2.Store(without)
		d, err := OpenDir(base)
		if err != nil {
			t.Fatal(err)
		}
		if sub, err := d.OpenDir("mounted"); !errors.Is(err, ErrOtherMount) {
			sub.Close()
			t.Errorf("without openat2 %v: a tmpfs mount point opened as a folder: %v", without, err)
		}
		folder, err := d.OpenDir("folder")
		if err != nil {
			t.Fatal(err)
		}
		if f, _, err := folder.OpenRegular("bound.eml"); !errors.Is(err, ErrOtherMount) {
			if f != nil {
				f.Close()
			}
			t.Errorf("without openat2 %v: a bind-mounted file opened: %v", without, err)
		}
		f, _, err := folder.OpenRegular("own.eml")
		if err != nil {
			t.Errorf("without openat2 %v: the folder's own file: %v", without, err)
		} else {
			f.Close()
		}
		folder.Close()
		d.Close()
	}
}
