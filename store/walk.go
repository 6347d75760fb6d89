package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// ErrMovedDuringWalk ends a Walk whose owner moved a directory it was in:
// climbing back up did not lead to the directory it came down from.
var ErrMovedDuringWalk = errors.New("a directory was moved while it was walked")

// walkBuf is the size of the buffer Walk reads directory entries into.
const walkBuf = 8 << 10

// Walk calls fn with the lstat of every entry below d, however deep the
// owner's tree goes; depth is 0 for d's own entries. It opens nothing but
// directories, each with O_DIRECTORY and O_NOFOLLOW, so a symlink, FIFO or
// device swapped in for a directory is skipped, never followed or waited
// on. It never crosses into another mount: an entry that is a mount point
// (ErrOtherMount) is not given to fn, and its file system is never asked
// anything. It holds one descriptor at a time whatever the depth, and does a
// constant amount of work per entry: it goes down with openat and back up
// through "..", checking that each directory it climbs to is the one it
// came down from (the owner may move a directory meanwhile); when it is
// not, the walk ends with ErrMovedDuringWalk rather than going on where it
// is. It keeps no names: each entry is given to fn as its directory is
// read, and for each directory on its way down it keeps only the position
// in that directory's listing to go on from when it climbs back (the
// listing's own cookie, which the kernel gives with every entry for this),
// so a directory of millions of files or subdirectories costs no more
// memory than a small one. Entries added or removed meanwhile may or may
// not be seen.
func (d *Dir) Walk(fn func(depth int, name string, st *unix.Stat_t)) error {
	type level struct {
		dev, ino uint64
		off      int64 // where this directory's listing goes on
		done     bool  // its listing is read to the end
	}
	cur, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: d.path, Err: err}
	}
	defer func() { unix.Close(cur) }()
	var st unix.Stat_t
	if err := unix.Fstat(cur, &st); err != nil {
		return &os.PathError{Op: "fstat", Path: d.path, Err: err}
	}
	stack := []level{{dev: st.Dev, ino: st.Ino}}
	buf := make([]byte, walkBuf)
	for {
		l := &stack[len(stack)-1]
		if l.done {
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
			if err := unix.Fstat(cur, &st); err != nil {
				return &os.PathError{Op: "fstat", Path: d.path, Err: err}
			}
			if p := stack[len(stack)-1]; st.Dev != p.dev || st.Ino != p.ino {
				return fmt.Errorf("walking %s: %w", d.path, ErrMovedDuringWalk)
			}
			continue
		}
		// Read on from where this directory's listing was left, up to and
		// including its next subdirectory, then go down into that one.
		if _, err := unix.Seek(cur, l.off, io.SeekStart); err != nil {
			return &os.PathError{Op: "seek", Path: d.path, Err: err}
		}
		n, err := unix.Getdents(cur, buf)
		if err != nil {
			return &os.PathError{Op: "readdir", Path: d.path, Err: err}
		}
		if n == 0 {
			l.done = true
			continue
		}
		sub := -1
		for b := buf[:n]; len(b) > 0 && sub < 0; {
			ent, rest, err := nextDirent(b)
			if err != nil {
				return &os.PathError{Op: "readdir", Path: d.path, Err: err}
			}
			b = rest
			l.off = ent.off
			if ent.name == "." || ent.name == ".." {
				continue
			}
			est, same, err := lstatOnMount(cur, ent.name, d.dev, d.mnt)
			if err != nil || !same {
				continue // removed meanwhile, or a mount point
			}
			st = est
			fn(len(stack)-1, ent.name, &st)
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				continue
			}
			sub, err = OpenOnMount(cur, ent.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, d.dev, d.mnt)
			if err != nil {
				sub = -1 // swapped for something else (a mount point too), or removed, meanwhile
			}
		}
		if sub < 0 {
			continue
		}
		if err := unix.Fstat(sub, &st); err != nil {
			unix.Close(sub)
			return &os.PathError{Op: "fstat", Path: d.path, Err: err}
		}
		unix.Close(cur)
		cur = sub
		stack = append(stack, level{dev: st.Dev, ino: st.Ino})
	}
}

// dirent is one entry of a getdents64 listing.
type dirent struct {
	name string
	off  int64 // the listing's position just after this entry
}

// nextDirent splits the first linux_dirent64 record off b: d_ino (8
// bytes), d_off (8), d_reclen (2), d_type (1), then the name, ended by a
// NUL, padded to d_reclen.
func nextDirent(b []byte) (dirent, []byte, error) {
	const nameAt = 19
	if len(b) < nameAt {
		return dirent{}, nil, errors.New("short directory entry")
	}
	reclen := int(binary.NativeEndian.Uint16(b[16:18]))
	if reclen <= nameAt || reclen > len(b) {
		return dirent{}, nil, fmt.Errorf("directory entry of %d bytes in %d", reclen, len(b))
	}
	name := b[nameAt:reclen]
	if i := bytes.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	return dirent{name: string(name), off: int64(binary.NativeEndian.Uint64(b[8:16]))}, b[reclen:], nil
}
