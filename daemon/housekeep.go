package daemon

import (
	"context"
	"time"
)

// periodically runs pass a first time after first, then every period,
// until ctx ends; a pass that reports more left to do (it stopped at its
// limit) runs again after pause instead. Its timer is the wall clock's:
// what a pass removes, it judges on the daemon's clock.
func periodically(ctx context.Context, first, period, pause time.Duration, pass func() (more bool)) {
	wait := first
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = period
		if pass() {
			wait = pause
		}
	}
}
