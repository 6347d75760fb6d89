package hooks

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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
	// The hog's hooks say they started, then run until the runner stops.
	cmd, started := blockingHook(t, r, hog.Owner, hog.Dir)
	hogHook := recvHook("hog", cmd...)
	running, waiting := OwnerShare(r.MaxConcurrent, r.MaxQueued)
	const extra = 3
	for range running + waiting + extra {
		r.Go(hogHook, hog.Owner, recvFacts, nil)
	}
	for range running {
		started()
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
