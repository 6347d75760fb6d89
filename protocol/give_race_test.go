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

// TestGiveMailboxCommandFollowsNoFolderSwappedIn: the folder's present
// owner turns a folder of the mailbox into a symbolic link to a folder
// outside after find has looked and before chown runs (here a chown found
// first on PATH makes the swap, then runs the real one). No file outside
// the mailbox is given: chown is run in the folder find looked at, on the
// file's name alone, not on a path a link on it would lead elsewhere, and
// find enters no folder that is a link by the time it gets there.
func TestGiveMailboxCommandFollowsNoFolderSwappedIn(t *testing.T) {
	testusers.RequireRoot(t)
	uid := testusers.UnusedUID(t)
	chown, err := exec.LookPath("chown")
	if err != nil {
		t.Skip("no chown:", err)
	}
	base := t.TempDir()
	box, outside, bin := filepath.Join(base, "box"), filepath.Join(base, "outside"), filepath.Join(base, "bin")
	inbox := filepath.Join(box, "inbox")
	for _, d := range []string{inbox, outside, bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mail, secret := filepath.Join(inbox, "m.eml"), filepath.Join(outside, "m.eml")
	for _, p := range []string{mail, secret} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	swap := fmt.Sprintf("#!/bin/sh\nif [ ! -e %[1]s.old ]; then mv %[1]s %[1]s.old && ln -s %[2]s %[1]s; fi\nexec %[3]s \"$@\"\n",
		ShellQuote(inbox), ShellQuote(outside), ShellQuote(chown))
	if err := os.WriteFile(filepath.Join(bin, "chown"), []byte(swap), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := GiveMailboxCommand(fmt.Sprintf("%d:%d", uid, uid), box)
	run := exec.Command("sh", "-c", cmd)
	run.Env = append(os.Environ(), "PATH="+bin+":/usr/sbin:/usr/bin:/sbin:/bin")
	// find may say the folder changed under it and stop there: run again
	// once the owner has stopped, it gives the rest.
	out, _ := run.CombinedOutput()
	if _, err := os.Lstat(inbox + ".old"); err != nil {
		t.Fatalf("the folder was not swapped: %v", err)
	}
	st, err := os.Lstat(secret)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Sys().(*syscall.Stat_t).Uid; got != 0 {
		t.Errorf("%s, outside the mailbox, was given to uid %d through a folder swapped for a link (%s: %s)", secret, got, cmd, out)
	}
}
