package hooks

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// blockingHook is a hook that says on a FIFO in dir that it started, then
// runs until the runner stops; started waits for one such line. It fails
// the test at once when no run of r is in flight any more (each was dropped,
// or ended without saying it started): then no hook is going to start. The
// runner is stopped, its runs killed, when the test ends.
func blockingHook(t *testing.T, r *Runner, owner Owner, dir string) (hook []string, started func()) {
	t.Helper()
	ready := filepath.Join(dir, fmt.Sprintf("ready-%p", r))
	if err := unix.Mkfifo(ready, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ready, int(owner.UID), int(owner.GID)); err != nil {
		t.Fatal(err)
	}
	// Read and write: neither this open nor the hooks' opens block; and
	// not blocking, so that a wait for a hook that never starts ends.
	fifo, err := unix.Open(ready, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop, cancel := context.WithCancel(context.Background())
		cancel() // kill the runs now
		r.Shutdown(stop)
		unix.Close(fifo)
	})
	return []string{"/bin/sh", "-c", `echo started > "$1"; exec sleep 600`, "sh", ready}, func() {
		t.Helper()
		line := make([]byte, len("started\n")) // written at once: a pipe never splits so short a write
		testwait.For(t, "a blocking hook to start", func() bool {
			n, err := unix.Read(fifo, line)
			switch {
			case err == nil && n == len(line):
				return true
			case err == nil:
				t.Fatalf("read %q from the hooks' FIFO, want a whole line", line[:n])
			case err != unix.EAGAIN:
				t.Fatalf("reading the hooks' FIFO: %v", err)
			}
			r.mu.Lock()
			idle := r.inflight == 0
			r.mu.Unlock()
			if idle {
				t.Fatalf("waiting for a blocking hook to start, but no run is in flight any more; the log holds %+v", r.Log.List(nil, 0))
			}
			return false
		})
	}
}

// TestRunnerCountsRunsInFlight: the runner counts each run started with Go
// from its start to its end, in all and for its owner, and keeps an owner's
// record only while the owner has runs. With one slot and one place to
// wait, a third run while two are in flight is dropped for the runner's
// bound; runs that end while another of the same owner still runs give
// their place back; and once every run is over no record is left.
func TestRunnerCountsRunsInFlight(t *testing.T) {
	owner, dir := hookOwner(t)

	r := testRunner(t)
	r.MaxConcurrent, r.MaxQueued = 1, 1
	cmd, started := blockingHook(t, r, owner, dir)
	r.Go(recvHook("running", cmd...), owner, recvFacts, nil)
	started()
	r.Go(recvHook("waiting", cmd...), owner, recvFacts, nil)
	r.Go(recvHook("third", "/bin/true"), owner, recvFacts, nil)
	want := fmt.Sprintf("dropped: %d hook runs already running or waiting (%d at once, %d queued)", 2, 1, 1)
	if run := r.Log.Last("third"); run == nil || run.Error != want {
		t.Errorf("a third run while two are in flight: %+v, want dropped with %q", run, want)
	}

	r = testRunner(t)
	r.MaxConcurrent, r.MaxQueued = 3, 4 // an owner's share: 2 running, 2 waiting
	cmd, started = blockingHook(t, r, owner, dir)
	r.Go(recvHook("long", cmd...), owner, recvFacts, nil)
	started()
	for i := range 6 {
		name := fmt.Sprintf("short-%d", i)
		r.Go(recvHook(name, "/bin/true"), owner, recvFacts, nil)
		testwait.For(t, name+" to end", func() bool { return r.Log.Last(name) != nil })
		if run := r.Log.Last(name); run.Error != "" || run.ExitCode != 0 {
			t.Fatalf("%s, after %d runs of its owner ended while another ran: %+v, want it run", name, i, run)
		}
	}
	stop, cancel := context.WithCancel(context.Background())
	cancel()
	r.Shutdown(stop)
	r.mu.Lock()
	left := len(r.byOwner)
	r.mu.Unlock()
	if left != 0 {
		t.Errorf("%d owners' records left after every run ended, want none", left)
	}
}

// TestARunSeenEndedHoldsNothing: a run that OnRun and Log tell of has let
// go of everything it held: its place in flight, its owner's share and
// record. They were given back after the record, so an owner's run made as
// soon as the last one was seen ended could be dropped for runs that were
// over (TestRunnerCountsRunsInFlight failed so under load).
func TestARunSeenEndedHoldsNothing(t *testing.T) {
	owner, _ := hookOwner(t)
	r := testRunner(t)
	type holds struct{ inflight, owners int }
	seen := make(chan holds, 1)
	r.OnRun = func(protocol.HookRun) {
		r.mu.Lock()
		defer r.mu.Unlock()
		seen <- holds{r.inflight, len(r.byOwner)}
	}
	r.Go(recvHook("background", "/bin/true"), owner, recvFacts, nil)
	if h := testwait.Recv(t, "the background run to be recorded", seen); h != (holds{}) {
		t.Errorf("a run started with Go, as it was recorded, still held %d places in flight and %d owners' records", h.inflight, h.owners)
	}
	r.Wait()
	r.RunOutput(context.Background(), recvHook("foreground", "/bin/true"), owner, recvFacts, nil)
	if h := testwait.Recv(t, "the run to be recorded", seen); h != (holds{}) {
		t.Errorf("a run of RunOutput, as it was recorded, still held %d places in flight and %d owners' records", h.inflight, h.owners)
	}
}
