package mcpshim

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestRootFollowsNoLink: root sends a file it names in another user's
// folder (a report to attach, a body). While root reads, that user may put
// in the file's place a symbolic link to a file of root's, turn a folder
// on the path into one, or hard-link a file of root's there or in a
// directory everyone may write (where fs.protected_hardlinks is 0): root's
// read refuses each, and the message
// would otherwise carry root's file to whomever root sends it. The user's
// own file, and root's own, are read.
func TestRootFollowsNoLink(t *testing.T) {
	u := newUserTree(t)
	swapped := filepath.Join(u.docs, "swapped.txt")
	u.symlink(u.secret, swapped)
	u.symlink(u.base, filepath.Join(u.home, "up"))
	linked := filepath.Join(u.docs, "linked.txt")
	u.link(u.secret, linked)
	// A directory of root's that everyone may write, as /tmp: a link to a
	// file of root's there is root's file in root's directory.
	shared := filepath.Join(u.base, "tmp")
	if err := os.Mkdir(shared, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	inShared := filepath.Join(shared, "report.txt")
	u.link(u.secret, inShared)
	for p, want := range map[string]error{swapped: errRootLink, filepath.Join(u.home, "up", "shadow"): errRootLink, linked: errRootHardLink, inShared: errRootHardLink} {
		b, _, err := ReadRegularFile(p, 1<<20)
		if !errors.Is(err, want) || len(b) != 0 {
			t.Errorf("root's read of %s: %q, %v; want it refused (%v)", p, b, err, want)
		}
	}
	for p, want := range map[string]string{u.own: ownReport, u.secret: "ROOT-SECRET"} {
		if b, full, err := ReadRegularFile(p, 1<<20); err != nil || !full || string(b) != want {
			t.Errorf("root's read of %s: %q, %v", p, b, err)
		}
	}
}
