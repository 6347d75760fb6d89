package safeio

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// DirBatch is how many entries EachEntry holds at once.
const DirBatch = 256

// ErrStop, returned by EachEntry's fn, ends the listing early without an
// error.
var ErrStop = errors.New("stop listing")

// OpenDir opens the directory dir to list or sync it. A FIFO or a file
// where the directory should be is refused without blocking (ENOTDIR); a
// symbolic link to a directory is followed, as a configured state path may
// be one.
func OpenDir(dir string) (*os.File, error) {
	return os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
}

// EachEntry calls fn for each entry of the directory dir, in the order the
// file system lists them (not sorted: a sorted listing would hold every
// name at once), reading DirBatch entries at a time: a directory of
// millions of files costs a batch of memory, not millions of names. The
// entries' types are those the listing gives (lstat's, never a link's
// target's). A FIFO or a file where the directory should be is refused
// without blocking (ENOTDIR). fn's error ends the listing and is returned,
// but for ErrStop, which ends it with nil.
func EachEntry(dir string, fn func(fs.DirEntry) error) error {
	f, err := OpenDir(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		ents, err := f.ReadDir(DirBatch)
		for _, e := range ents {
			if ferr := fn(e); ferr != nil {
				if ferr == ErrStop {
					return nil
				}
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
