package store

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSweepRemovesFreshLeftovers plants what a crash a moment ago leaves:
// young temporary files in a folder and a mailbox, a raw copy and
// attachments without their .md, and a half-deleted mailbox in the store
// root. Sweep removes all of them at once, however young; committed
// messages and the owner's other files stay.
func TestSweepRemovesFreshLeftovers(t *testing.T) {
	s := newTestStore(t)
	id := deliver(t, s, "inbox", testMessage(1), "kept")
	inbox := filepath.Join(s.Path("agent"), "inbox")
	planted := []string{
		filepath.Join(inbox, TempPrefix+"abc"),
		filepath.Join(inbox, "2026-01-01-000000-orphan.eml"),
		filepath.Join(s.Path("agent"), TempPrefix+"def"),
		filepath.Join(s.Root(), TempPrefix+"del-0123", "inbox", "x.md"),
	}
	for _, p := range planted {
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	os.Mkdir(filepath.Join(inbox, "2026-01-01-000000-orphan"+attSuffix), 0o700)
	planted = append(planted, filepath.Join(inbox, "2026-01-01-000000-orphan"+attSuffix), filepath.Join(s.Root(), TempPrefix+"del-0123"))
	ownFile := filepath.Join(inbox, "notes.txt")
	os.WriteFile(ownFile, []byte("mine"), 0o600)

	n, err := s.Sweep()
	if err != nil || n != 5 {
		t.Errorf("Sweep = %d, %v; want 5 entries removed", n, err)
	}
	for _, p := range planted {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s survived the sweep: %v", p, err)
		}
	}
	for _, p := range []string{filepath.Join(inbox, id+".md"), filepath.Join(inbox, id+".eml"), ownFile} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
}

// deepTree makes a chain of depth directories under dir, as an owner can
// (relative to descriptors, past PATH_MAX).
func deepTree(t *testing.T, dir string, depth int) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range depth {
		if err := unix.Mkdirat(fd, "dddddddddddddddddddddddddddddddddddddddddddddddddd", 0o700); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, "dddddddddddddddddddddddddddddddddddddddddddddddddd", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	unix.Close(fd)
}

// TestDeleteDeepTree deletes a mailbox holding a tree far deeper than the
// descriptors RemoveAll may hold: it finishes and leaves nothing behind.
func TestDeleteDeepTree(t *testing.T) {
	s := newTestStore(t)
	deliver(t, s, "inbox", testMessage(1), "x")
	deepTree(t, filepath.Join(s.Path("agent"), "inbox"), 3*maxRemoveDepth+7)
	if err := s.Delete("agent", true); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	names, _ := os.ReadDir(s.Root())
	for _, e := range names {
		t.Errorf("left in the store root: %s", e.Name())
	}
}

// TestDetachRestore takes a mailbox out and puts it back exactly as it was.
func TestDetachRestore(t *testing.T) {
	s := newTestStore(t)
	id := deliver(t, s, "inbox", testMessage(1), "x")
	var before unix.Stat_t
	unix.Lstat(s.Path("agent"), &before)
	x, err := s.Detach("agent", true)
	if err != nil {
		t.Fatal(err)
	}
	if s.Exists("agent") {
		t.Fatal("mailbox still reachable by name after Detach")
	}
	if err := x.Restore(); err != nil {
		t.Fatal(err)
	}
	var after unix.Stat_t
	unix.Lstat(s.Path("agent"), &after)
	if after.Ino != before.Ino || after.Uid != before.Uid || after.Mode != before.Mode {
		t.Errorf("restored mailbox differs: %+v, was %+v", after, before)
	}
	if _, _, err := s.Get("agent", "inbox", id); err != nil {
		t.Errorf("message after restore: %v", err)
	}
	names, _ := os.ReadDir(s.Root())
	for _, e := range names {
		if strings.HasPrefix(e.Name(), TempPrefix) {
			t.Errorf("left in the store root: %s", e.Name())
		}
	}
}
