package give

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mailctl/mailctl/internal/testmount"
	"github.com/mailctl/mailctl/internal/testusers"
)

// tree is what these tests build: in a folder of root's (base), a
// mailbox folder of root's (box) to give to a uid with no passwd entry,
// beside a folder (outside) whose files nothing may give away.
type tree struct {
	t                   *testing.T
	uid                 uint32
	base, box, outside  string
	inbox, mail, secret string // box/inbox, box/inbox/m.eml, outside/secret
}

// newTree makes the tree, skipping t unless it runs as root, and makes
// sure no test leaves looked set.
func newTree(t *testing.T) *tree {
	t.Helper()
	testusers.RequireRoot(t)
	base := t.TempDir()
	g := &tree{t: t, uid: testusers.UnusedUID(t), base: base, box: filepath.Join(base, "box"), outside: filepath.Join(base, "outside")}
	g.inbox, g.mail, g.secret = filepath.Join(g.box, "inbox"), filepath.Join(g.box, "inbox", "m.eml"), filepath.Join(g.outside, "secret")
	for _, d := range []string{g.inbox, g.outside} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	g.write(g.mail, g.secret)
	t.Cleanup(func() { looked = nil })
	return g
}

// write makes files of root's, of one link each.
func (g *tree) write(files ...string) {
	g.t.Helper()
	for _, p := range files {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			g.t.Fatal(err)
		}
	}
}

// give gives the box to the uid, failing the test on an error.
func (g *tree) give() *Result {
	g.t.Helper()
	res, err := Folder(g.box, int(g.uid), int(g.uid))
	if err != nil {
		g.t.Fatalf("Folder(%s): %v", g.box, err)
	}
	return res
}

// owner is the uid owning p, not what a link at p names.
func (g *tree) owner(p string) uint32 {
	g.t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		g.t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Uid
}

// given checks that the paths belong to the uid, and kept that the paths
// are still root's.
func (g *tree) check(given, kept []string) {
	g.t.Helper()
	for _, p := range given {
		if got := g.owner(p); got != g.uid {
			g.t.Errorf("%s belongs to uid %d, want %d", strings.TrimPrefix(p, g.base), got, g.uid)
		}
	}
	for _, p := range kept {
		if got := g.owner(p); got != 0 {
			g.t.Errorf("%s, not the mailbox's own, was given to uid %d", strings.TrimPrefix(p, g.base), got)
		}
	}
}

// leftNames checks that res left exactly n entries and names each of want.
func leftNames(t *testing.T, res *Result, n int, want ...string) {
	t.Helper()
	if res.LeftCount != n {
		t.Errorf("left %d entries, want %d: %+v", res.LeftCount, n, res.Left)
	}
	for _, w := range want {
		found := false
		for _, l := range res.Left {
			found = found || l.Path == w
		}
		if !found {
			t.Errorf("%s is not named among what was left: %+v", w, res.Left)
		}
	}
}

// TestFolderGivesOnlyTheMailboxsOwnFiles: the folder, its folders and its
// files of one link are given; a hard link to a file outside, a symbolic
// link (and what it names), a FIFO (without waiting on it), a socket and a
// device node are left as they are, and named.
func TestFolderGivesOnlyTheMailboxsOwnFiles(t *testing.T) {
	g := newTree(t)
	target := filepath.Join(g.outside, "target")
	g.write(target)
	hard, soft := filepath.Join(g.inbox, "hard.eml"), filepath.Join(g.inbox, "soft.eml")
	if err := os.Link(g.secret, hard); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, soft); err != nil {
		t.Fatal(err)
	}
	fifo, dev := filepath.Join(g.inbox, "fifo"), filepath.Join(g.box, "null")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(dev, syscall.S_IFCHR|0o600, 1<<8|3); err != nil {
		t.Fatal(err)
	}
	t.Chdir(g.box) // a socket's path must be short
	ln, err := net.Listen("unix", "sock")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	res := g.give()
	g.check([]string{g.box, g.inbox, g.mail}, []string{g.secret, hard, soft, target, fifo, dev, filepath.Join(g.box, "sock"), g.outside, g.base})
	if res.Given != 3 {
		t.Errorf("gave %d, want 3 (the box, its inbox, the mail)", res.Given)
	}
	leftNames(t, res, 5, hard, soft, fifo, dev, filepath.Join(g.box, "sock"))
}

