package mcpshim

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/mailctl/mailctl/internal/testusers"
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
	testusers.RequireRoot(t)
	uid := int(testusers.UnusedUID(t))
	base := t.TempDir()
	secret := filepath.Join(base, "shadow")
	if err := os.WriteFile(secret, []byte("ROOT-SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(base, "home")
	docs := filepath.Join(home, "docs")
	for _, d := range []string{home, docs} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	own := filepath.Join(docs, "report.txt")
	if err := os.WriteFile(own, []byte("the user's report"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{home, docs, own} {
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	swapped := filepath.Join(docs, "swapped.txt")
	if err := os.Symlink(secret, swapped); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(base, filepath.Join(home, "up")); err != nil {
		t.Fatal(err)
	}
	linked := filepath.Join(docs, "linked.txt")
	if err := os.Link(secret, linked); err != nil {
		t.Fatal(err)
	}
	// A directory of root's that everyone may write, as /tmp: a link to a
	// file of root's there is root's file in root's directory.
	shared := filepath.Join(base, "tmp")
	if err := os.Mkdir(shared, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	inShared := filepath.Join(shared, "report.txt")
	if err := os.Link(secret, inShared); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]error{swapped: errRootLink, filepath.Join(home, "up", "shadow"): errRootLink, linked: errRootHardLink, inShared: errRootHardLink} {
		b, _, err := ReadRegularFile(p, 1<<20)
		if !errors.Is(err, want) || len(b) != 0 {
			t.Errorf("root's read of %s: %q, %v; want it refused (%v)", p, b, err, want)
		}
	}
	for p, want := range map[string]string{own: "the user's report", secret: "ROOT-SECRET"} {
		if b, full, err := ReadRegularFile(p, 1<<20); err != nil || !full || string(b) != want {
			t.Errorf("root's read of %s: %q, %v", p, b, err)
		}
	}
}
