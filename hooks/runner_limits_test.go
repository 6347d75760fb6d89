package hooks

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mailctl/mailctl/protocol"
)

// TestGoSlotsFreedAfterRuns: a run started with Go gives its place back
// when it ends, so the bound on waiting runs is never used up by runs that
// are over. With one slot and one queue place, five runs one after the other
// all run.
func TestGoSlotsFreedAfterRuns(t *testing.T) {
	owner, _ := hookOwner(t)
	r := testRunner(t)
	r.MaxConcurrent, r.MaxQueued = 1, 1
	h := recvHook("true", "/bin/true")
	for i := range 5 {
		r.Go(h, owner, recvFacts, nil)
		r.Wait()
		runs := r.Log.List(nil, 0)
		if len(runs) != i+1 || runs[0].Error != "" || runs[0].ExitCode != 0 {
			t.Fatalf("run %d: log holds %+v, want %d runs, the last one exited 0", i+1, runs, i+1)
		}
	}
}

// TestStderrTailKeepsTheEnd: whatever the size of stderr and however the
// pipe delivers it, the tail is its last StderrTailBytes bytes; it is never
// longer and never taken from elsewhere.
func TestStderrTailKeepsTheEnd(t *testing.T) {
	for _, n := range []int{0, 1, StderrTailBytes - 1, StderrTailBytes, StderrTailBytes + 1, 3000,
		2*StderrTailBytes - 1, 2 * StderrTailBytes, 2*StderrTailBytes + 1, 10000} {
		data := make([]byte, n)
		for i := range data {
			data[i] = 'a' + byte(i%26)
		}
		want := string(data[max(0, n-StderrTailBytes):])
		for _, chunk := range []int{1, 7, 512, 4096, n + 1} {
			c := &capture{limit: DefaultOutputCap}
			w := captureWriter{c, true}
			for rest := data; len(rest) > 0; {
				k := min(chunk, len(rest))
				w.Write(rest[:k])
				rest = rest[k:]
			}
			if got := c.stderrTail(); got != want {
				t.Errorf("%d bytes in writes of %d: tail of %d bytes, want the last %d", n, chunk, len(got), len(want))
			}
		}
	}
}

// TestStderrTailSanitized: the tail may reach a terminal (mailctl hooks
// runs): C0 and C1 controls and DEL become spaces, newline and tab stay,
// printable characters just past the control ranges stay, and invalid UTF-8
// becomes U+FFFD.
func TestStderrTailSanitized(t *testing.T) {
	in := "a\x00b\x1fc\x7fd\u0080e\u009bf\u009fg\u00a0h \x20i\tj\nk~l\xffm"
	want := "a b c d e f g\u00a0h  i\tj\nk~l\uFFFDm"
	if got := sanitizeTail([]byte(in), StderrTailBytes); got != want {
		t.Errorf("sanitizeTail = %q, want %q", got, want)
	}
	// Cut to the bound from the end, at a rune boundary.
	got := sanitizeTail([]byte("x"+strings.Repeat("é", 10)), 5)
	if got != "éé" {
		t.Errorf("cut to 5 bytes: %q, want the last two whole runes", got)
	}
	if got := sanitizeTail([]byte("abcde"), 5); got != "abcde" {
		t.Errorf("exactly at the bound: %q", got)
	}
}

// TestRunStderrTailOfMidSizedOutput: a hook that writes more than the tail
// keeps but less than twice that (the tail buffer is trimmed only past
// twice) gets its last StderrTailBytes bytes, the same as a small write or
// a flood.
func TestRunStderrTailOfMidSizedOutput(t *testing.T) {
	owner, _ := hookOwner(t)
	r := testRunner(t)
	for _, n := range []int{StderrTailBytes + 1, 3000, 2*StderrTailBytes - 1} {
		run := r.Run(context.Background(), recvHook("mid", "/bin/sh", "-c", `head -c "$1" /dev/zero | tr '\0' x >&2; printf END >&2`, "sh", strconv.Itoa(n)), owner, recvFacts, nil)
		if run.ExitCode != 0 || run.Error != "" {
			t.Fatalf("%d bytes: run = %+v", n, run)
		}
		if want := strings.Repeat("x", StderrTailBytes-3) + "END"; run.StderrTail != want {
			t.Errorf("%d bytes: tail is %d bytes ending %q, want %d ending END", n, len(run.StderrTail), run.StderrTail[max(0, len(run.StderrTail)-8):], len(want))
		}
	}
}