// TestFolderGivesNoFileSwappedForAHardLink: the folder's present owner
// swaps a mail file, after the walk has looked at it and before it is
// given, for a hard link to a file of root's outside the mailbox (where
// fs.protected_hardlinks is 0, anyone may make one). `find … -links 1
// -execdir chown -h` gave root's file away then: chown took the name
// again. The walk gives the file it looked at, through the descriptor it
// looked with: root's file stays root's, and the mail the owner moved
// aside is the new owner's.
func TestFolderGivesNoFileSwappedForAHardLink(t *testing.T) {
	g := newTree(t)
	aside := g.mail + ".aside"
	swapped := false
	looked = func(p string) {
		if p != g.mail || swapped {
			return
		}
		swapped = true
		if err := os.Rename(g.mail, aside); err != nil {
			t.Error(err)
		}
		if err := os.Link(g.secret, g.mail); err != nil {
			t.Error(err)
		}
	}
	g.give()
	if !swapped {
		t.Fatal("the walk never looked at the mail file")
	}
	g.check([]string{g.box, g.inbox, aside}, []string{g.secret, g.mail})
}

// TestFolderGivesNoFileOfAnotherOwner: the folder's present owner links
// into it a file of root's, whose name outside root then removes (as a
// rename over it does): the file has one link, but is root's, not that
// owner's, and is left as it is; the owner's own mail is given.
func TestFolderGivesNoFileOfAnotherOwner(t *testing.T) {
	g := newTree(t)
	present := g.uid + 1
	for _, p := range []string{g.box, g.inbox, g.mail} {
		if err := os.Lchown(p, int(present), int(present)); err != nil {
			t.Fatal(err)
		}
	}
	linked := filepath.Join(g.inbox, "linked.eml")
	if err := os.Link(g.secret, linked); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(g.secret); err != nil {
		t.Fatal(err)
	}
	res := g.give()
	g.check([]string{g.box, g.inbox, g.mail}, []string{linked})
	leftNames(t, res, 1, linked)
}

// TestFolderGivesNoFolderOfAnotherOwner: given a folder that holds
// another user's folder (another mailbox's, where the mailboxes folder
// itself was named for one mailbox by a slip), the walk gives neither it
// nor what it holds: a mailbox's folders are its owner's. A folder of
// root's in it (the daemon made it and had not given it yet) is given.
func TestFolderGivesNoFolderOfAnotherOwner(t *testing.T) {
	g := newTree(t)
	present, other := g.uid+1, g.uid+2
	theirs, roots := filepath.Join(g.box, "theirs"), filepath.Join(g.box, "sent")
	theirMail := filepath.Join(theirs, "m.eml")
	for _, d := range []string{theirs, roots} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	g.write(theirMail)
	for p, uid := range map[string]uint32{g.box: present, g.inbox: present, g.mail: present, theirs: other, theirMail: other} {
		if err := os.Lchown(p, int(uid), int(uid)); err != nil {
			t.Fatal(err)
		}
	}
	res := g.give()
	g.check([]string{g.box, g.inbox, g.mail, roots}, nil)
	for _, p := range []string{theirs, theirMail} {
		if got := g.owner(p); got != other {
			t.Errorf("%s, another owner's, was given to uid %d", strings.TrimPrefix(p, g.base), got)
		}
	}
	leftNames(t, res, 1, theirs)
}

