package mcpshim

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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

// openRegular opens path and refuses anything but a regular file. Run as
// root, it opens as openAsRoot does.
func openRegular(path string) (*os.File, error) {
	if os.Geteuid() == 0 {
		return checkRegular(openAsRoot(path))
	}
	return checkRegular(os.OpenFile(path, openFlags, 0))
}

// errRootLink refuses, for root, a path with a symbolic link on it.
var errRootLink = errors.New("run as root, a path with a symbolic link on it is not read (another user could point the link at a file of root's while it is read): name the file by its own path, as `realpath` prints it")

// errRootHardLink refuses, for root, a file of more than one link in a
// directory where someone other than its owner may have made the link.
var errRootHardLink = errors.New("run as root, a file with more than one link is not read from a folder someone other than the file's owner may write (another user may have linked a file of root's there): copy it somewhere of its owner's first")

// errRootOthersFile refuses, for root, a file in a user's folder that is
// not that user's.
var errRootOthersFile = errors.New("run as root, a file in a user's folder is read only if it is that user's (the user may have hard-linked there a file of root's or another's, which stays once its first name is gone): copy it somewhere of its owner's first")

// openAsRoot opens path for reading on root's behalf: a file to attach or a
// body to send that root names in another user's directory is that user's
// to swap while it is read. So no symbolic link anywhere on the path is
// followed (RESOLVE_NO_SYMLINKS), and a file with more than one link is
// refused in a directory that belongs to someone other than its owner or
// that others may write (as /tmp): a hard link a user made there to a
// file of root's, where fs.protected_hardlinks is 0. In a folder of a
// user's, only that user's files are read: such a link outlives the
// file's first name with one link left. Without openat2 (before Linux
// 5.6) only the last component is kept from being a link; the links' tests
// are made all the same (TestRootReadsNoHardLinkWithoutOpenat2).
func openAsRoot(path string) (*os.File, error) {
	dir, name := filepath.Split(filepath.Clean(path))
	if dir == "" {
		dir = "."
	}
	const dirFlags = unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC
	how := func(flags int) *unix.OpenHow {
		return &unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_NO_SYMLINKS}
	}
	dfd, err := openat2(unix.AT_FDCWD, dir, how(dirFlags))
	plain := errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM)
	if plain { // the links on the folder's path are followed
		dfd, err = unix.Open(dir, dirFlags, 0)
	}
	if err != nil {
		return nil, rootOpenErr(dir, err)
	}
	defer unix.Close(dfd)
	var fd int
	if plain {
		fd, err = unix.Openat(dfd, name, openFlags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	} else {
		fd, err = openat2(dfd, name, how(openFlags|unix.O_NOFOLLOW|unix.O_CLOEXEC))
	}
	if err != nil {
		return nil, rootOpenErr(path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	var st, dst unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if err := unix.Fstat(dfd, &dst); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "stat", Path: dir, Err: err}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1 && (st.Uid != dst.Uid || dst.Mode&0o022 != 0) {
		f.Close()
		return nil, &os.PathError{Op: "open", Path: path, Err: errRootHardLink}
	}
	// A hard link made there keeps the file once its first name is gone
	// (as /etc/shadow's is at each password change), its links then one.
	if st.Mode&unix.S_IFMT == unix.S_IFREG && dst.Uid != 0 && st.Uid != dst.Uid {
		f.Close()
		return nil, &os.PathError{Op: "open", Path: path, Err: errRootOthersFile}
	}
	return f, nil
}

// openat2 is unix.Openat2 (a variable so that a test can have it missing,
// as before Linux 5.6).
var openat2 = unix.Openat2

// rootOpenErr names a link met on the path (ELOOP) as errRootLink.
func rootOpenErr(path string, err error) error {
	if errors.Is(err, unix.ELOOP) {
		err = errRootLink
	}
	return &os.PathError{Op: "open", Path: path, Err: err}
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
