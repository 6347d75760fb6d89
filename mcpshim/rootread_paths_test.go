package mcpshim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/internal/testwait"
	"golang.org/x/sys/unix"
)

// TestRootReadsNoFileByAnotherWay: the ways a path can name root's file
// other than a link in the user's folder are refused too: root's own open
// descriptor through /proc/self/fd or /dev/fd, another process's root or
// working directory through /proc, a relative path climbing out through a
// link, a hard link in a folder whose group may write; a FIFO in the file's
// place is refused without blocking, a file of root's in the user's folder
// is refused though its first name is gone (one link left), and neither an empty path nor "." is
// read. The user's file named relatively, with "./" or a ".." that stays in
// the user's folders, is read.
func TestRootReadsNoFileByAnotherWay(t *testing.T) {
	u := newUserTree(t)
	// A folder of root's that the user's group may write.
	group := filepath.Join(u.home, "group")
	if err := os.Mkdir(group, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(group, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(group, 0, u.uid); err != nil {
		t.Fatal(err)
	}
	u.symlink(u.base, filepath.Join(u.home, "up"))
	u.link(u.secret, filepath.Join(group, "linked.txt"))
	// A link to a file of root's whose first name is gone since, as
	// /etc/shadow's is at each password change: one link left.
	old := filepath.Join(u.base, "old-shadow")
	if err := os.WriteFile(old, []byte("ROOT-SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	u.link(old, filepath.Join(u.docs, "kept.txt"))
	if err := os.Remove(old); err != nil {
		t.Fatal(err)
	}
	testwait.FIFO(t, filepath.Join(u.docs, "fifo"))
	f, err := os.Open(u.secret)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	t.Chdir(u.docs)

	for path, want := range map[string]error{
		fmt.Sprintf("/proc/self/fd/%d", f.Fd()):               errRootLink,
		fmt.Sprintf("/dev/fd/%d", f.Fd()):                     errRootLink,
		fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd()):    errRootLink,
		fmt.Sprintf("/proc/%d/root%s", os.Getpid(), u.secret): errRootLink,
		fmt.Sprintf("/proc/%d/cwd/report.txt", os.Getpid()):   errRootLink,
		"../up/shadow":        errRootLink,
		"../group/linked.txt": errRootHardLink,
		"kept.txt":            errRootOthersFile,
		"fifo":                errNotRegular,
		"":                    errNotRegular,
		".":                   errNotRegular,
	} {
		got := testwait.Returns(t, "root's read of "+path, func() regularRead {
			b, _, err := ReadRegularFile(path, 1<<20)
			return regularRead{b, err}
		})
		b, err := got.b, got.err
		if !errors.Is(err, want) || len(b) != 0 {
			t.Errorf("root's read of %q: %q, %v; want it refused (%v)", path, b, err, want)
		}
	}
	for _, path := range []string{"report.txt", "./report.txt", "../docs/report.txt", u.own} {
		if b, full, err := ReadRegularFile(path, 1<<20); err != nil || !full || string(b) != ownReport {
			t.Errorf("root's read of %q: %q, %v", path, b, err)
		}
	}
}

// regularRead is what ReadRegularFile gave.
type regularRead struct {
	b   []byte
	err error
}

// TestRootReadsNoHardLinkWithoutOpenat2: before Linux 5.6 (no openat2, as
// on RHEL 8) root's read follows the links on the folder's path, but still
// refuses a link as the file itself, a hard link to root's file in the
// user's folder and one whose first name is gone; the user's own file is
// read.
func TestRootReadsNoHardLinkWithoutOpenat2(t *testing.T) {
	testusers.RequireRoot(t)
	keep := openat2
	defer func() { openat2 = keep }()
	openat2 = func(int, string, *unix.OpenHow) (int, error) { return -1, unix.ENOSYS }
	u := newUserTree(t)
	linked, soft := filepath.Join(u.docs, "linked.txt"), filepath.Join(u.docs, "soft.txt")
	u.link(u.secret, linked)
	u.symlink(u.secret, soft)
	for path, want := range map[string]error{linked: errRootHardLink, soft: errRootLink} {
		if b, _, err := ReadRegularFile(path, 1<<20); !errors.Is(err, want) || len(b) != 0 {
			t.Errorf("root's read of %s without openat2: %q, %v; want it refused (%v)", path, b, err, want)
		}
	}
	if err := os.Remove(u.secret); err != nil {
		t.Fatal(err)
	}
	if b, _, err := ReadRegularFile(linked, 1<<20); !errors.Is(err, errRootOthersFile) || len(b) != 0 {
		t.Errorf("root's read of %s, its first name gone, without openat2: %q, %v; want it refused", linked, b, err)
	}
	if b, full, err := ReadRegularFile(u.own, 1<<20); err != nil || !full || string(b) != ownReport {
		t.Errorf("root's read of the user's own file without openat2: %q, %v", b, err)
	}
}
