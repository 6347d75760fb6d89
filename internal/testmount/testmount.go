// Package testmount lets a test mount file systems inside the folders it
// makes, in a mount namespace of its own, as root: what an operator or an
// owner can mount inside a mailbox.
package testmount

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const envInner = "MAILCTL_TEST_MOUNT_NS"

// InNamespace runs the calling test again in a private mount namespace of
// its own (unshare(1)), where it may mount what it likes, and reports
// whether this is that run. A test calls it first and returns when it says
// false: the outer run has checked the inner one's result. It skips the
// test, saying why, where it cannot be done (not root, no unshare(1), no
// namespaces allowed).
func InNamespace(t *testing.T) bool {
	t.Helper()
	if os.Getenv(envInner) == t.Name() {
		return true
	}
	if os.Geteuid() != 0 {
		t.Skip("mounts inside a mailbox need root (a private mount namespace)")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare(1) is not installed")
	}
	if out, err := exec.Command(unshare, "-m", "--propagation", "private", "true").CombinedOutput(); err != nil {
		t.Skipf("cannot make a mount namespace here: %v: %s", err, out)
	}
	cmd := exec.Command(unshare, "-m", "--propagation", "private", os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envInner+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("in a mount namespace: %v\n%s", err, out)
	}
	return false
}

// Tmpfs mounts a small tmpfs on dir until the test ends.
func Tmpfs(t *testing.T, dir string) {
	t.Helper()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m,mode=0700"); err != nil {
		t.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
}

// Bind mounts the file or directory from on to until the test ends.
func Bind(t *testing.T, from, to string) {
	t.Helper()
	if err := unix.Mount(from, to, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount %s on %s: %v", from, to, err)
	}
	t.Cleanup(func() { unix.Unmount(to, unix.MNT_DETACH) })
}

// DeadFUSE mounts on dir (a directory, or a regular file when file) a FUSE
// file system whose daemon never answers: the test holds /dev/fuse and
// never reads it, as an owner's FUSE daemon may (where /etc/fuse.conf has
// user_allow_other). Anything that asks that file system anything waits
// until the test ends, when closing the descriptor aborts the connection
// and lets it go. It skips the test where FUSE is missing.
func DeadFUSE(t *testing.T, dir string, file bool) {
	t.Helper()
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no FUSE here: %v", err)
	}
	mode := "40000"
	if file {
		mode = "100000"
	}
	opts := fmt.Sprintf("fd=%d,rootmode=%s,user_id=0,group_id=0,allow_other", fd, mode)
	if err := unix.Mount("mailctl-test", dir, "fuse", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		unix.Close(fd)
		t.Skipf("cannot mount FUSE here: %v", err)
	}
	t.Cleanup(func() {
		unix.Close(fd) // aborts the connection: whatever waits on it returns
		unix.Unmount(dir, unix.MNT_DETACH)
	})
}
