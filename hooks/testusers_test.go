package hooks

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testwait"
)

// Throwaway accounts of this package's tests are named after the test
// process that made them: mctl-hooktest-<pid>-<hex> (user),
// mctl-hookgrp-<pid>-<hex> (its supplementary group) and
// /tmp/mctl-hooktest-home-<pid>-<random> (its home). The pid says whose they
// are, so leftovers of a run that was killed or timed out can be removed
// without touching those of a run still going (other checkouts may be
// testing at the same time).
const (
	testUserPrefix  = "mctl-hooktest-"
	testGroupPrefix = "mctl-hookgrp-"
	testHomePrefix  = "mctl-hooktest-home-"
	testHomeParent  = "/tmp"
)

// reapEnv, set to a pid, makes the test binary a reaper for that process.
const reapEnv = "MAILCTL_HOOKTEST_REAP"

// testNameRE matches the names above; group 1 is the pid, empty for the names
// earlier versions of these tests gave, which carried none (users and groups
// ending in 8 hex digits, homes in up to 10 decimal ones).
var testNameRE = regexp.MustCompile(`^(?:mctl-hooktest-|mctl-hookgrp-|mctl-hooktest-home-)(?:([0-9]+)-[0-9a-f]+|[0-9a-f]{8}|[0-9]{1,10})$`)

