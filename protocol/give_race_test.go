package protocol

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGiveMailboxCommandFollowsNoFolderSwappedIn: the folder's present
// owner turns a folder of the mailbox into a symbolic link to a folder
// outside after find has looked and before chown runs (here a chown found
// first on PATH makes the swap, then runs the real one). No file outside
// the mailbox is given: chown is run in the folder find looked at, on the
// file's name alone, not on a path a link on it would lead elsewhere, and
// find enters no folder that is a link by the time it gets there.
func TestGiveMailboxCommandFollowsNoFolderSwappedIn(t *testing.T) {
	g := newGiveTree(t, "box")
	chown, err := exec.LookPath("chown")
	if err != nil {
		t.Skip("no chown:", err)
	}
	inbox, bin := filepath.Join(g.box, "inbox"), filepath.Join(g.base, "bin")
	g.mkdirs(inbox, g.outside, bin)
	mail, secret := filepath.Join(inbox, "m.eml"), filepath.Join(g.outside, "m.eml")
	g.write(mail, secret)
	swap := fmt.Sprintf("#!/bin/sh\nif [ ! -e %[1]s.old ]; then mv %[1]s %[1]s.old && ln -s %[2]s %[1]s; fi\nexec %[3]s \"$@\"\n",
		ShellQuote(inbox), ShellQuote(g.outside), ShellQuote(chown))
	if err := os.WriteFile(filepath.Join(bin, "chown"), []byte(swap), 0o755); err != nil {
		t.Fatal(err)
	}
	// find may say the folder changed under it and stop there: run again
	// once the owner has stopped, it gives the rest.
	out, _ := g.run("PATH=" + bin + ":/usr/sbin:/usr/bin:/sbin:/bin")
	if _, err := os.Lstat(inbox + ".old"); err != nil {
		t.Fatalf("the folder was not swapped: %v", err)
	}
	if got := g.owner(secret); got != 0 {
		t.Errorf("%s, outside the mailbox, was given to uid %d through a folder swapped for a link (%s: %s)", secret, got, g.command(), out)
	}
}
