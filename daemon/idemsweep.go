package daemon

import (
	"context"
	"time"
)

// The sweep of the idempotency records (outbound.Service.SweepKeys): a
// pass every keySweepEvery; a pass that stopped at its limit is followed
// by the next after keySweepPause, until one reaches the end of the
// directory. Each pass reads at most keySweepBatch names, so a directory
// of a million records is gone through a thousand at a time beside the
// daemon's work, never held in memory at once.
const (
	keySweepEvery = time.Hour
	keySweepPause = time.Second
	keySweepBatch = 1000
)

// sweepKeys runs the sweep until ctx ends. Its timer is the wall clock's:
// what a record's age is, the send pipeline reads on the daemon's clock.
func (o *outboundService) sweepKeys(ctx context.Context) {
	wait := keySweepEvery
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = keySweepEvery
		res, err := o.svc.SweepKeys(keySweepBatch)
		if err != nil {
			o.d.log.Error("sweeping idempotency records; the next pass goes on", "removed", res.Removed, "err", err)
		} else if res.Removed > 0 {
			o.d.log.Info("idempotency records swept", "removed", res.Removed, "examined", res.Examined)
		}
		if res.More {
			wait = keySweepPause
		}
	}
}