// TestMain removes, when run as root, the accounts that earlier runs of
// these tests left behind, and starts a reaper that removes this run's if it
// ends without its cleanups (killed, or the -timeout panic).
func TestMain(m *testing.M) {
	if parent := os.Getenv(reapEnv); parent != "" {
		os.Exit(reapMain(parent))
	}
	if isRoot() {
		sweepTestUsers(os.Stderr, leftOver)
		if err := startReaper(); err != nil {
			fmt.Fprintln(os.Stderr, "hooks tests: no reaper for test users:", err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

// leftOver reports whether an account created by process pid (-1: a name
// without a pid) belongs to no running process. A pid in use by anything
// keeps its accounts: should it have been reused, they go once it ends.
func leftOver(pid int) bool {
	if pid < 0 {
		// Without an owner, only when no other run of these tests is
		// going on.
		return len(otherTestProcesses()) == 0
	}
	return pid != os.Getpid() && !alive(pid)
}

// isTestProcess reports whether pid is a running test binary of this package.
func isTestProcess(pid int) bool {
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return err == nil && strings.TrimSpace(string(comm)) == "hooks.test" && alive(pid)
}

func otherTestProcesses() []int {
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err == nil && pid != os.Getpid() && isTestProcess(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// startReaper starts a copy of this binary that waits for this process to
// end, however it ends, and then removes the accounts it made. It waits on a
// pipe whose only writer is this process: the kernel closes it at exit, even
// on SIGKILL. It runs in a process group of its own so that the signal that
// ends the tests does not end it too, with no stdout or stderr so that `go
// test` does not wait for it.
func startReaper() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self)
	cmd.Env = []string{reapEnv + "=" + strconv.Itoa(os.Getpid()), "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r, w, err := os.Pipe() // close-on-exec: no hook inherits w
	if err != nil {
		return err
	}
	cmd.Stdin = r
	if err := cmd.Start(); err != nil {
		return err
	}
	r.Close()
	reaperPipe = w // held open, never written, until this process exits
	reaperPID = cmd.Process.Pid
	go cmd.Wait()
	return nil
}

var (
	reaperPipe *os.File
	reaperPID  int
)

func reapMain(parent string) int {
	pid, err := strconv.Atoi(parent)
	if err != nil {
		return 2
	}
	io.Copy(io.Discard, os.Stdin) // EOF: the parent has exited
	sweepTestUsers(io.Discard, func(p int) bool { return p == pid })
	return 0
}

// sweepTestUsers removes the test users, groups and homes whose creator
// process gone says is gone, with whatever those users still run.
func sweepTestUsers(log io.Writer, gone func(pid int) bool) {
	owner := func(name string) (int, bool) {
		m := testNameRE.FindStringSubmatch(name)
		if m == nil {
			return 0, false
		}
		if m[1] == "" {
			return -1, true
		}
		pid, err := strconv.Atoi(m[1])
		return pid, err == nil
	}
	for _, u := range dbEntries("/etc/passwd", testUserPrefix) {
		if pid, ok := owner(u[0]); ok && gone(pid) {
			if uid, err := strconv.Atoi(u[2]); err == nil && uid != 0 {
				killUID(uint32(uid))
			}
			if out, err := exec.Command("userdel", u[0]).CombinedOutput(); err != nil {
				fmt.Fprintf(log, "hooks tests: userdel %s: %v: %s\n", u[0], err, out)
			}
		}
	}
	for _, g := range dbEntries("/etc/group", testGroupPrefix) {
		if pid, ok := owner(g[0]); ok && gone(pid) {
			if out, err := exec.Command("groupdel", g[0]).CombinedOutput(); err != nil {
				fmt.Fprintf(log, "hooks tests: groupdel %s: %v: %s\n", g[0], err, out)
			}
		}
	}
	homes, _ := filepath.Glob(filepath.Join(testHomeParent, testHomePrefix+"*"))
	for _, h := range homes {
		if pid, ok := owner(filepath.Base(h)); ok && gone(pid) {
			os.RemoveAll(h)
		}
	}
}

// dbEntries returns the colon-separated fields of the lines of an account
// database (/etc/passwd, /etc/group) whose name starts with prefix.
func dbEntries(path, prefix string) [][]string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Split(sc.Text(), ":"); len(fields) >= 3 && strings.HasPrefix(fields[0], prefix) {
			out = append(out, fields)
		}
	}
	return out
}

// killUID sends SIGKILL to every process whose real uid is uid, again until
// none is left, or until testwait.Timeout has passed, and reports whether
// none is: what a throwaway user's hooks left running would keep userdel
// from removing it, and so would a killed one until its parent reaps it.
func killUID(uid uint32) bool {
	want := strconv.FormatUint(uint64(uid), 10)
	deadline := time.Now().Add(testwait.Timeout)
	for {
		left := 0
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		for _, d := range dirs {
			pid, err := strconv.Atoi(filepath.Base(d))
			if err != nil {
				continue
			}
			b, err := os.ReadFile(d + "/status")
			if err != nil {
				continue
			}
			for line := range strings.SplitSeq(string(b), "\n") {
				if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
					if f := strings.Fields(rest); len(f) > 0 && f[0] == want {
						syscall.Kill(pid, syscall.SIGKILL)
						left++
					}
					break
				}
			}
		}
		if left == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testNames returns a fresh user name, group name and home prefix for this
// process.
func testNames(t *testing.T) (user, group, home string) {
	t.Helper()
	b := make([]byte, 2)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	tag := strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b)
	return testUserPrefix + tag, testGroupPrefix + tag, testHomePrefix + strconv.Itoa(os.Getpid()) + "-"
}

// userExists reports whether the account database has name.
func userExists(name string) bool {
	for _, u := range dbEntries("/etc/passwd", name) {
		if u[0] == name {
			return true
		}
	}
	return false
}

// TestKilledRunLeavesNoUsers kills (SIGKILL: no cleanup runs) a test process
// that made a user, and checks that its reaper removes the user, its group
// and its home, and that neither its start nor its reaper touched the user
// of this run, which is still going.
func TestKilledRunLeavesNoUsers(t *testing.T) {
	mine := newTestUser(t) // skips unless root
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run", "^TestHelperMakeUserAndHang$")
	cmd.Env = append(os.Environ(), "MAILCTL_HOOKTEST_HELPER=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	var user, group, home string
	var reaper int
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if _, serr := fmt.Sscan(line, &user, &group, &home, &reaper); err != nil || serr != nil {
		t.Fatalf("helper printed %q (%v, %v)", line, err, serr)
	}
	if !userExists(user) || !alive(reaper) {
		t.Fatalf("the helper's user %s (%v) or reaper %d (%v) is missing", user, userExists(user), reaper, alive(reaper))
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the helper's reaper to finish", func() bool { return !alive(reaper) })
	if userExists(user) {
		t.Errorf("user %s is left behind", user)
	}
	if groups := dbEntries("/etc/group", group); len(groups) != 0 {
		t.Errorf("group %s is left behind", group)
	}
	if _, err := os.Stat(home); !os.IsNotExist(err) {
		t.Errorf("home %s is left behind: %v", home, err)
	}
	if !userExists(mine.Name) || len(dbEntries("/etc/group", mine.Group)) != 1 {
		t.Errorf("the user %s of this run, still going, was removed", mine.Name)
	}
	if _, err := os.Stat(mine.Dir); err != nil {
		t.Errorf("the home of this run's user was removed: %v", err)
	}
}

// TestHelperMakeUserAndHang is the process TestKilledRunLeavesNoUsers kills.
func TestHelperMakeUserAndHang(t *testing.T) {
	if os.Getenv("MAILCTL_HOOKTEST_HELPER") == "" {
		t.Skip("the process TestKilledRunLeavesNoUsers starts and kills")
	}
	u := newTestUser(t)
	fmt.Printf("%s %s %s %d\n", u.Name, u.Group, u.Dir, reaperPID)
	io.Copy(io.Discard, os.Stdin) // until killed
}
