package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testwait"
)

// TestPeriodicallyRunsAgainWhileThereIsMore: the housekeeping loop (the
// idempotency sweep, the MTA-STS prune) runs its first pass after its
// first wait, runs again after the short pause while a pass stopped at its
// limit, then waits its period; it ends with its context, mid-wait.
func TestPeriodicallyRunsAgainWhileThereIsMore(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	passes := make(chan int, 8)
	n := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Passes 1 and 2 stop at their limit, pass 3 reaches the end: the
		// next would be an hour later.
		periodically(ctx, 0, time.Hour, 0, func() bool {
			n++
			passes <- n
			return n < 3
		})
	}()
	for want := 1; want <= 3; want++ {
		if got := testwait.Recv(t, "a housekeeping pass", passes); got != want {
			t.Fatalf("pass %d, want %d", got, want)
		}
	}
	cancel()
	testwait.Recv(t, "the loop to end with its context", done)
	if len(passes) != 0 || n != 3 {
		t.Errorf("%d passes ran, want 3: a pass that reached the end waits its period", n)
	}
}
