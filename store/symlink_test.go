package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"syscall"
	"testing"
	"time"
)

// The attacks below are what a mailbox owner can do inside its own mailbox:
// replace a folder or a file by a symlink (or hard link) to something root
// owns, hoping that the root daemon writes through it or reads it back.
// Ownership only matters as root, so these tests need root.

const ownerUID, ownerGID = 12345, 12345

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the attacks need a mailbox owned by another uid")
	}
}

// victim is a root-owned directory holding a root-owned file that parses as
// a message, the bait for a store that follows links.
type victim struct {
	dir, file string
}

func newVictim(t *testing.T) victim {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "secret.md")
	if err := os.WriteFile(file, Render(testMessage(1), "TOP SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	return victim{dir: dir, file: file}
}

// snapshot describes everything an attack could change about the victim.
func (v victim) snapshot(t *testing.T) string {
	t.Helper()
	var out []string
	filepath.Walk(v.dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			out = append(out, "error "+err.Error())
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		line := fmt.Sprintf("%s %v %d:%d", p, fi.Mode(), st.Uid, st.Gid)
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			line += " " + string(b)
		}
		out = append(out, line)
		return nil
	})
	sort.Strings(out)
	return fmt.Sprint(out)
}

func (v victim) check(t *testing.T, before string, what string) {
	t.Helper()
	if after := v.snapshot(t); after != before {
		t.Errorf("%s changed the victim:\nbefore %s\nafter  %s", what, before, after)
	}
}

func newOwnedStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "mailboxes"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Create("agent", ownerUID, ownerGID); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSymlinkFolderAttack(t *testing.T) {
	requireRoot(t)
	v := newVictim(t)
	before := v.snapshot(t)
	s := newOwnedStore(t)
	archID := deliver(t, s, "archive", testMessage(2), "in archive")
	inbox := filepath.Join(s.Path("agent"), "inbox")
	os.Remove(inbox)
	if err := os.Symlink(v.dir, inbox); err != nil {
		t.Fatal(err)
	}

	if _, _, err := s.Deliver("agent", "inbox", testMessage(3), "x", []byte("raw"), []AttachmentData{{Filename: "a", Data: []byte("a")}}); err == nil {
		t.Error("Deliver into a symlinked folder succeeded")
	}
	v.check(t, before, "Deliver")
	if _, err := s.List("agent", "inbox", Query{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("List of a symlinked folder = %v, want ErrNotFound", err)
	}
	if c, err := s.Counts("agent"); err != nil || c.Total != 0 {
		t.Errorf("Counts = %+v %v, want zero", c, err)
	}
	if _, _, err := s.Get("agent", "inbox", "secret"); err == nil {
		t.Error("Get through a symlinked folder succeeded")
	}
	if _, err := s.Raw("agent", "inbox", "secret", 1<<20); err == nil {
		t.Error("Raw through a symlinked folder succeeded")
	}
	if _, _, err := s.SetRead("agent", "inbox", []string{"secret"}, true, time.Now()); err == nil {
		t.Error("SetRead through a symlinked folder succeeded")
	}
	if err := s.Update("agent", "inbox", "secret", func(m *Message) error { m.Read = true; return nil }); err == nil {
		t.Error("Update through a symlinked folder succeeded")
	}
	if _, ok := s.FindByMessageID("agent", "inbox", "<m1@example.com>"); ok {
		t.Error("FindByMessageID looked through a symlinked folder")
	}
	if err := s.Move("agent", archID, "archive", "inbox"); err == nil {
		t.Error("Move into a symlinked folder succeeded")
	}
	if _, _, err := s.Get("agent", "archive", archID); err != nil {
		t.Errorf("message lost by refused Move: %v", err)
	}
	if err := s.Move("agent", "secret", "inbox", "archive"); err == nil {
		t.Error("Move out of a symlinked folder succeeded")
	}
	if _, err := s.Create("agent", ownerUID, ownerGID); err == nil {
		t.Error("Create repaired a mailbox through a symlinked folder")
	}
	v.check(t, before, "the read and update operations")
	if err := s.Delete("agent", true); err != nil {
		t.Errorf("Delete: %v", err)
	}
	v.check(t, before, "Delete")
}

func TestSymlinkFileAttack(t *testing.T) {
	requireRoot(t)
	v := newVictim(t)
	s := newOwnedStore(t)
	inbox := filepath.Join(s.Path("agent"), "inbox")
	id := deliver(t, s, "inbox", testMessage(1), "mine")
	listIDs(t, s, "inbox") // the index knows the real file
	for _, ext := range []string{".md", ".eml"} {
		os.Remove(filepath.Join(inbox, id+ext))
		if err := os.Symlink(v.file, filepath.Join(inbox, id+ext)); err != nil {
			t.Fatal(err)
		}
	}
	// A hard link is another way to make a root file appear in the mailbox.
	if err := os.Link(v.file, filepath.Join(inbox, "hard.md")); err != nil {
		t.Fatal(err)
	}
	before := v.snapshot(t) // after the hard link, which raised the link count

	for _, x := range []string{id, "hard"} {
		if _, _, err := s.Get("agent", "inbox", x); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%s) = %v, want ErrNotFound", x, err)
		}
		changed, nf, err := s.SetRead("agent", "inbox", []string{x}, true, time.Now())
		if err != nil || len(changed) != 0 || !reflect.DeepEqual(nf, []string{x}) {
			t.Errorf("SetRead(%s) = %v %v %v, want not found", x, changed, nf, err)
		}
		if err := s.Update("agent", "inbox", x, func(m *Message) error { m.Subject = "pwned"; return nil }); err == nil {
			t.Errorf("Update(%s) succeeded", x)
		}
		if err := s.Move("agent", x, "inbox", "trash"); err == nil {
			t.Errorf("Move(%s) succeeded", x)
		}
	}
	if _, err := s.Raw("agent", "inbox", id, 1<<20); !errors.Is(err, ErrNotFound) {
		t.Errorf("Raw through a symlink = %v, want ErrNotFound", err)
	}
	if got := listIDs(t, s, "inbox"); len(got) != 0 {
		t.Errorf("List shows %v", got)
	}
	if c, _ := s.Counts("agent"); c.Total != 0 {
		t.Errorf("Counts = %+v", c)
	}
	if _, ok := s.FindByMessageID("agent", "inbox", "<m1@example.com>"); ok {
		t.Error("FindByMessageID found the victim")
	}
	// Delivering the same message again picks a fresh id and writes
	// nothing through the planted links.
	id2, dup, err := s.Deliver("agent", "inbox", testMessage(1), "again", []byte("raw"), nil)
	if err != nil || dup || id2 == id {
		t.Errorf("Deliver = %q %v %v", id2, dup, err)
	}
	v.check(t, before, "operations on symlinked files")
	if err := s.Delete("agent", true); err != nil {
		t.Errorf("Delete: %v", err)
	}
	v.check(t, before, "Delete")
}

