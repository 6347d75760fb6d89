package protocol

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/internal/testbin"
	"github.com/mailctl/mailctl/internal/testusers"
)

// TestGiveMailboxCommandGivesOnlyTheMailboxsOwnFiles: run as written by a
// shell, on a folder whose name needs quoting, the command gives the
// folder, its folders and its files of one link to the owner; a hard link
// to a file outside, a symbolic link and its target stay as they were.
func TestGiveMailboxCommandGivesOnlyTheMailboxsOwnFiles(t *testing.T) {
	g := newGiveTree(t, "it's a box")
	inbox := filepath.Join(g.box, "inbox")
	g.mkdirs(inbox, g.outside)
	mail, secret, target := filepath.Join(inbox, "m.eml"), filepath.Join(g.outside, "secret"), filepath.Join(g.outside, "target")
	g.write(mail, secret, target)
	if err := os.Link(secret, filepath.Join(inbox, "hard.eml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(inbox, "soft.eml")); err != nil {
		t.Fatal(err)
	}
	cmd := g.give()
	for _, p := range []string{g.box, inbox, mail} {
		if got := g.owner(p); got != g.uid {
			t.Errorf("%s belongs to uid %d after %s, want %d", p, got, cmd, g.uid)
		}
	}
	for _, p := range []string{secret, target, filepath.Join(inbox, "hard.eml"), filepath.Join(inbox, "soft.eml")} {
		if got := g.owner(p); got != 0 {
			t.Errorf("%s, outside the mailbox, was given to uid %d by %s", p, got, cmd)
		}
	}
}

// giveTree is what the tests of GiveMailboxCommand build: in a folder of
// root's stamped as a daemon's mailboxes folder (base), a mailbox folder of root's to give to a uid with no passwd
// entry, beside what lies outside it, which nothing may give away.
type giveTree struct {
	t       *testing.T
	uid     uint32
	base    string
	box     string // base/ and the name newGiveTree was given
	outside string // base/outside, made by the test as a file or a folder
	bin     string // the mailctl the command runs
}

// newGiveTree names the tree's paths, skipping t unless it runs as root;
// the test makes what it needs with mkdirs and write.
func newGiveTree(t *testing.T, box string) *giveTree {
	t.Helper()
	testusers.RequireRoot(t)
	bin, err := testbin.Mailctl() // before a test leaves the module's folder
	if err != nil {
		t.Fatal(err)
	}
	g := &giveTree{t: t, uid: testusers.UnusedUID(t), base: t.TempDir(), bin: bin}
	g.box, g.outside = filepath.Join(g.base, box), filepath.Join(g.base, "outside")
	// base is a daemon's mailboxes folder, stamped as the daemon stamps it.
	if err := formats.WriteStamp(filepath.Join(g.base, formats.StampName), formats.KindMailboxes, formats.Mailboxes, "test"); err != nil {
		t.Fatal(err)
	}
	return g
}

// mkdirs makes folders of root's, with their parents.
func (g *giveTree) mkdirs(dirs ...string) {
	g.t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			g.t.Fatal(err)
		}
	}
}

// write makes files of root's, of one link each.
func (g *giveTree) write(files ...string) {
	g.t.Helper()
	for _, p := range files {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			g.t.Fatal(err)
		}
	}
}

// command is the command that gives the box to the uid.
func (g *giveTree) command() string {
	return GiveMailboxCommand(fmt.Sprintf("%d:%d", g.uid, g.uid), g.box)
}

// run runs the command as a shell does, with a PATH that holds mailctl
// (built for the test) and nothing else: no find, no chown. It gives the
// command's output.
func (g *giveTree) run() ([]byte, error) {
	sh := exec.Command("sh", "-c", g.command())
	sh.Env = append(os.Environ(), "PATH="+filepath.Dir(g.bin))
	return sh.CombinedOutput()
}

// give runs the command, failing the test if it fails, and gives the
// command.
func (g *giveTree) give() string {
	g.t.Helper()
	if out, err := g.run(); err != nil {
		g.t.Fatalf("%s: %v: %s", g.command(), err, out)
	}
	return g.command()
}

// owner is the uid owning p, not what a link at p names.
func (g *giveTree) owner(p string) uint32 {
	g.t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		g.t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Uid
}
