package hooks

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

func testRunner(t *testing.T) *Runner {
	t.Helper()
	log, err := OpenRunLog(filepath.Join(t.TempDir(), "runs.jsonl"), 100)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	return &Runner{KillGrace: 300 * time.Millisecond, Log: log, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func recvHook(name string, cmd ...string) protocol.Hook {
	return protocol.Hook{Name: name, Mailbox: "agent", Event: protocol.EventOnReceive, Cmd: cmd, TimeoutSecs: 30}
}

var recvFacts = Facts{Event: protocol.EventOnReceive, Mailbox: "agent", ID: "20260101-x", Trusted: "true"}

// TestRunEnvIsExactlyDocumented runs /usr/bin/env directly (no shell that
// could add variables) and compares its output with Env.
func TestRunEnvIsExactlyDocumented(t *testing.T) {
	t.Setenv("MAILCTL_TEST_SENTINEL", "leaked-from-daemon")
	owner, _ := hookOwner(t)
	r := testRunner(t)
	h := recvHook("env", "/usr/bin/env")
	f := recvFacts
	f.Subject = "Hello"
	run, out := r.RunOutput(context.Background(), h, owner, f, nil)
	if run.ExitCode != 0 || run.Error != "" {
		t.Fatalf("run = %+v", run)
	}
	got := strings.Split(strings.TrimSuffix(string(out.Stdout), "\n"), "\n")
	want := Env(h, f, owner)
	if !slices.Equal(got, want) {
		t.Errorf("environment of the hook:\n%s\nwant exactly:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if bytes.Contains(out.Stdout, []byte("MAILCTL_TEST_SENTINEL")) {
		t.Error("the daemon's environment leaked into the hook")
	}
}

func TestRunStdinAndWorkDir(t *testing.T) {
	owner, dir := hookOwner(t)
	owner.Home = dir
	r := testRunner(t)
	msg := bytes.Repeat([]byte("+++\nsubject = \"x\"\n+++\nbody line\n"), 20000) // larger than a pipe buffer
	run, out := r.RunOutput(context.Background(), recvHook("cat", "/bin/sh", "-c", `pwd >&2; exec cat`), owner, recvFacts, msg)
	if run.ExitCode != 0 {
		t.Fatalf("run = %+v", run)
	}
	if !bytes.Equal(out.Stdout, msg[:min(len(msg), DefaultOutputCap)]) {
		t.Errorf("stdout is not the start of stdin (%d bytes)", len(out.Stdout))
	}
	if got := strings.TrimSpace(string(out.Stderr)); got != dir {
		t.Errorf("working directory = %q, want the owner's home %q", got, dir)
	}

	owner.Home = "/nonexistent/home"
	_, out = r.RunOutput(context.Background(), recvHook("pwd", "/bin/pwd"), owner, recvFacts, nil)
	if got := strings.TrimSpace(string(out.Stdout)); got != "/" {
		t.Errorf("working directory with a missing home = %q, want /", got)
	}
}

func TestRunRefusesRootAndForeignUID(t *testing.T) {
	r := testRunner(t)
	marker := filepath.Join(t.TempDir(), "ran")
	h := recvHook("touch", "/usr/bin/touch", marker)
	run := r.Run(context.Background(), h, Owner{UID: 0, Name: "root", Home: "/root"}, recvFacts, nil)
	if run.ExitCode != -1 || !strings.Contains(run.Error, "never run as root") {
		t.Errorf("uid 0 run = %+v, want refused", run)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the hook ran as root")
	}
	if last := r.Log.Last("touch"); last == nil || last.Error != run.Error {
		t.Errorf("refusal not recorded: %+v", last)
	}
	if !isRoot() {
		other := Owner{UID: uint32(os.Getuid()) + 1, GID: 1, Name: "other"}
		run = r.Run(context.Background(), h, other, recvFacts, nil)
		if run.ExitCode != -1 || !strings.Contains(run.Error, "not root") {
			t.Errorf("foreign uid run = %+v, want refused", run)
		}
	}
}

func TestRunInvalidHookNotStarted(t *testing.T) {
	owner, _ := hookOwner(t)
	r := testRunner(t)
	for _, h := range []protocol.Hook{
		recvHook("rel", "sh", "-c", "true"),
		recvHook("missing", "/nonexistent/program"),
		{Name: "badtimeout", Mailbox: "agent", Event: "on_receive", Cmd: []string{"/bin/true"}, TimeoutSecs: 9999},
	} {
		run := r.Run(context.Background(), h, owner, recvFacts, nil)
		if run.ExitCode != -1 || !strings.HasPrefix(run.Error, "not started: ") {
			t.Errorf("%s: run = %+v, want not started", h.Name, run)
		}
	}
}

func TestRunNonZeroExitRecorded(t *testing.T) {
	owner, _ := hookOwner(t)
	r := testRunner(t)
	run := r.Run(context.Background(), recvHook("fail", "/bin/sh", "-c", "echo 'it broke' >&2; exit 3"), owner, recvFacts, []byte("msg"))
	if run.ExitCode != 3 || run.TimedOut || run.Error != "" || run.StderrTail != "it broke\n" {
		t.Errorf("run = %+v, want exit 3 with stderr tail", run)
	}
	if run.Hook != "fail" || run.Mailbox != "agent" || run.Event != "on_receive" || run.MessageID != recvFacts.ID || run.StartedAt.IsZero() {
		t.Errorf("run identity = %+v", run)
	}
	last := r.Log.Last("fail")
	if last == nil || last.ExitCode != 3 || last.StderrTail != "it broke\n" {
		t.Errorf("log last = %+v", last)
	}

	run = r.Run(context.Background(), recvHook("sig", "/bin/sh", "-c", "kill -USR1 $$"), owner, recvFacts, nil)
	if run.ExitCode != -1 || run.Error != "killed by signal SIGUSR1" {
		t.Errorf("signaled run = %+v", run)
	}
}

// TestRunTimeoutKillsProcessGroup: the hook forks a child and both sleep;
// after the timeout neither may survive.
func TestRunTimeoutKillsProcessGroup(t *testing.T) {
	owner, dir := hookOwner(t)
	r := testRunner(t)
	for _, tc := range []struct {
		name, script, wantErr string
	}{
		{"term", `sleep 300 & echo $! > "$1"; sleep 300`, "timed out after 1s: process group sent SIGTERM"},
		{"ignores-term", `trap "" TERM; sleep 300 & echo $! > "$1"; while :; do sleep 1; done`, "then SIGKILL after 300ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pidfile := filepath.Join(dir, tc.name+".pid")
			h := recvHook("slow-"+tc.name, "/bin/sh", "-c", tc.script, "sh", pidfile)
			h.TimeoutSecs = 1
			run := r.Run(context.Background(), h, owner, recvFacts, nil)
			if !run.TimedOut || run.ExitCode != -1 || !strings.Contains(run.Error, tc.wantErr) {
				t.Errorf("run = %+v, want timed out with %q", run, tc.wantErr)
			}
			b, err := os.ReadFile(pidfile)
			if err != nil {
				t.Fatalf("the hook did not write its child's pid: %v", err)
			}
			child, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			// The child is killed before Run returns; allow its reaping by
			// init to lag.
			testwait.For(t, "the forked child to disappear", func() bool { return !alive(child) })
		})
	}
}

func TestRunLeftoverChildrenKilledAtExit(t *testing.T) {
	owner, dir := hookOwner(t)
	r := testRunner(t)
	pidfile := filepath.Join(dir, "bg.pid")
	run := r.Run(context.Background(), recvHook("bg", "/bin/sh", "-c", `sleep 300 >/dev/null 2>&1 & echo $! > "$1"`, "sh", pidfile), owner, recvFacts, nil)
	if run.ExitCode != 0 || run.Error != "" {
		t.Fatalf("run = %+v", run)
	}
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	child, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	testwait.For(t, "the background child to disappear", func() bool { return !alive(child) })
}

// TestRunKillsChildrenThatLeftTheGroup is a hook whose child moves to a
// process group of its own (setpgid, as a shell with job control does for a
// background job) before the hook exits or times out: killing the hook's
// process group alone left the child running as the owner for good.
func TestRunKillsChildrenThatLeftTheGroup(t *testing.T) {
	const perl = "/usr/bin/perl"
	if _, err := os.Stat(perl); err != nil {
		t.Skip("needs perl to call setpgrp: ", err)
	}
	owner, dir := hookOwner(t)
	r := testRunner(t)
	// The child writes its pid once it has left the group, then closes the
	// pipe the hook waits on; it keeps no output pipe open.
	const script = `pipe(R, W) or die; my $c = fork(); die unless defined $c;
if ($c == 0) { close R; open(STDOUT, ">/dev/null"); open(STDERR, ">/dev/null"); setpgrp(0, 0) or die;
  open(F, ">", $ARGV[0]) or die; print F $$; close F; close W; sleep 300; exit 0 }
close W; <R>; sleep 300 if $ARGV[1] eq "hang"; exit 0`
	for _, tc := range []struct {
		name, mode string
		timedOut   bool
	}{
		{"exits", "exit", false},
		{"times-out", "hang", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pidfile := filepath.Join(dir, tc.name+".pid")
			h := recvHook("leave-group-"+tc.name, perl, "-e", script, pidfile, tc.mode)
			h.TimeoutSecs = 1
			run := r.Run(context.Background(), h, owner, recvFacts, nil)
			if run.TimedOut != tc.timedOut {
				t.Errorf("run = %+v, want timed out %v", run, tc.timedOut)
			}
			b, err := os.ReadFile(pidfile)
			if err != nil {
				t.Fatalf("the hook's child did not write its pid: %v (run %+v)", err, run)
			}
			child, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
			testwait.For(t, "the child that left the hook's process group to disappear", func() bool { return !alive(child) })
		})
	}
}

func TestRunOutputFloodCapped(t *testing.T) {
	owner, _ := hookOwner(t)
	r := testRunner(t)
	r.OutputCap = 4096
	const flood = 100 << 20
	run, out := r.RunOutput(context.Background(), recvHook("flood", "/usr/bin/head", "-c", strconv.Itoa(flood), "/dev/zero"), owner, recvFacts, nil)
	if run.ExitCode != 0 || run.TimedOut {
		t.Fatalf("run = %+v", run)
	}
	if len(out.Stdout) != 4096 || out.Discarded != flood-4096 {
		t.Errorf("kept %d bytes and discarded %d, want 4096 and %d", len(out.Stdout), out.Discarded, flood-4096)
	}

	run, out = r.RunOutput(context.Background(), recvHook("errflood", "/bin/sh", "-c", `head -c 10000000 /dev/zero >&2; printf 'last words\033[31m\n' >&2`), owner, recvFacts, nil)
	if run.ExitCode != 0 {
		t.Fatalf("run = %+v", run)
	}
	if len(out.Stderr) != 4096 {
		t.Errorf("kept %d bytes of stderr, want 4096", len(out.Stderr))
	}
	if len(run.StderrTail) != StderrTailBytes || !strings.HasSuffix(run.StderrTail, "last words [31m\n") || strings.ContainsAny(run.StderrTail, "\x00\x1b") {
		t.Errorf("stderr tail: %d bytes, ends %q", len(run.StderrTail), run.StderrTail[max(0, len(run.StderrTail)-20):])
	}
}

func TestRunContextCancel(t *testing.T) {
	owner, _ := hookOwner(t)
	r := testRunner(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	run := r.Run(ctx, recvHook("cancel", "/bin/sleep", "300"), owner, recvFacts, nil)
	if run.TimedOut || run.ExitCode != -1 || !strings.HasPrefix(run.Error, "canceled (context deadline exceeded)") {
		t.Errorf("run = %+v, want canceled", run)
	}
}

// TestGoBoundedAndShutdown: with one slot and one queue place, a third
// asynchronous run is dropped at once, and Shutdown with an expired context
// terminates what is left: the run whose hook runs is canceled, the one
// waiting for the slot is not started. The expiry comes once a hook runs
// (it came after 300 ms whether or not one had started by then).
func TestGoBoundedAndShutdown(t *testing.T) {
	owner, dir := hookOwner(t)
	r := testRunner(t)
	r.MaxConcurrent, r.MaxQueued = 1, 1
	cmd, started := blockingHook(t, r, owner, dir)
	h := recvHook("sleeper", cmd...)
	start := time.Now()
	for i := 0; i < 3; i++ {
		f := recvFacts
		f.ID = "msg-" + strconv.Itoa(i)
		r.Go(h, owner, f, nil)
	}
	runs := r.Log.List(nil, 0)
	if len(runs) != 1 || runs[0].MessageID != "msg-2" || !strings.HasPrefix(runs[0].Error, "dropped: 2 hook runs") {
		t.Fatalf("after 3 Go calls the log holds %+v, want only the third, dropped", runs)
	}
	started()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := r.Shutdown(ctx); err != context.DeadlineExceeded {
		t.Errorf("Shutdown = %v, want deadline exceeded", err)
	}
	if time.Since(start) > 60*time.Second {
		t.Errorf("Go or Shutdown blocked")
	}
	byID := map[string]protocol.HookRun{}
	for _, run := range r.Log.List(nil, 0) {
		byID[run.MessageID] = run
	}
	if len(byID) != 3 {
		t.Fatalf("log holds %d runs, want 3: %+v", len(byID), byID)
	}
	var canceled, notStarted int
	for _, id := range []string{"msg-0", "msg-1"} {
		switch e := byID[id].Error; {
		case strings.HasPrefix(e, "canceled"):
			canceled++
		case strings.HasPrefix(e, "not started: context canceled while waiting"):
			notStarted++
		default:
			t.Errorf("%s: %+v", id, byID[id])
		}
	}
	if canceled != 1 || notStarted != 1 {
		t.Errorf("canceled %d and not started %d, want 1 and 1", canceled, notStarted)
	}
	r.Go(h, owner, recvFacts, nil)
	if last := r.Log.List(nil, 1); len(last) != 1 || last[0].Error != "dropped: hooks are shutting down" {
		t.Errorf("Go after Shutdown: %+v", last)
	}
	r.Wait()
}

// TestMessageDataNeverInArgv looks at every process's command line while a
// hook runs: the sender and subject travel in the environment and on stdin,
// never in argv.
func TestMessageDataNeverInArgv(t *testing.T) {
	owner, dir := hookOwner(t)
	r := testRunner(t)
	subject := "subject-sentinel-" + randHex(t, 8)
	sender := "sender-sentinel-" + randHex(t, 8) + "@example.com"
	ready := filepath.Join(dir, "ready-"+randHex(t, 4))
	f := recvFacts
	f.Subject, f.From, f.To = subject, sender, []string{"to-" + sender}
	msg := []byte("+++\nsubject = \"" + subject + "\"\nfrom = \"" + sender + "\"\n+++\n")
	h := recvHook("argv", "/bin/sh", "-c", `cat > /dev/null; echo "$MAILCTL_SUBJECT" > "$1"; sleep 2`, "sh", ready)
	r.Go(h, owner, f, msg)
	defer r.Wait()
	testwait.For(t, "the hook to start", func() bool {
		b, err := os.ReadFile(ready)
		return err == nil && strings.TrimSpace(string(b)) == subject
	})
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	sawHook := false
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // exited meanwhile
		}
		if bytes.Contains(b, []byte(subject)) || bytes.Contains(b, []byte(sender)) {
			t.Errorf("%s holds message data: %q", p, b)
		}
		if bytes.Contains(b, []byte(ready)) {
			sawHook = true
		}
	}
	if !sawHook {
		t.Error("the scan did not see the running hook's own argv; it proves nothing")
	}
}

