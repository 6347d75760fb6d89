package hooks

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestRunAsOwner proves, as a root daemon would run it, that a hook runs with
// the owner's uid, primary and supplementary groups and nothing but the
// documented environment. The output paths are part of the hook's argv, set
// by whoever created the hook, never taken from message data.
func TestRunAsOwner(t *testing.T) {
	if !isRoot() {
		t.Skip("needs root: proves the switch to another uid")
	}
	t.Setenv("MAILCTL_TEST_SENTINEL", "leaked-from-daemon")
	u := newTestUser(t)
	idFile := filepath.Join(u.Dir, "id")
	envFile := filepath.Join(u.Dir, "env")
	h := recvHook("", "/bin/sh", "-c", `id -u > "$1"; id -G >> "$1"; env > "$2"`, "sh", idFile, envFile)
	if err := Normalize(&h); err != nil {
		t.Fatal(err)
	}
	f := recvFacts
	f.From, f.Subject = "alice@example.com", "status report"
	r := testRunner(t)
	run := r.Run(context.Background(), h, u.Owner, f, []byte("body"))
	if run.ExitCode != 0 || run.Error != "" {
		t.Fatalf("run = %+v", run)
	}

	b, err := os.ReadFile(idFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		t.Fatalf("id output = %q", b)
	}
	if lines[0] != strconv.FormatUint(uint64(u.UID), 10) {
		t.Errorf("ran as uid %s, want %d", lines[0], u.UID)
	}
	var groups []uint32
	for _, g := range strings.Fields(lines[1]) {
		n, _ := strconv.ParseUint(g, 10, 32)
		groups = append(groups, uint32(n))
	}
	if groups[0] != u.GID || !slices.Contains(groups, u.SuppGID) || slices.Contains(groups, 0) {
		t.Errorf("groups = %v, want primary %d first, supplementary %d, and never root's group 0", groups, u.GID, u.SuppGID)
	}
	if fi, err := os.Stat(idFile); err != nil || fi.Sys().(*syscall.Stat_t).Uid != u.UID {
		t.Errorf("output file not created by uid %d: %v", u.UID, err)
	}

	b, err = os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(string(b)), "\n")
	// dash exports PWD itself; everything else must come from Env.
	want := append(Env(h, f, u.Owner), "PWD="+u.Dir)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("hook environment:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if strings.Contains(string(b), "MAILCTL_TEST_SENTINEL") {
		t.Error("the daemon's environment leaked into the hook")
	}
	for _, kv := range []string{"MAILCTL_FROM=alice@example.com", "MAILCTL_SUBJECT=status report", "USER=" + u.Name, "HOME=" + u.Dir, "MAILCTL_HOOK=" + h.Name} {
		if !slices.Contains(got, kv) {
			t.Errorf("hook environment lacks %s", kv)
		}
	}
}

// TestNonRootDaemon runs this package's own tests again as an ordinary user,
// the way `mailctl dev` runs hooks: as the caller's uid without switching.
func TestNonRootDaemon(t *testing.T) {
	if !isRoot() {
		t.Skip("already running as an ordinary user; the tests cover that case directly")
	}
	if testing.Short() {
		t.Skip("re-running the tests as another user is skipped in -short mode")
	}
	u := newTestUser(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(u.Dir, "hooks.test")
	copyFile(t, self, bin, 0o755)
	if err := os.Chown(bin, int(u.UID), int(u.GID)); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run", "^(TestRunEnvIsExactlyDocumented|TestRunStdinAndWorkDir|TestRunRefusesRootAndForeignUID|TestRunNonZeroExitRecorded|TestRunTimeoutKillsProcessGroup|TestRunOutputFloodCapped|TestMessageDataNeverInArgv|TestLookupOwner)$", "-test.v")
	cmd.Dir = u.Dir
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + u.Dir, "TMPDIR=" + u.Dir, "USER=" + u.Name}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tests as uid %d failed: %v\n%s", u.UID, err, out)
	}
	if strings.Contains(string(out), "--- SKIP") || !strings.Contains(string(out), "--- PASS: TestRunEnvIsExactlyDocumented") {
		t.Errorf("tests as uid %d did not all run:\n%s", u.UID, out)
	}
	t.Logf("as uid %d:\n%s", u.UID, out)
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
