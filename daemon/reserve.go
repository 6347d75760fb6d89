package daemon

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mailctl/mailctl/protocol"
)

// The disk reserve: below storage.disk_reserve_bytes free on the store's
// filesystem the daemon answers 452 4.3.1 to new mail and refuses sends,
// while there is still room to finish what is under way (a sent copy, a
// queue record, a bounce), so the filesystem never fills under it.

// reserveCacheFor is how long one statfs answer is used: a flood of RCPTs
// asks the kernel a few times a minute, not once per recipient.
const reserveCacheFor = 5 * time.Second

// diskReserve answers whether free space is below the reserve.
type diskReserve struct {
	d *Daemon
	// statfs returns the bytes free to an unprivileged writer at path
	// (Options.Statfs in tests).
	statfs func(path string) (uint64, error)

	mu   sync.Mutex
	at   time.Time
	free uint64
	err  error
}

// statfsFree is the real statfs: blocks available to non-root writers, as
// the store's files belong to mailbox owners.
func statfsFree(path string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// Free is the free space of the store's filesystem, at most reserveCacheFor old.
func (r *diskReserve) Free() (uint64, error) {
	now := r.d.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at.IsZero() || now.Sub(r.at) >= reserveCacheFor || now.Before(r.at) {
		r.free, r.err = r.statfs(r.d.cfg().Paths.MailboxesDir())
		r.at = now
	}
	return r.free, r.err
}

// low reports whether free space is under the reserve. A statfs that fails
// is logged and lets mail through: the write itself then says what is wrong.
func (r *diskReserve) low() (bool, uint64) {
	reserve := *r.d.cfg().Storage.DiskReserveBytes
	if reserve <= 0 {
		return false, 0
	}
	free, err := r.Free()
	if err != nil {
		r.d.log.Warn("cannot read the store's free space; the disk reserve is not enforced", "err", err)
		return false, 0
	}
	return free < uint64(reserve), free
}

// checkReserve is nil above the reserve, else the SMTP answer, logged.
func (d *Daemon) checkReserve() error {
	if low, free := d.reserve.low(); low {
		d.log.Warn("disk reserve reached: refusing new mail", "free_bytes", free, "reserve_bytes", *d.cfg().Storage.DiskReserveBytes)
		return errStorage // 4.3.1, mail system full: senders retry later
	}
	return nil
}

// sendReserveError is the error a send gets below the reserve.
func (d *Daemon) sendReserveError() error {
	if low, free := d.reserve.low(); low {
		return protocol.Errorf(protocol.CodeUnavailable, "the mail store's disk is nearly full (%s free, reserve %s): nothing can be sent until the operator frees space or lowers storage.disk_reserve_bytes",
			humanBytes(free), humanBytes(uint64(*d.cfg().Storage.DiskReserveBytes)))
	}
	return nil
}

func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
