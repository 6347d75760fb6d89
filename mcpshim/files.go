package mcpshim

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// errNotRegular refuses a FIFO, device, socket or directory where a file
// was expected.
var errNotRegular = errors.New("not a regular file")

// openFlags open for reading without blocking: a FIFO planted under a name
// would otherwise hang the open forever, whoever runs the shim (root too),
// and a terminal would become the controlling one.
const openFlags = os.O_RDONLY | syscall.O_NONBLOCK | syscall.O_NOCTTY

// openRegular opens path and refuses anything but a regular file.
func openRegular(path string) (*os.File, error) {
	return checkRegular(os.OpenFile(path, openFlags, 0))
}

// openRegularIn opens rel inside root (no symlink or ".." leaves it) and
// refuses anything but a regular file.
func openRegularIn(root *os.Root, rel string) (*os.File, error) {
	return checkRegular(root.OpenFile(rel, openFlags, 0))
}

func checkRegular(f *os.File, err error) (*os.File, error) {
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: %w (%s)", f.Name(), errNotRegular, st.Mode().Type())
	}
	// A file the kernel can poll is a stream dressed as a file, not data
	// at rest: /proc/kmsg (whose read blocks until the kernel logs, and
	// takes the message from the system log), a tracing pipe, a sysfs
	// attribute. A file on disk cannot be polled, so it takes no read
	// deadline; one that does is refused before a byte is read. Every file
	// of a FUSE file system can be polled (sshfs, a VM's virtiofs share),
	// data at rest or not, and asking would ask its daemon: those are read.
	var fs unix.Statfs_t
	err = errors.New("no descriptor")
	if rc, cerr := f.SyscallConn(); cerr == nil { // not Fd, which would end the deadlines
		rc.Control(func(fd uintptr) { err = unix.Fstatfs(int(fd), &fs) })
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	if fs.Type != unix.FUSE_SUPER_MAGIC && f.SetReadDeadline(time.Time{}) == nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w (a kernel file that can block)", f.Name(), errNotRegular)
	}
	return f, nil
}

// ReadRegularFile reads at most limit bytes of the regular file at path
// without blocking on a FIFO; full is false when the file holds more.
func ReadRegularFile(path string, limit int64) (data []byte, full bool, err error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	data, err = io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(data)) > limit {
		return data[:limit], false, nil
	}
	return data, true, nil
}
