package daemon

import (
	"context"
	"time"
)

// The sweep of the idempotency records (outbound.Service.SweepKeys): a
// pass keySweepFirst after the start, so that a daemon restarted more
// often than hourly sweeps too, then every keySweepEvery; a pass that
// stopped at its limit is followed by the next after keySweepPause, until
// one reaches the end of the directory. Each pass reads at most
// keySweepBatch names, so a directory of a million records is gone
// through a thousand at a time beside the daemon's work, never held in
// memory at once.
const (
	keySweepFirst = time.Minute
	keySweepEvery = time.Hour
	keySweepPause = time.Second
	keySweepBatch = 1000
)

// sweepKeys runs the sweep until ctx ends.
func (o *outboundService) sweepKeys(ctx context.Context) {
	periodically(ctx, keySweepFirst, keySweepEvery, keySweepPause, func() bool {
		res, err := o.svc.SweepKeys(keySweepBatch)
		if err != nil {
			o.d.log.Error("sweeping idempotency records; the next pass goes on", "removed", res.Removed, "err", err)
		} else if res.Removed > 0 {
			o.d.log.Info("idempotency records swept", "removed", res.Removed, "examined", res.Examined)
		}
		return res.More
	})
}
