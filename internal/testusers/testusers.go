// Package testusers creates throwaway Linux users for tests that need other
// uids, runs commands as them, and holds a socket as one of them
// (HoldSocket). Every helper skips the test with a reason when not running
// as root.
package testusers

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// User is a throwaway account.
type User struct {
	Name     string
	UID, GID uint32
	Home     string
}

// RequireRoot skips t unless it runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create users and switch uids (CI runs this as root)")
	}
	if _, err := exec.LookPath("useradd"); err != nil {
		t.Skip("useradd not available")
	}
}

// Create adds a user with a fresh name and a home under a temp dir, and
// removes it when the test ends.
func Create(t testing.TB, prefix string) User {
	t.Helper()
	RequireRoot(t)
	b := make([]byte, 4)
	rand.Read(b)
	name := prefix + hex.EncodeToString(b)
	if len(name) > 31 {
		name = name[:31]
	}
	home := SharedDir(t)
	out, err := exec.Command("useradd", "-M", "-U", "-d", home, "-s", "/usr/sbin/nologin", name).CombinedOutput()
	if err != nil {
		t.Fatalf("useradd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() { exec.Command("userdel", name).Run() })
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	os.Chown(home, int(uid), int(gid))
	QuietGo(t, home)
	return User{Name: name, UID: uint32(uid), GID: uint32(gid), Home: home}
}

// UnusedUID returns a uid with no passwd entry.
func UnusedUID(t testing.TB) uint32 {
	t.Helper()
	for uid := uint32(54321); uid < 60000; uid++ {
		if _, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err != nil {
			return uid
		}
	}
	t.Fatal("no free uid")
	return 0
}

// As sets cmd to run with uid and gid and no supplementary groups.
func As(cmd *exec.Cmd, uid, gid uint32) *exec.Cmd {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}
	return cmd
}

// Executable copies the running test binary to a world-readable place so that
// other users can execute it, and returns its path.
func Executable(t testing.TB) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := SharedDir(t)
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dst := dir + "/testbin"
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// SharedDir returns a new directory that every user can traverse (mode 0755,
// unlike t.TempDir's private parents), removed when the test ends.
func SharedDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mailctl-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// QuietGo turns the go command's telemetry off for whoever runs it with
// HOME=home (its mode file, as `go telemetry off` writes it), giving what
// it makes to the owner of home. Otherwise a go command run there (mailctl
// agents setup asks `go env`) starts a process that writes under
// home/.config/go after the command has returned, and a test's removal of
// home can meet a folder that is not empty.
func QuietGo(t testing.TB, home string) {
	t.Helper()
	fi, err := os.Stat(home)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	dir := home
	for _, d := range []string{".config", "go", "telemetry"} {
		dir = filepath.Join(dir, d)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
		os.Lchown(dir, int(st.Uid), int(st.Gid))
	}
	mode := filepath.Join(dir, "mode")
	if err := os.WriteFile(mode, []byte("off"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Lchown(mode, int(st.Uid), int(st.Gid))
}
