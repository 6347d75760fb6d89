package hooks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/protocol"
)

// Run is RunOutput without the output.
func (r *Runner) Run(ctx context.Context, h protocol.Hook, owner Owner, f Facts, stdin []byte) protocol.HookRun {
	run, _ := r.RunOutput(ctx, h, owner, f, stdin)
	return run
}

// Last returns a copy of the newest run of the named hook, or nil.
func (l *RunLog) Last(hook string) *protocol.HookRun {
	return newest(l.List(func(r protocol.HookRun) bool { return r.Hook == hook }, 1))
}

func randHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func isRoot() bool { return os.Geteuid() == 0 }

// testUser is a throwaway account created with useradd, removed with userdel.
type testUser struct {
	Owner
	Group   string // the name of SuppGID
	SuppGID uint32 // a supplementary group created for it
	Dir     string // its home, owned by it
}

// newTestUser creates a user with no login shell, no user group and one
// supplementary group, with a home under /tmp that it owns. Root only. The
// user, its group and its home are removed when the test ends, with whatever
// the user still runs; if the test process dies first, its reaper or the
// next run's TestMain removes them (testusers_test.go).
func newTestUser(t *testing.T) testUser {
	t.Helper()
	if !isRoot() {
		t.Skip("needs root to create a throwaway user with useradd")
	}
	name, group, homePrefix := testNames(t)
	run(t, "groupadd", group)
	t.Cleanup(func() {
		if out, err := exec.Command("groupdel", group).CombinedOutput(); err != nil {
			t.Errorf("groupdel %s: %v: %s", group, err, out)
		}
	})
	home, err := os.MkdirTemp(testHomeParent, homePrefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	run(t, "useradd", "-M", "-N", "-s", "/usr/sbin/nologin", "-d", home, "-G", group, name)
	uid64, err := strconv.ParseUint(strings.TrimSpace(run(t, "id", "-u", name)), 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	uid := uint32(uid64)
	t.Cleanup(func() {
		if !killUID(uid) { // a hook's stray child would keep userdel from working
			t.Errorf("processes of uid %d are left after SIGKILL", uid)
		}
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v: %s", name, err, out)
		}
	})
	if err := os.Chown(home, int(uid), -1); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	o, err := LookupOwner(uid)
	if err != nil {
		t.Fatalf("LookupOwner(%d): %v", uid, err)
	}
	// getent prints "name:x:gid:members".
	fields := strings.Split(strings.TrimSpace(run(t, "getent", "group", group)), ":")
	if len(fields) < 3 {
		t.Fatalf("getent group %s: %q", group, fields)
	}
	gid, err := strconv.ParseUint(fields[2], 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	return testUser{Owner: o, Group: group, SuppGID: uint32(gid), Dir: home}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
	return string(out)
}

// hookOwner returns an account hooks can run as in this test and a directory
// it can write: a throwaway user when root, else the caller itself.
func hookOwner(t *testing.T) (Owner, string) {
	t.Helper()
	if isRoot() {
		u := newTestUser(t)
		return u.Owner, u.Dir
	}
	o, err := LookupOwner(uint32(os.Getuid()))
	if err != nil {
		t.Fatalf("LookupOwner(self): %v", err)
	}
	return o, t.TempDir()
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	return s[i+2] != 'Z'
}
