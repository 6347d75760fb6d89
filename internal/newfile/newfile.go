// Package newfile writes a file that must appear whole under a name that
// does not exist yet (an archive a command writes), and that a process
// killed part-way must not leave half-written under any name.
package newfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/mailctl/mailctl/internal/safeio"
)

// File is a file being written that has a name only once Publish
// gives it one. Where the kernel and the file system can, the file has no
// name at all until then (O_TMPFILE), so a process killed part-way leaves
// nothing behind; elsewhere it is a temporary file beside the final name,
// under safeio.TempPrefix, removed by Close when Publish did not run.
type File struct {
	*os.File
	path string // the final name
	tmp  string // the temporary name; "" for an unnamed file
}

// Create starts the file that Publish will name path, with mode perm.
// It refuses a path that exists now (Publish checks again).
func Create(path string, perm os.FileMode) (*File, error) {
	if _, err := os.Lstat(path); err == nil {
		return nil, &fs.PathError{Op: "create", Path: path, Err: fs.ErrExist}
	}
	dir := filepath.Dir(path)
	f, err := os.OpenFile(dir, unix.O_TMPFILE|os.O_WRONLY, perm)
	if err == nil {
		return &File{File: f, path: path}, nil
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EINVAL) {
		return nil, err
	}
	// The file system has no unnamed files.
	f, err = os.CreateTemp(dir, safeio.TempPrefix+filepath.Base(path)+"-*")
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &File{File: f, path: path, tmp: f.Name()}, nil
}

// Publish syncs the file and gives it its name, which must still be free
// (an error satisfying errors.Is(err, fs.ErrExist) otherwise: nothing is
// replaced), then syncs the directory.
func (f *File) Publish() error {
	if err := f.Sync(); err != nil {
		return err
	}
	var err error
	if f.tmp != "" {
		err = os.Link(f.tmp, f.path)
	} else {
		err = f.link()
	}
	if err != nil {
		return err
	}
	return safeio.SyncDir(filepath.Dir(f.path))
}

// link names an unnamed file: through its descriptor (AT_EMPTY_PATH, which
// needs CAP_DAC_READ_SEARCH), else through /proc/self/fd.
func (f *File) link() error {
	fd := int(f.Fd())
	err := unix.Linkat(fd, "", unix.AT_FDCWD, f.path, unix.AT_EMPTY_PATH)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EPERM) {
		err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, f.path, unix.AT_SYMLINK_FOLLOW)
	}
	if err != nil {
		return &os.LinkError{Op: "link", Old: fmt.Sprintf("(unnamed file in %s)", filepath.Dir(f.path)), New: f.path, Err: err}
	}
	return nil
}

// Close closes the file; one never published leaves no name behind.
func (f *File) Close() error {
	err := f.File.Close()
	if f.tmp != "" {
		os.Remove(f.tmp)
	}
	return err
}