// TestRunInAHomeTheOwnerCannotEnter: the change to the owner's home is made
// as the owner, after the switch of uid, and fails for a home the owner may
// not search (root's 0700 directory given as the home, a home left mode 000).
// The hook runs in "/" then, as for a missing home, instead of not at all.
func TestRunInAHomeTheOwnerCannotEnter(t *testing.T) {
	if !isRoot() {
		t.Skip("needs root: a home the hook's owner cannot enter takes another uid")
	}
	owner, _ := hookOwner(t)
	owner.Home = t.TempDir() // root's, mode 0700
	r := testRunner(t)
	run, out := r.RunOutput(context.Background(), recvHook("pwd", "/bin/pwd"), owner, recvFacts, nil)
	if run.ExitCode != 0 || run.Error != "" {
		t.Fatalf("run = %+v", run)
	}
	if got := strings.TrimSpace(string(out.Stdout)); got != "/" {
		t.Errorf("working directory with a home the owner cannot enter = %q, want /", got)
	}
	// A cmd[0] the owner may not run is still refused, not run elsewhere.
	secret := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(secret, []byte("#!/bin/sh\necho ran\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	run, out = r.RunOutput(context.Background(), recvHook("secret", secret), owner, recvFacts, nil)
	if run.Error == "" || !strings.Contains(run.Error, "permission denied") || len(out.Stdout) != 0 {
		t.Errorf("a cmd[0] the owner may not run: run = %+v, stdout %q", run, out.Stdout)
	}
}

// A run given up on before its command started counts against its owner
// until that start ends, and no longer, also while another run of the
// owner's holds the owner's record.
func TestStartGivenUpOnCountsUntilItEnds(t *testing.T) {
	r := testRunner(t)
	const uid = 4242
	r.mu.Lock()
	o := r.ownerLocked(uid) // another run of the owner's
	r.mu.Unlock()
	release := make(chan struct{})
	missing := filepath.Join(t.TempDir(), "missing")
	newCmd := func(dir string) *exec.Cmd {
		<-release
		cmd := exec.Command(missing)
		cmd.Dir = dir
		return cmd
	}
	cmd, gaveUp, err := r.start(context.Background(), newCmd, Owner{UID: uid, Home: t.TempDir()}, 20*time.Millisecond)
	if cmd != nil || gaveUp == "" || err != nil {
		t.Fatalf("start = %v, %q, %v; want it given up on", cmd, gaveUp, err)
	}
	starting := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return o.starting
	}
	if n := starting(); n != 1 {
		t.Fatalf("%d starts counted while one waits, want 1", n)
	}
	close(release)
	testwait.For(t, "the start given up on to stop counting", func() bool { return starting() == 0 })
	r.mu.Lock()
	r.releaseLocked(uid, o)
	left := r.byOwner[uid]
	r.mu.Unlock()
	if left != nil {
		t.Errorf("the owner's record outlives its runs: %+v", left)
	}
}