func TestPlantedNamesAttack(t *testing.T) {
	requireRoot(t)
	v := newVictim(t)
	before := v.snapshot(t)
	s := newOwnedStore(t)
	inbox := filepath.Join(s.Path("agent"), "inbox")
	m := testMessage(1)
	want := NewID(m.ReceivedAt, m.Subject)
	// The owner predicts the next id and plants links under every name
	// Deliver will create, and under names for the next suffixes.
	for _, n := range []string{want + ".md", want + "-2.eml", want + "-3.attachments"} {
		os.Symlink(v.dir, filepath.Join(inbox, n))
	}
	id, _, err := s.Deliver("agent", "inbox", m, "body", []byte("raw"), []AttachmentData{{Filename: "secret.md", Data: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	if id != want+"-4" {
		t.Errorf("id = %q, want %q", id, want+"-4")
	}
	v.check(t, before, "Deliver with planted names")
	fi, err := os.Stat(filepath.Join(inbox, id+".md"))
	if err != nil || fi.Sys().(*syscall.Stat_t).Uid != ownerUID || fi.Mode().Perm() != 0o600 {
		t.Errorf("delivered file: %v %v", fi, err)
	}
}

func TestForeignFolderAttack(t *testing.T) {
	requireRoot(t)
	s := newOwnedStore(t)
	inbox := filepath.Join(s.Path("agent"), "inbox")
	// A root-owned directory moved into the mailbox (for example from a
	// world-writable directory) must not receive mail.
	os.Remove(inbox)
	if err := os.Mkdir(inbox, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Deliver("agent", "inbox", testMessage(1), "x", nil, nil); err == nil {
		t.Error("Deliver into a root-owned folder succeeded")
	}
	if entries, _ := os.ReadDir(inbox); len(entries) != 0 {
		t.Errorf("files written into a foreign folder: %v", entries)
	}
}

func TestCreateThroughPlantedSymlink(t *testing.T) {
	requireRoot(t)
	v := newVictim(t)
	before := v.snapshot(t)
	s, err := Open(filepath.Join(t.TempDir(), "mailboxes"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := os.Symlink(v.dir, s.Path("agent")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create("agent", ownerUID, ownerGID); err == nil {
		t.Error("Create through a symlink succeeded")
	}
	if s.Exists("agent") {
		t.Error("Exists follows the symlink")
	}
	if _, _, err := s.Deliver("agent", "inbox", testMessage(1), "x", nil, nil); err == nil {
		t.Error("Deliver through a symlinked mailbox succeeded")
	}
	if err := s.Delete("agent", true); err == nil {
		t.Error("Delete through a symlinked mailbox succeeded")
	}
	v.check(t, before, "Create through a symlink")
}

func TestCreateSetsOwnership(t *testing.T) {
	requireRoot(t)
	s := newOwnedStore(t)
	id, _, err := s.Deliver("agent", "inbox", testMessage(1), "x", []byte("raw"), []AttachmentData{{Filename: "a.txt", Data: []byte("a")}})
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{"", "inbox", "sent", "archive", "trash", "drafts",
		"inbox/" + id + ".md", "inbox/" + id + ".eml", "inbox/" + id + ".attachments", "inbox/" + id + ".attachments/a.txt"}
	for _, p := range paths {
		fi, err := os.Lstat(filepath.Join(s.Path("agent"), p))
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		wantMode := os.FileMode(0o600)
		if fi.IsDir() {
			wantMode = 0o700
		}
		if st.Uid != ownerUID || st.Gid != ownerGID || fi.Mode().Perm() != wantMode {
			t.Errorf("%s: %d:%d %v, want %d:%d %v", p, st.Uid, st.Gid, fi.Mode().Perm(), ownerUID, ownerGID, wantMode)
		}
	}
	if uid, gid, _ := s.Owner("agent"); uid != ownerUID || gid != ownerGID {
		t.Errorf("Owner = %d:%d", uid, gid)
	}
	if _, err := s.Create("agent", ownerUID+1, ownerGID); !errors.Is(err, ErrOwnerMismatch) {
		t.Errorf("Create for another owner = %v", err)
	}
}
