package safeio

import (
	"net"
	"os"
	"runtime"
	"syscall"
)

// ListenSocket binds a Unix socket at path whose file has mode from the
// moment it exists. The mode is not set by a chmod of the path after the
// bind: in a directory another user may write, that user could swap the
// socket for a symbolic link in between, and the chmod (root's, in the
// daemon) would change the file the link names. Instead the bind runs on
// a thread of its own, whose umask (which the kernel applies to the
// socket's file) is made to leave exactly mode; the process's umask is
// never changed, and the thread ends with the bind.
func ListenSocket(path string, mode os.FileMode) (*net.UnixListener, error) {
	type result struct {
		ln  *net.UnixListener
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the goroutine's end ends the thread, and with it
		// the file system attributes it no longer shares.
		runtime.LockOSThread()
		own := syscall.Unshare(syscall.CLONE_FS) == nil
		if own {
			syscall.Umask(int(0o777 &^ mode.Perm()))
		}
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err == nil && !own {
			// A system call filter refused unshare: set the mode the only
			// way left, as every server does.
			if err = os.Chmod(path, mode); err != nil {
				ln.Close()
				ln = nil
			}
		}
		done <- result{ln, err}
	}()
	r := <-done
	return r.ln, r.err
}
