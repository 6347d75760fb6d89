package store

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// inMountNamespace runs the calling test again in a private mount
// namespace of its own (unshare(1)), where it may mount what it likes, and
// reports whether this is that run. A test calls it first and returns when
// it says false: the outer run has checked the inner one's result.
func inMountNamespace(t *testing.T) bool {
	t.Helper()
	if os.Getenv("STORE_TEST_MOUNT_NS") == t.Name() {
		return true
	}
	if os.Geteuid() != 0 {
		t.Skip("mounts inside a mailbox need root (a private mount namespace)")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare(1) is not installed")
	}
	if out, err := exec.Command(unshare, "-m", "--propagation", "private", "true").CombinedOutput(); err != nil {
		t.Skipf("cannot make a mount namespace here: %v: %s", err, out)
	}
	cmd := exec.Command(unshare, "-m", "--propagation", "private", os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "STORE_TEST_MOUNT_NS="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("in a mount namespace: %v\n%s", err, out)
	}
	return false
}

func mountTmpfs(t *testing.T, dir string) {
	t.Helper()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs on %s: %v: %s", dir, err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
}

// TestSnapshotLeavesOutMounts: a folder, a message's attachment folder or a
// file of a mailbox that is a mount (an operator's disk, an owner's FUSE
// file system) cannot be hard-linked into a snapshot. Each is left out and
// named, and the snapshot of the rest, this mailbox's and so every other's
// in a backup, goes on.
func TestSnapshotLeavesOutMounts(t *testing.T) {
	if !inMountNamespace(t) {
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
	mountTmpfs(t, filepath.Join(mb, "archive"))
	mountTmpfs(t, filepath.Join(mb, "inbox", ids[0]+attSuffix))
	// A file mounted over the raw copy of the second message.
	other := filepath.Join(t.TempDir(), "raw")
	os.WriteFile(other, []byte("Subject: other\r\n\r\n"), 0o600)
	eml := filepath.Join(mb, "inbox", ids[1]+".eml")
	if out, err := exec.Command("mount", "--bind", other, eml).CombinedOutput(); err != nil {
		t.Fatalf("bind mount: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", eml).Run() })

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
	if !inMountNamespace(t) {
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
	mountTmpfs(t, dir)
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("not the draft's"), 0o600)
	got, err := s.ReadAttachments("agent", "drafts", id, m)
	if err == nil || !strings.Contains(err.Error(), "another file system") || !strings.Contains(err.Error(), id+attSuffix) {
		t.Fatalf("attachments on a mount: %d read, %v; want refused, naming the folder", len(got), err)
	}
}

// TestWalkStaysOnItsFileSystem: the quota's walk of a mailbox gives a
// mount inside it as an entry but does not go into it: a FUSE file system
// of the owner's could answer slowly or without end, and what it holds is
// not on the store's disk.
func TestWalkStaysOnItsFileSystem(t *testing.T) {
	if !inMountNamespace(t) {
		return
	}
	top := t.TempDir()
	mnt := filepath.Join(top, "mnt")
	os.Mkdir(mnt, 0o700)
	os.WriteFile(filepath.Join(top, "mine"), []byte("x"), 0o600)
	mountTmpfs(t, mnt)
	os.WriteFile(filepath.Join(mnt, "theirs"), []byte("y"), 0o600)
	d, err := OpenDir(top)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var seen []string
	if err := d.Walk(func(depth int, name string, _ *unix.Stat_t) { seen = append(seen, name) }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(seen)
	if !slices.Equal(seen, []string{"mine", "mnt"}) {
		t.Errorf("the walk saw %q, want the mount point and not what is in it", seen)
	}
}
