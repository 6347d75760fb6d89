package protocol

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/mailctl/mailctl/internal/testusers"
)

// TestGiveMailboxCommandGivesOnlyTheMailboxsOwnFiles: run as written by a
// shell, on a folder whose name needs quoting, the command gives the
// folder, its folders and its files of one link to the owner; a hard link
// to a file outside and a symbolic link's target stay as they were.
func TestGiveMailboxCommandGivesOnlyTheMailboxsOwnFiles(t *testing.T) {
	testusers.RequireRoot(t)
	uid := testusers.UnusedUID(t)
	base := t.TempDir()
	box := filepath.Join(base, "it's a box")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(box, "inbox"), outside} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	mail, secret, target := filepath.Join(box, "inbox", "m.eml"), filepath.Join(outside, "secret"), filepath.Join(outside, "target")
	for _, p := range []string{mail, secret, target} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(secret, filepath.Join(box, "inbox", "hard.eml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(box, "inbox", "soft.eml")); err != nil {
		t.Fatal(err)
	}
	cmd := GiveMailboxCommand(fmt.Sprintf("%d:%d", uid, uid), box)
	if out, err := exec.Command("sh", "-c", cmd).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", cmd, err, out)
	}
	owner := func(p string) uint32 {
		t.Helper()
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st.Sys().(*syscall.Stat_t).Uid
	}
	for _, p := range []string{box, filepath.Join(box, "inbox"), mail} {
		if got := owner(p); got != uid {
			t.Errorf("%s belongs to uid %d after %s, want %d", p, got, cmd, uid)
		}
	}
	for _, p := range []string{secret, target} {
		if got := owner(p); got != 0 {
			t.Errorf("%s, outside the mailbox, was given to uid %d by %s", p, got, cmd)
		}
	}
}
