package mcpshim

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mailctl/mailctl/internal/testusers"
)

// ownReport is what the user's own file in a userTree holds.
const ownReport = "the user's report"

// userTree is what the tests of root's reads build: in a folder of root's
// (base), a file of root's that no read on root's behalf may give, beside a
// user's folders home and home/docs holding a file of the user's.
type userTree struct {
	t      *testing.T
	uid    int    // the user's, with no passwd entry
	base   string // root's
	secret string // base/shadow, root's, mode 0600, holding ROOT-SECRET
	home   string // base/home, the user's
	docs   string // home/docs, the user's
	own    string // docs/report.txt, the user's, holding ownReport
}

// newUserTree builds a userTree, skipping t unless it runs as root.
func newUserTree(t *testing.T) *userTree {
	t.Helper()
	testusers.RequireRoot(t)
	u := &userTree{t: t, uid: int(testusers.UnusedUID(t)), base: t.TempDir()}
	u.secret = filepath.Join(u.base, "shadow")
	u.home = filepath.Join(u.base, "home")
	u.docs = filepath.Join(u.home, "docs")
	u.own = filepath.Join(u.docs, "report.txt")
	if err := os.WriteFile(u.secret, []byte("ROOT-SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{u.home, u.docs} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(u.own, []byte(ownReport), 0o644); err != nil {
		t.Fatal(err)
	}
	u.give(u.home, u.docs, u.own)
	return u
}

// give makes the user the owner of paths.
func (u *userTree) give(paths ...string) {
	u.t.Helper()
	for _, p := range paths {
		if err := os.Chown(p, u.uid, u.uid); err != nil {
			u.t.Fatal(err)
		}
	}
}

// link hard-links target at name.
func (u *userTree) link(target, name string) {
	u.t.Helper()
	if err := os.Link(target, name); err != nil {
		u.t.Fatal(err)
	}
}

// symlink puts at name a symbolic link to target.
func (u *userTree) symlink(target, name string) {
	u.t.Helper()
	if err := os.Symlink(target, name); err != nil {
		u.t.Fatal(err)
	}
}
