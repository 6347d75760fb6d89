package safeio

import (
	"errors"
	"net"
	"os"
	"runtime"
	"strconv"
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
		own := unshareFS() == nil
		if own {
			syscall.Umask(int(0o777 &^ mode.Perm()))
		}
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err == nil && !own {
			// A system call filter refused unshare: set the mode after
			// the bind, on the socket the path held then, never on what a
			// link put in its place names.
			afterBind(path)
			if err = chmodSocket(path, mode); err != nil {
				ln.Close()
				ln = nil
			}
		}
		done <- result{ln, err}
	}()
	r := <-done
	return r.ln, r.err
}

// unshareFS gives the calling thread file system attributes of its own (a
// variable so that a test can have it refused, as a filter would).
var unshareFS = func() error { return syscall.Unshare(syscall.CLONE_FS) }

// afterBind is told of each bind whose mode is set after it (a variable so
// that a test can swap the socket in between).
var afterBind = func(path string) {}

// errSocketSwapped refuses to set the mode of what is at a socket's path
// once it is no longer the socket just bound.
var errSocketSwapped = errors.New("no longer the socket just bound (another user may have put something in its place): not changing its mode")

// oPath is O_PATH on every Linux port Go has; package syscall names it only
// on some of them.
const oPath = 0x200000

// chmodSocket sets the mode of the socket just bound at path. The path is
// opened without following a link, and its mode set through that
// descriptor, only if it is a socket of this process's user with one link:
// a link put in its place is not followed, and a hard link to another
// socket is not changed.
func chmodSocket(path string, mode os.FileMode) error {
	fd, err := syscall.Open(path, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFSOCK || st.Nlink != 1 || st.Uid != uint32(os.Geteuid()) {
		return &os.PathError{Op: "chmod", Path: path, Err: errSocketSwapped}
	}
	// fchmod does not take an O_PATH descriptor; its /proc name is the
	// file it was opened on.
	return os.Chmod("/proc/self/fd/"+strconv.Itoa(fd), mode)
}
