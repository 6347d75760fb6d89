package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// TestDraftsEditAsRootRunsTheEditorAsTheOwner: root runs `mailctl drafts
// edit` on a mailbox of another user. The draft's path is in a folder its
// owner controls, who may swap the file for a symlink to a root file once
// the daemon has read it; the editor root starts would then edit that file
// with root's rights. It runs as the owner instead: the write through the
// swapped-in link is refused and root's file is unchanged.
func TestDraftsEditAsRootRunsTheEditorAsTheOwner(t *testing.T) {
	testusers.RequireRoot(t)
	owner := testusers.Create(t, "mcedit")
	dir := testusers.SharedDir(t) // the owner must reach its mailbox folder
	cfgPath := serveConfig(t, dir, freePort(t))
	startServe(t, cfgPath)
	env := []string{"MAILCTL_SOCKET=" + filepath.Join(dir, "mailctl.sock")}
	run := func(extra []string, args ...string) string {
		t.Helper()
		out, e, code := mailctl(t, append(env, extra...), args...)
		if code != 0 {
			t.Fatalf("mailctl %s: exit %d: %s%s", strings.Join(args, " "), code, e, out)
		}
		return out
	}
	run(nil, "mailboxes", "create", "edited", "--owner", owner.Name)
	var d protocol.Draft
	if err := json.Unmarshal([]byte(run(nil, "drafts", "create", "edited", "--to", "pat@outside.example", "--subject", "s", "--json")), &d); err != nil {
		t.Fatal(err)
	}

	rootDir := t.TempDir()
	secret := filepath.Join(rootDir, "shadow")
	if err := os.WriteFile(secret, []byte("ROOT-SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	ranAs := filepath.Join(testusers.SharedDir(t), "uid")
	os.Chmod(filepath.Dir(ranAs), 0o777)
	// The editor: it notes whom it runs as, then does what the owner can do
	// after the daemon's read (put a link to root's file in place of the
	// draft), then saves through the draft's path.
	editor := filepath.Join(testusers.SharedDir(t), "editor")
	// It also writes to root's output what the owner likes: root's stdout
	// may be a terminal though its stdin is not.
	script := fmt.Sprintf("#!/bin/sh\nid -u > %s\nln -sf %s \"$1\"\necho edited >> \"$1\"\nprintf '%s'\nprintf '%s' >&2\n",
		ranAs, secret, `\033]52;c;cm0gLXJmIH4K\007\033[2Jowner says`, `\033]0;TITLE\007owner warns`)
	if err := os.WriteFile(editor, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	out, errOut, _ := mailctl(t, append(env, "VISUAL="+editor), "drafts", "edit", "edited", d.ID)
	if why := safeOutput(out + errOut); why != "" || !strings.Contains(out, "owner says") || !strings.Contains(errOut, "owner warns") {
		t.Errorf("the owner's editor printed %s to root's output:\n%q\n%q", why, out, errOut)
	}

	if data, err := os.ReadFile(secret); err != nil || string(data) != "ROOT-SECRET" {
		t.Errorf("root's file after drafts edit: %q %v", data, err)
	}
	if uid, err := os.ReadFile(ranAs); err != nil || strings.TrimSpace(string(uid)) != fmt.Sprint(owner.UID) {
		t.Errorf("the editor ran as uid %q (%v), want the owner's %d", uid, err, owner.UID)
	}
}

// probeFacts is what the editor probe finds about the process it runs in.
type probeFacts struct {
	UID      int      `json:"uid"`
	SID      int      `json:"sid"`
	StdioDev []uint64 `json:"stdio_dev"` // the device of fds 0, 1 and 2; 0 for one that is no device
	Open     []string `json:"open"`      // what its descriptors above 2 are
	Env      []string `json:"env"`
}

// probeMarker is the line the probe pushes into the input of its terminal.
const probeMarker = "echo run-by-root-for-the-owner"

// probeDraws is what the probe writes to its terminal: what an editor
// draws, then a clipboard write, which root's next paste into a shell
// would run, a clipboard read, whose answer would give the owner what root
// copied, and a request that the terminal type its title into its input.
const (
	probeDraws   = "\x1b[2J\x1b[1;1Hdrawn by the owner\x1b[m"
	probeActs    = "\x1b]52;c;cm0gLXJmIH4K\x07\x1b]52;c;?\x07\x1b[21t"
	probeActsOut = "]52;"
)

// editorProbe is an editor as the mailbox's owner may make one behave (its
// rc files are read from the owner's home; a process of the owner's uid may
// be traced by the owner): it notes where it runs, pushes a line into the
// input of its terminal and of its session's /dev/tty (TIOCSTI, which root's
// shell reads after the editor when that terminal is root's), then edits the
// draft.
func editorProbe(out string, args []string) int {
	sid, _ := unix.Getsid(0)
	f := probeFacts{UID: os.Getuid(), SID: sid, Env: os.Environ()}
	for fd := 0; fd < 3; fd++ {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR {
			f.StdioDev = append(f.StdioDev, st.Rdev)
		} else {
			f.StdioDev = append(f.StdioDev, 0)
		}
	}
	for fd := 3; fd < 64; fd++ {
		if target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); err == nil {
			f.Open = append(f.Open, target)
		}
	}
	push := func(fd int) {
		for _, c := range []byte(probeMarker + "\n") {
			if unix.IoctlSetPointerInt(fd, unix.TIOCSTI, int(c)) != nil {
				return
			}
		}
	}
	push(0)
	os.Stdout.WriteString(probeDraws + probeActs + "\r\n")
	if tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0); err == nil {
		push(int(tty.Fd()))
		tty.Close()
	}
	data, _ := json.Marshal(f)
	if err := os.WriteFile(out, data, 0o644); err != nil {
		return 1
	}
	if len(args) > 1 && args[0] == "--wait" {
		io.Copy(io.Discard, os.Stdin) // until it is stopped
		return 1
	}
	draft, err := os.OpenFile(args[len(args)-1], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return 1
	}
	defer draft.Close()
	if _, err := draft.WriteString("\nedited by the owner\n"); err != nil {
		return 1
	}
	return 0
}

// TestDraftsEditAsRootGivesTheOwnerNothingOfRoots: root runs `mailctl
// drafts edit` in its terminal on a mailbox of another user, whose editor
// runs as that owner and does what the owner can make it do. It gets none
// of root's: not root's terminal (fds 0 to 2), not root's session (whose
// /dev/tty is root's terminal), not a descriptor root's shell left open,
// not root's environment; the line it pushes
// into its terminal's input never reaches what root's shell reads next. The
// draft is edited all the same.
func TestDraftsEditAsRootGivesTheOwnerNothingOfRoots(t *testing.T) {
	testusers.RequireRoot(t)
	owner := testusers.Create(t, "mcedtty")
	dir := testusers.SharedDir(t)
	cfgPath := serveConfig(t, dir, freePort(t))
	startServe(t, cfgPath)
	env := []string{"MAILCTL_SOCKET=" + filepath.Join(dir, "mailctl.sock")}
	for _, args := range [][]string{{"mailboxes", "create", "edited", "--owner", owner.Name}} {
		if out, e, code := mailctl(t, env, args...); code != 0 {
			t.Fatalf("mailctl %v: exit %d: %s%s", args, code, out, e)
		}
	}
	out, e, code := mailctl(t, env, "drafts", "create", "edited", "--to", "pat@outside.example", "--subject", "s", "--json")
	var d protocol.Draft
	if code != 0 || json.Unmarshal([]byte(out), &d) != nil {
		t.Fatalf("drafts create: exit %d: %s%s", code, out, e)
	}

	shared := testusers.SharedDir(t)
	os.Chmod(shared, 0o777)
	facts := filepath.Join(shared, "facts.json")
	editor := filepath.Join(shared, "editor")
	script := fmt.Sprintf("#!/bin/sh\nMAILCTL_TEST_EDITOR_PROBE=%s exec %s \"$@\"\n", facts, testusers.Executable(t))
	if err := os.WriteFile(editor, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}

	// Root's terminal: mailctl leads a session whose controlling terminal
	// it is, as in a login shell.
	tm, ts, err := openPTY()
	if err != nil {
		t.Fatal(err)
	}
	defer tm.Close()
	defer ts.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(ts.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	rootTerm := st.Rdev
	shown := make(chan struct{})
	var onRoots strings.Builder // what reaches root's terminal
	go func() { defer close(shown); io.Copy(&onRoots, tm) }()
	// A root-only file root's shell holds open (exec 3<file), which
	// mailctl inherits.
	secret := filepath.Join(t.TempDir(), "root-secret")
	if err := os.WriteFile(secret, []byte("ROOT-SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(secret)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	for _, onTerminal := range []bool{true, false} {
		os.Remove(facts)
		if !onTerminal {
			t.Log("input on no terminal, output on root's")
		}
		cmd := exec.Command(os.Args[0], "drafts", "edit", "edited", d.ID)
		cmd.Env = append(append(os.Environ(), "MAILCTL_AS_BINARY=1", "VISUAL="+editor, "MAILCTL_TEST_ROOT_SECRET=hunter2"), env...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = ts, ts, ts
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		if !onTerminal {
			// A script's: its input is no terminal, its output is.
			cmd.Stdin, cmd.SysProcAttr.Ctty = nil, 1
		}
		cmd.ExtraFiles = []*os.File{held}
		if err := cmd.Run(); err != nil {
			t.Fatalf("drafts edit (input on a terminal: %v): %v", onTerminal, err)
		}

		// What root's shell would read next: nothing.
		fds := []unix.PollFd{{Fd: int32(ts.Fd()), Events: unix.POLLIN}}
		if n, _ := unix.Poll(fds, 0); n > 0 {
			buf := make([]byte, 256)
			n, _ := unix.Read(int(ts.Fd()), buf)
			t.Errorf("root's terminal holds input the owner's editor pushed: %q", buf[:max(n, 0)])
		}
		data, err := os.ReadFile(facts)
		if err != nil {
			t.Fatalf("the editor did not run: %v", err)
		}
		var f probeFacts
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatal(err)
		}
		if f.UID != int(owner.UID) {
			t.Errorf("the editor ran as uid %d, want the owner's %d", f.UID, owner.UID)
		}
		if f.SID == cmd.Process.Pid {
			t.Errorf("the editor runs in root's session (%d), whose /dev/tty is root's terminal", f.SID)
		}
		for fd, dev := range f.StdioDev {
			if dev == rootTerm {
				t.Errorf("the editor's fd %d is root's terminal", fd)
			}
		}
		for _, target := range f.Open {
			if target == secret {
				t.Errorf("the editor holds root's descriptor of %s", secret)
			}
		}
		for _, kv := range f.Env {
			if strings.HasPrefix(kv, "MAILCTL_TEST_EDITOR_PROBE=") {
				continue // the probe's own, set by its wrapper
			}
			if strings.Contains(kv, "hunter2") || strings.HasPrefix(kv, "MAILCTL_") {
				t.Errorf("the editor got root's environment: %s", kv)
			}
		}
		var home bool
		for _, kv := range f.Env {
			home = home || kv == "HOME="+owner.Home
		}
		if !home {
			t.Errorf("the editor's environment has not the owner's HOME %s: %v", owner.Home, f.Env)
		}
		body, err := os.ReadFile(filepath.Join(dir, "state", "mailboxes", "edited", "drafts", d.ID+".md"))
		if err != nil || !strings.Contains(string(body), "edited by the owner") {
			t.Errorf("the draft after the edit: %q %v", body, err)
		}
	}
	tm.Close()
	<-shown
	if s := onRoots.String(); !strings.Contains(s, probeDraws) || strings.Contains(s, probeActsOut) || strings.Contains(s, "[21t") {
		t.Errorf("root's terminal got from the owner's editor (want what it draws, not what acts on root):\n%q", s)
	}
}

// TestDraftsEditStoppedGivesBackRootsTerminal: root's `drafts edit` is
// stopped (SIGTERM) while the owner's editor runs on the terminal relayed to
// root's, which is raw meanwhile. It stops the editor and gives root's
// terminal back in the modes it had, instead of leaving it raw.
func TestDraftsEditStoppedGivesBackRootsTerminal(t *testing.T) {
	testusers.RequireRoot(t)
	owner := testusers.Create(t, "mcedstop")
	dir := testusers.SharedDir(t)
	startServe(t, serveConfig(t, dir, freePort(t)))
	env := []string{"MAILCTL_SOCKET=" + filepath.Join(dir, "mailctl.sock")}
	if out, e, code := mailctl(t, env, "mailboxes", "create", "edited", "--owner", owner.Name); code != 0 {
		t.Fatalf("mailboxes create: exit %d: %s%s", code, out, e)
	}
	out, e, code := mailctl(t, env, "drafts", "create", "edited", "--subject", "s", "--json")
	var d protocol.Draft
	if code != 0 || json.Unmarshal([]byte(out), &d) != nil {
		t.Fatalf("drafts create: exit %d: %s%s", code, out, e)
	}
	shared := testusers.SharedDir(t)
	os.Chmod(shared, 0o777)
	facts := filepath.Join(shared, "facts.json")
	editor := filepath.Join(shared, "editor")
	script := fmt.Sprintf("#!/bin/sh\nMAILCTL_TEST_EDITOR_PROBE=%s exec %s --wait \"$@\"\n", facts, testusers.Executable(t))
	if err := os.WriteFile(editor, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	tm, ts, err := openPTY()
	if err != nil {
		t.Fatal(err)
	}
	defer tm.Close()
	defer ts.Close()
	go io.Copy(io.Discard, tm)
	canonical := func() bool {
		tio, err := unix.IoctlGetTermios(int(ts.Fd()), unix.TCGETS)
		return err == nil && tio.Lflag&unix.ICANON != 0
	}
	if !canonical() {
		t.Fatal("a new terminal is not in canonical mode")
	}
	cmd := exec.Command(os.Args[0], "drafts", "edit", "edited", d.ID)
	cmd.Env = append(append(os.Environ(), "MAILCTL_AS_BINARY=1", "VISUAL="+editor), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = ts, ts, ts
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the editor to run", func() bool { _, err := os.Stat(facts); return err == nil })
	testwait.For(t, "root's terminal to be raw while the editor runs", func() bool { return !canonical() })
	cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	testwait.Recv(t, "drafts edit to end", exited)
	if !canonical() {
		t.Error("drafts edit, stopped, left root's terminal raw")
	}
}
