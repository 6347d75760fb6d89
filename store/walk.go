package store

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ErrMovedDuringWalk ends a Walk whose owner moved a directory it was in:
// climbing back up did not lead to the directory it came down from.
var ErrMovedDuringWalk = errors.New("a directory was moved while it was walked")

// Walk calls fn with the lstat of every entry below d, however deep the
// owner's tree goes; depth is 0 for d's own entries. It opens nothing but
// directories, each with O_DIRECTORY and O_NOFOLLOW, so a symlink, FIFO or
// device swapped in for a directory is skipped, never followed or waited
// on. It holds one descriptor at a time whatever the depth (two while it
// reads a directory), and does a constant amount of work per entry: it goes
// down with openat and back up through "..", checking that each directory
// it climbs to is the one it came down from (the owner may move a directory
// meanwhile); when it is not, the walk ends with ErrMovedDuringWalk rather
// than going on where it is. Every entry is given to fn as its directory is
// read, a batch of names at a time, so a directory of millions of files
// costs no more memory than a small one; what it keeps is the names of the
// subdirectories still to go down into, on its way down (one descriptor
// leaves no other place to resume from).
func (d *Dir) Walk(fn func(depth int, name string, st *unix.Stat_t)) error {
	type level struct {
		subdirs  []string // still to go down into
		dev, ino uint64
	}
	cur, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: d.path, Err: err}
	}
	defer func() { unix.Close(cur) }()
	// descend reads the directory cur is, giving fn each entry at depth, and
	// returns its level with the subdirectories to go down into.
	descend := func(depth int) (level, error) {
		var st unix.Stat_t
		if err := unix.Fstat(cur, &st); err != nil {
			return level{}, err
		}
		l := level{dev: st.Dev, ino: st.Ino}
		err := (&Dir{fd: cur, path: d.path}).EachName(func(name string) error {
			var st unix.Stat_t
			if err := unix.Fstatat(cur, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return nil // removed meanwhile
			}
			fn(depth, name, &st)
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				l.subdirs = append(l.subdirs, name)
			}
			return nil
		})
		return l, err
	}
	top, err := descend(0)
	if err != nil {
		return err
	}
	stack := []level{top}
	for {
		l := &stack[len(stack)-1]
		if len(l.subdirs) == 0 {
			if len(stack) == 1 {
				return nil
			}
			up, err := unix.Openat(cur, "..", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return &os.PathError{Op: "open", Path: d.path, Err: err}
			}
			unix.Close(cur)
			cur = up
			stack = stack[:len(stack)-1]
			var st unix.Stat_t
			if err := unix.Fstat(cur, &st); err != nil {
				return &os.PathError{Op: "fstat", Path: d.path, Err: err}
			}
			if p := stack[len(stack)-1]; st.Dev != p.dev || st.Ino != p.ino {
				return fmt.Errorf("walking %s: %w", d.path, ErrMovedDuringWalk)
			}
			continue
		}
		name := l.subdirs[0]
		l.subdirs = l.subdirs[1:]
		sub, err := unix.Openat(cur, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // swapped for something else, or removed, meanwhile
		}
		unix.Close(cur)
		cur = sub
		next, err := descend(len(stack))
		if err != nil {
			return &os.PathError{Op: "readdir", Path: d.path, Err: err}
		}
		stack = append(stack, next)
	}
}