// TestFolderFollowsNoFolderSwappedIn: the present owner swaps a folder of
// the mailbox, once the walk has looked at it, for a symbolic link to a
// folder outside, or for another folder. The walk enters neither: it opens
// the folder again without following a link and goes on only when that is
// the folder it looked at.
func TestFolderFollowsNoFolderSwappedIn(t *testing.T) {
	for _, tc := range []struct {
		name string
		swap func(g *tree) error
	}{
		{"symbolic link", func(g *tree) error { return os.Symlink(g.outside, g.inbox) }},
		{"other folder", func(g *tree) error { return os.Rename(g.outside, g.inbox) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newTree(t)
			swapped := false
			looked = func(p string) {
				if p != g.inbox || swapped {
					return
				}
				swapped = true
				if err := os.Rename(g.inbox, g.inbox+".old"); err != nil {
					t.Error(err)
				}
				if err := tc.swap(g); err != nil {
					t.Error(err)
				}
			}
			res := g.give()
			if !swapped {
				t.Fatal("the walk never looked at the inbox")
			}
			secret := g.secret
			if tc.name == "other folder" {
				secret = filepath.Join(g.inbox, "secret")
			}
			g.check([]string{g.box}, []string{g.inbox, secret})
			leftNames(t, res, 1, g.inbox)
		})
	}
}

// TestFolderRefusesASymbolicLink: the folder given may not itself be a
// symbolic link (what it names is not the mailbox's path), nor a file.
func TestFolderRefusesASymbolicLink(t *testing.T) {
	g := newTree(t)
	link := filepath.Join(g.base, "link")
	if err := os.Symlink(g.box, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{link, g.mail} {
		if _, err := Folder(p, int(g.uid), int(g.uid)); err == nil {
			t.Errorf("Folder(%s) gave it", p)
		}
	}
	g.check(nil, []string{g.box, g.inbox, g.mail})
}

// TestFolderEntersNoMount: a file system mounted in the mailbox (a bind
// mount of a folder of root's, a tmpfs, a FUSE file system whose daemon
// never answers) is left as it is: its root and what it holds are not
// given, and the walk neither enters it nor waits on it.
func TestFolderEntersNoMount(t *testing.T) {
	if !testmount.InNamespace(t) {
		return
	}
	g := newTree(t)
	bind, tmp, fuse := filepath.Join(g.inbox, "bind"), filepath.Join(g.box, "tmp"), filepath.Join(g.box, "fuse")
	for _, d := range []string{bind, tmp, fuse} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	testmount.Bind(t, g.outside, bind)
	testmount.Tmpfs(t, tmp)
	inTmp := filepath.Join(tmp, "m.eml")
	g.write(inTmp)
	testmount.DeadFUSE(t, fuse, false)
	res := g.give()
	g.check([]string{g.box, g.inbox, g.mail}, []string{bind, g.secret, tmp, inTmp})
	leftNames(t, res, 3, bind, tmp, fuse)
}

// TestFolderLeavesWhatLiesPastMaxDepth: folders deeper than MaxDepth are
// left as they are and named; those above are given.
func TestFolderLeavesWhatLiesPastMaxDepth(t *testing.T) {
	g := newTree(t)
	deep := g.box
	var given []string
	for i := range MaxDepth {
		deep = filepath.Join(deep, fmt.Sprint(i))
		given = append(given, deep)
	}
	below := filepath.Join(deep, "below")
	if err := os.MkdirAll(below, 0o700); err != nil {
		t.Fatal(err)
	}
	res := g.give()
	g.check(given, []string{below})
	leftNames(t, res, 1, below)
}

// TestFolderOfNoFolderFails: a folder that is not there is an error that
// names it.
func TestFolderOfNoFolderFails(t *testing.T) {
	g := newTree(t)
	_, err := Folder(filepath.Join(g.base, "missing"), int(g.uid), int(g.uid))
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Folder of a missing folder: %v", err)
	}
}