// TestStopSignalsTheWholeGroup: on cancellation (and timeout) SIGTERM goes
// to the hook's process group, not only its first process, so a child that
// cleans up on SIGTERM gets to. Here the first process ignores SIGTERM and
// waits for its child; the child records the SIGTERM and exits, and the
// hook ends within the grace period, never needing SIGKILL.
func TestStopSignalsTheWholeGroup(t *testing.T) {
	owner, dir := hookOwner(t)
	r := testRunner(t)
	r.KillGrace = 10 * time.Second // SIGKILL would mean the child never saw SIGTERM
	ready := filepath.Join(dir, "ready")
	marker := filepath.Join(dir, "term")
	if err := unix.Mkfifo(ready, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ready, int(owner.UID), int(owner.GID)); err != nil {
		t.Fatal(err)
	}
	// Read and write: the open never blocks, and the hook's open for
	// writing neither. Close unblocks the read if the hook never writes.
	fifo, err := os.OpenFile(ready, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fifo.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The cancel must come once the runner holds the started command: one
	// that comes while the command is starting kills it with SIGKILL alone.
	running := make(chan struct{})
	r.started = func() { close(running) }
	go func() {
		io.ReadFull(fifo, make([]byte, len("ready\n")))
		<-running
		cancel() // the child's trap is in place: stop the hook
	}()
	// The first process ignores SIGTERM before it starts the child, and the
	// child, started with SIGTERM back to its default (an ignored signal
	// would be inherited and could not be trapped), says it is ready only
	// once its trap is in place.
	script := `trap "" TERM
env --default-signal=TERM sh -c 'trap "echo got-term > \"\$2\"; exit 0" TERM; echo ready > "$1"; while :; do sleep 1; done' child "$1" "$2" &
wait`
	run := r.Run(ctx, recvHook("group", "/bin/sh", "-c", script, "sh", ready, marker), owner, recvFacts, nil)
	fifo.Close()
	if b, err := os.ReadFile(marker); err != nil || string(b) != "got-term\n" {
		t.Errorf("the child did not get SIGTERM: %q, %v", b, err)
	}
	if run.Error != "canceled (context canceled): process group sent SIGTERM" || run.ExitCode != 0 {
		t.Errorf("run = %+v, want ended by SIGTERM to the group alone", run)
	}
}

// TestRunLogLines: every run gets one log line; it names the error only when
// there is one. A run log that cannot be written is a warning of its own,
// and only then.
func TestRunLogLines(t *testing.T) {
	owner, _ := hookOwner(t)
	r := testRunner(t)
	var logged strings.Builder
	r.Logger = slog.New(slog.NewTextHandler(&logged, nil))
	lines := func() []string {
		out := strings.Split(strings.TrimSpace(logged.String()), "\n")
		logged.Reset()
		return out
	}
	r.Run(context.Background(), recvHook("fine", "/bin/true"), owner, recvFacts, nil)
	if got := lines(); len(got) != 1 || !strings.Contains(got[0], "hook=fine") || !strings.Contains(got[0], "exit_code=0") || strings.Contains(got[0], "error=") {
		t.Errorf("a run that went well logged %q, want one line without an error", got)
	}
	r.Run(context.Background(), recvHook("relative", "true"), owner, recvFacts, nil)
	if got := lines(); len(got) != 1 || !strings.Contains(got[0], "hook=relative") || !strings.Contains(got[0], `error="not started: `) {
		t.Errorf("a run that did not start logged %q, want one line with the error", got)
	}
	r.Log.Close()
	r.Run(context.Background(), recvHook("unrecorded", "/bin/true"), owner, recvFacts, nil)
	if got := lines(); len(got) != 2 || !strings.Contains(got[1], `msg="hook run log"`) || !strings.Contains(got[1], "closed") {
		t.Errorf("a run the log could not record logged %q, want the run and a warning", got)
	}
}

// TestGoRechecksAfterWaitingForASlot: a run that waited for a slot asks
// Check once it has it, and a hook deleted meanwhile does not start; the
// run is recorded as dropped. The test holds the only slot itself, so the
// deletion comes before the slot is free whatever the scheduling.
func TestGoRechecksAfterWaitingForASlot(t *testing.T) {
	owner, dir := hookOwner(t)
	r := testRunner(t)
	r.MaxConcurrent = 1
	var mu sync.Mutex
	deleted := map[string]bool{}
	r.Check = func(h protocol.Hook, _ Owner, _ Facts) error {
		mu.Lock()
		defer mu.Unlock()
		if deleted[h.ID] {
			return errors.New("the hook was deleted while the run waited")
		}
		return nil
	}
	r.init()
	r.sem <- struct{}{} // every slot busy
	for _, name := range []string{"kept", "gone"} {
		h := recvHook(name, "/bin/sh", "-c", "touch "+filepath.Join(dir, name))
		h.ID = "h-" + name
		f := recvFacts
		f.ID = "msg-" + name
		r.Go(h, owner, f, nil)
	}
	mu.Lock()
	deleted["h-gone"] = true
	mu.Unlock()
	<-r.sem // the slot is free: the waiting runs take it in turn
	r.Wait()
	byID := map[string]protocol.HookRun{}
	for _, run := range r.Log.List(nil, 0) {
		byID[run.MessageID] = run
	}
	if run := byID["msg-kept"]; run.ExitCode != 0 || run.Error != "" {
		t.Errorf("the kept hook's run: %+v, want a run that exited 0", run)
	}
	if _, err := os.Stat(filepath.Join(dir, "kept")); err != nil {
		t.Errorf("the kept hook did not run: %v", err)
	}
	if run := byID["msg-gone"]; run.ExitCode != -1 || run.Error != "dropped before it started: the hook was deleted while the run waited" {
		t.Errorf("the deleted hook's run: %+v, want it dropped", run)
	}
	if _, err := os.Stat(filepath.Join(dir, "gone")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the deleted hook ran after its slot came free (stat: %v)", err)
	}
}

// TestGoBoundsTheMessagesHeld: every run started with Go holds its
// message (stdin) until it is over, so runs waiting for a slot behind
// hooks that run long held as many large messages as there are places to
// wait (68 runs of 25 MiB messages by default). The bytes held are bounded,
// one owner's to half, and a run past the bound is dropped at once; a run
// is taken whatever its size when its owner's runs hold nothing.
func TestGoBoundsTheMessagesHeld(t *testing.T) {
	r := testRunner(t)
	r.MaxConcurrent, r.MaxHeldBytes = 1, 1000
	// No run ever starts: only what Go takes or drops matters here.
	r.Check = func(protocol.Hook, Owner, Facts) error { return errors.New("not started in this test") }
	r.init()
	r.sem <- struct{}{} // every slot busy: whatever Go takes waits
	a, b, c := Owner{UID: 4000001}, Owner{UID: 4000002}, Owner{UID: 4000003}
	h := recvHook("big", "/bin/true")
	for _, step := range []struct {
		owner Owner
		id    string
		size  int
	}{
		{a, "a1", 400},  // taken: 400 held
		{a, "a2", 400},  // dropped: a would hold 800, past half of 1000
		{b, "b1", 400},  // taken: 800 held
		{c, "c1", 400},  // dropped: 1200 would be held, past 1000
		{a, "a3", 100},  // taken: a holds 500, 900 held
		{c, "c2", 2000}, // dropped: c holds nothing, but 2900 would be held
		{b, "b2", 100},  // taken: b holds 500, half; 1000 held, the bound
	} {
		f := recvFacts
		f.ID = step.id
		r.Go(h, step.owner, f, make([]byte, step.size))
	}
	dropped := map[string]string{}
	for _, run := range r.Log.List(nil, 0) {
		dropped[run.MessageID] = run.Error
	}
	for id, want := range map[string]string{
		"a2": "dropped: hook runs of uid 4000001 already hold 400 bytes of messages, and this one has 400 (at most 500 for one owner)",
		"c1": "dropped: hook runs already hold 800 bytes of messages, and this one has 400 (at most 1000)",
		"c2": "dropped: hook runs already hold 900 bytes of messages, and this one has 2000 (at most 1000)",
	} {
		if dropped[id] != want {
			t.Errorf("run %s: %q, want %q", id, dropped[id], want)
		}
	}
	if len(dropped) != 3 {
		t.Errorf("recorded before any slot came free: %v, want the three dropped runs only", dropped)
	}
	<-r.sem
	r.Wait()
	r.mu.Lock()
	held := r.held
	r.mu.Unlock()
	if held != 0 {
		t.Errorf("%d bytes still counted as held after every run is over", held)
	}
	// Alone, a message larger than the bound still runs.
	f := recvFacts
	f.ID = "alone"
	r.Go(h, c, f, make([]byte, 5000))
	r.Wait()
	if run := r.Log.Last(h.Name); run == nil || run.MessageID != "alone" || run.Error != "dropped before it started: not started in this test" {
		t.Errorf("a message larger than the bound, with nothing held: %+v, want it taken", run)
	}
}
