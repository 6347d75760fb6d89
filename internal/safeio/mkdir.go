package safeio

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// MkdirAll creates dir and each missing folder above it with exactly mode,
// whatever the process's umask, and leaves the folders that exist as they
// are. The mode is not set by a chmod of a path after the mkdir: in a
// folder another user may write, that user could put a link in the new
// folder's place in between, and the chmod (root's, in the daemon) would
// change the folder the link names. Each folder is made, opened without
// following a link, and given its mode through that descriptor, relative
// to the one above it, so nothing is looked up by path again once made;
// one that is no longer a folder of this process's user when opened
// (TestMkdirAllChangesNoFolderSwappedIn) is an error, and nothing is changed.
func MkdirAll(dir string, mode os.FileMode) error {
	dir = filepath.Clean(dir)
	// The folders to make, deepest first, below the deepest one that exists.
	var missing []string
	top := dir
	for {
		fi, err := os.Stat(top)
		if err == nil {
			if !fi.IsDir() {
				return &os.PathError{Op: "mkdir", Path: top, Err: syscall.ENOTDIR}
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		parent := filepath.Dir(top)
		if parent == top {
			return err
		}
		missing = append(missing, filepath.Base(top))
		top = parent
	}
	if len(missing) == 0 {
		return nil
	}
	fd, err := syscall.Open(top, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: top, Err: err}
	}
	path := top
	for i := len(missing) - 1; i >= 0; i-- {
		name := missing[i]
		path = filepath.Join(path, name)
		// Made closed to everyone else until its mode is set.
		err := syscall.Mkdirat(fd, name, 0o700)
		made := err == nil
		if err != nil && err != syscall.EEXIST {
			syscall.Close(fd)
			return &os.PathError{Op: "mkdir", Path: path, Err: err}
		}
		if made {
			afterMkdir(path)
		}
		next, err := syscall.Openat(fd, name, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		syscall.Close(fd)
		if err != nil {
			return &os.PathError{Op: "open", Path: path, Err: err}
		}
		fd = next
		if !made {
			// Another process made it meanwhile: its mode is its maker's.
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			syscall.Close(fd)
			return &os.PathError{Op: "stat", Path: path, Err: err}
		}
		if st.Uid != uint32(os.Geteuid()) {
			syscall.Close(fd)
			return &os.PathError{Op: "chmod", Path: path, Err: errDirSwapped}
		}
		if err := syscall.Fchmod(fd, uint32(mode.Perm())); err != nil {
			syscall.Close(fd)
			return &os.PathError{Op: "chmod", Path: path, Err: err}
		}
	}
	return syscall.Close(fd)
}

// afterMkdir is told of each folder MkdirAll made, before it is opened (a
// variable so that a test can swap the folder in between).
var afterMkdir = func(path string) {}

// errDirSwapped refuses to set the mode of a folder just made once another
// user's is in its place.
var errDirSwapped = errors.New("no longer the folder just made (another user may have put theirs in its place): not changing its mode")

// ChmodDir gives the folder dir mode through a descriptor opened without
// following a link: a link put in its place is refused, never followed.
func ChmodDir(dir string, mode os.FileMode) error {
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer syscall.Close(fd)
	if err := syscall.Fchmod(fd, uint32(mode.Perm())); err != nil {
		return &os.PathError{Op: "chmod", Path: dir, Err: err}
	}
	return nil
}
