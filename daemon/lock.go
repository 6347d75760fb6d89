package daemon

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// acquireLock takes the daemon's lock, a file beside the control socket,
// for as long as the process lives or until the file is closed. Everything
// that loads or sweeps state (the store, the registry, the queue, the hook
// run log) happens while it is held, so a second daemon started by mistake
// stops before touching anything.
func acquireLock(socket string) (*os.File, error) {
	if err := mkdirReachable(filepath.Dir(socket)); err != nil {
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

// mkdirReachable creates dir and its missing parents 0755 whatever the
// umask: every user must reach the 0666 socket in it, and without systemd's
// RuntimeDirectory the daemon may be started from a shell with umask 077.
// Directories that exist keep their modes (dev's folder is its user's).
func mkdirReachable(dir string) error {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || d == filepath.Dir(d) {
			break
		}
		missing = append(missing, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, d := range missing {
		if err := os.Chmod(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}
