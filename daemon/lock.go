package daemon

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/mailctl/mailctl/internal/safeio"

	"golang.org/x/sys/unix"
)

// acquireLock takes the daemon's lock, a file beside the control socket,
// for as long as the process lives or until the file is closed. Everything
// that loads or sweeps state (the store, the registry, the queue, the hook
// run log) happens while it is held, so a second daemon started by mistake
// stops before touching anything.
func acquireLock(socket string) (*os.File, error) {
	// 0755 whatever the umask: every user must reach the 0666 socket in
	// it, and without systemd's RuntimeDirectory the daemon may be started
	// from a shell with umask 077. A folder that exists keeps its mode
	// (dev's is its user's).
	if err := safeio.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return nil, fmt.Errorf("creating the socket directory: %w", err)
	}
	lock, err := os.OpenFile(socket+".lock", os.O_CREATE|os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("another mailctl daemon is running (it holds %s.lock); stop it first", socket)
	}
	return lock, nil
}
