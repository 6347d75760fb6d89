package hooks

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mailctl/mailctl/protocol"
)

// TestOneOwnerCannotTakeEveryHookSlot: a user can make hooks that run for
// long and fire them at will (after_send hooks that sleep, fired by its
// own sends). Its runs hold at most all slots but one and half the places
// to wait; the rest are dropped at once, and another owner's hook still
// runs while they wait.
func TestOneOwnerCannotTakeEveryHookSlot(t *testing.T) {
	if !isRoot() {
		t.Skip("needs root: the hooks of two owners run as two throwaway users")
	}
	hog, other := newTestUser(t), newTestUser(t)
	r := testRunner(t)
	r.MaxConcurrent, r.MaxQueued = 2, 4
	ready := filepath.Join(hog.Dir, "ready")
	if err := unix.Mkfifo(ready, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ready, int(hog.UID), int(hog.GID)); err != nil {
		t.Fatal(err)
	}
	// Read and write: neither this open nor the hooks' opens block.
	fifo, err := os.OpenFile(ready, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop, cancel := context.WithCancel(context.Background())
		cancel() // stop the hog's runs now
		r.Shutdown(stop)
		fifo.Close()
	})

	// The hog's hooks say they started, then run until the runner stops.
	hogHook := recvHook("hog", "/bin/sh", "-c", `echo started > "$1"; exec sleep 600`, "sh", ready)
	running, waiting := OwnerShare(r.MaxConcurrent, r.MaxQueued)
	const extra = 3
	for range running + waiting + extra {
		r.Go(hogHook, hog.Owner, recvFacts, nil)
	}
	for range running {
		if _, err := io.ReadFull(fifo, make([]byte, len("started\n"))); err != nil {
			t.Fatal(err)
		}
	}
	share := fmt.Sprintf("dropped: %d hook runs of uid %d already running or waiting", running+waiting, hog.UID)
	dropped := r.Log.List(func(run protocol.HookRun) bool { return strings.Contains(run.Error, share) }, 0)
	if len(dropped) != extra {
		t.Errorf("%d of the hog's runs were dropped for its share, want %d: %+v", len(dropped), extra, r.Log.List(nil, 0))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if run := r.Run(ctx, recvHook("other", "/bin/true"), other.Owner, recvFacts, nil); run.Error != "" || run.ExitCode != 0 {
		t.Fatalf("another owner's hook, while one owner's hooks run and wait: %+v, want it run", run)
	}
	r.Go(recvHook("other-go", "/bin/true"), other.Owner, recvFacts, nil)
	if run := r.Log.Last("other-go"); run != nil && run.Error != "" {
		t.Fatalf("another owner's run started with Go: %+v, want it taken", run)
	}
}
