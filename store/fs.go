package store

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mailctl/mailctl/internal/safeio"
)

// Mailbox folders are writable by their owner, who may swap any entry for a
// symlink, a FIFO or a hard link at any moment. Everything below therefore
// works relative to open directory descriptors, opens with O_NOFOLLOW, checks
// what it opened with fstat, sets ownership and modes on descriptors, and
// never opens an existing file for writing (files are replaced by rename).

// TempPrefix starts the names of files being written, the convention of
// internal/safeio that every writer shares. Loaders skip such names and
// CleanTemps removes stale ones.
const TempPrefix = safeio.TempPrefix

// StaleTempAge is how old a temporary file must be before CleanTemps removes
// it; younger ones may belong to a write in progress.
var StaleTempAge = 10 * time.Minute

// maxRemoveDepth bounds the recursion of RemoveAll, which an owner could
// otherwise drive into exhausting descriptors with a deep tree.
const maxRemoveDepth = 128

// Dir is an open directory. Every operation on it is relative to its
// descriptor, never follows a symlink in the name it is given, and never
// crosses into another mount: what lies below a directory of the store and
// is not on its file system (a disk mounted there, an owner's FUSE file
// system) is not the store's, and is refused with ErrOtherMount without
// being opened, so that no file system but the store's is ever asked
// anything (a FUSE daemon may never answer).
type Dir struct {
	fd   int
	path string // for messages only, never reopened
	// dev and mnt say which mount the directory is on (mnt 0 where the
	// kernel does not say); its entries must be on the same.
	dev, mnt uint64
}

// ErrOtherMount is the error for an entry of a directory that is on another
// file system, or another mount, than the directory: a mount point.
var ErrOtherMount = errors.New("on another file system than its folder (a mount): not the mailbox's")

// OpenDir opens the directory at path. The last component must not be a
// symlink; the components above it are trusted (they are root-owned paths
// such as /var/lib/mailctl), and it may be a mount point (the store on a
// disk of its own).
func OpenDir(path string) (*Dir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: openErr(err)}
	}
	return newDir(fd, path)
}

// newDir wraps the open directory fd, learning which mount it is on.
func newDir(fd int, path string) (*Dir, error) {
	dev, mnt, err := MountOf(fd)
	if err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	return &Dir{fd: fd, path: path, dev: dev, mnt: mnt}, nil
}

// openErr turns what open(2) says about a symlink under O_NOFOLLOW into an
// error a person understands, keeping the errno for errors.Is.
func openErr(err error) error {
	if errors.Is(err, unix.ELOOP) {
		return fmt.Errorf("refusing to follow a symlink: %w", err)
	}
	return err
}

// Path returns the path the directory was opened at, for messages.
func (d *Dir) Path() string { return d.path }

// Close releases the descriptor.
func (d *Dir) Close() error {
	if d == nil || d.fd < 0 {
		return nil
	}
	err := unix.Close(d.fd)
	d.fd = -1
	return err
}

func (d *Dir) join(name string) string { return filepath.Join(d.path, name) }

// checkName refuses anything but a single, ordinary path component.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') || strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("invalid file name %q: must be one path component", name)
	}
	return nil
}

// OpenDir opens the subdirectory name (one path component), refusing symlinks.
func (d *Dir) OpenDir(name string) (*Dir, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	fd, err := d.openat(name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: d.join(name), Err: openErr(err)}
	}
	return newDir(fd, d.join(name))
}

// Stat returns the fstat of the directory itself (zero on error).
func (d *Dir) Stat() (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(d.fd, &st); err != nil {
		return unix.Stat_t{}, &os.PathError{Op: "fstat", Path: d.path, Err: err}
	}
	return st, nil
}

// Lstat returns the fstatat of name without following a symlink. A mount
// point is refused with ErrOtherMount, its file system never asked.
func (d *Dir) Lstat(name string) (unix.Stat_t, error) {
	if err := checkName(name); err != nil {
		return unix.Stat_t{}, err
	}
	st, same, err := d.lstat(name)
	if err == nil && !same {
		err = ErrOtherMount
	}
	if err != nil {
		return unix.Stat_t{}, &os.PathError{Op: "lstat", Path: d.join(name), Err: err}
	}
	return st, nil
}

// MkdirOwned creates the subdirectory name if it is missing and opens it. The
// owner and mode are set on the opened descriptor, also when the directory
// already existed (to repair them). uid or gid -1 leaves that id unchanged.
func (d *Dir) MkdirOwned(name string, perm os.FileMode, uid, gid int) (*Dir, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	// Created with no access for anyone until fchown+fchmod below, so that
	// nobody can slip anything into it while it still belongs to root.
	if err := unix.Mkdirat(d.fd, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, &os.PathError{Op: "mkdir", Path: d.join(name), Err: err}
	}
	sub, err := d.OpenDir(name)
	if err != nil {
		return nil, err
	}
	if err := sub.setOwnerMode(perm, uid, gid); err != nil {
		sub.Close()
		return nil, err
	}
	return sub, nil
}

func (d *Dir) setOwnerMode(perm os.FileMode, uid, gid int) error {
	st, err := d.Stat()
	if err != nil {
		return err
	}
	if (uid >= 0 && int(st.Uid) != uid) || (gid >= 0 && int(st.Gid) != gid) {
		if err := unix.Fchown(d.fd, uid, gid); err != nil {
			return &os.PathError{Op: "fchown", Path: d.path, Err: err}
		}
	}
	if st.Mode&0o7777 != uint32(perm.Perm()) {
		if err := unix.Fchmod(d.fd, uint32(perm.Perm())); err != nil {
			return &os.PathError{Op: "fchmod", Path: d.path, Err: err}
		}
	}
	return nil
}

// Sync flushes the directory's entries to disk.
func (d *Dir) Sync() error {
	if err := unix.Fsync(d.fd); err != nil {
		return &os.PathError{Op: "fsync", Path: d.path, Err: err}
	}
	return nil
}

// WriteFile durably replaces name with data: it writes a new temporary file
// (O_EXCL|O_NOFOLLOW, so nothing pre-planted is ever written through), sets its
// owner and mode on the descriptor, fsyncs it, renames it over name and fsyncs
// the directory. Readers see the old or the new file, never a partial one.
// uid or gid -1 leaves that id as the process's own.
func (d *Dir) WriteFile(name string, data []byte, perm os.FileMode, uid, gid int) error {
	return d.writeFile(name, data, perm, uid, gid, syncAll)
}

// syncMode says which fsyncs a replacement pays.
type syncMode int

const (
	syncAll  syncMode = iota // the file and the directory
	syncFile                 // the file; the caller syncs the directory (shared)
	// syncNone replaces the file atomically but leaves it and its name to
	// the kernel's writeback, or to a later Store.Sync: for changes that
	// something durable elsewhere can redo after a power loss.
	syncNone
)

func (d *Dir) writeFile(name string, data []byte, perm os.FileMode, uid, gid int, mode syncMode) error {
	return d.writeFileTo(name, rawBytes(data), perm, uid, gid, mode)
}

// writeFileFrom is writeFile of data followed by what rest holds, copied
// without being held in memory, at most restMax bytes of it (more is
// ErrTooLarge, and nothing is replaced).
func (d *Dir) writeFileFrom(name string, data []byte, rest io.Reader, restMax int64, perm os.FileMode, uid, gid int, mode syncMode) error {
	return d.writeFileTo(name, headRest{head: data, rest: rest, max: restMax, path: d.join(name)}, perm, uid, gid, mode)
}

// headRest writes head, then at most max bytes of rest; more is ErrTooLarge.
type headRest struct {
	head []byte
	rest io.Reader
	max  int64
	path string
}

func (h headRest) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(h.head)
	if err != nil || h.rest == nil {
		return int64(n), err
	}
	m, err := io.Copy(w, io.LimitReader(h.rest, h.max+1))
	if err != nil {
		return int64(n) + m, err
	}
	if m > h.max {
		return int64(n) + m, &os.PathError{Op: "copy", Path: h.path, Err: ErrTooLarge}
	}
	return int64(n) + m, nil
}

// writeFileTo is writeFile with the content written by src, which a large
// message streams instead of holding.
func (d *Dir) writeFileTo(name string, src io.WriterTo, perm os.FileMode, uid, gid int, mode syncMode) error {
	if err := checkName(name); err != nil {
		return err
	}
	tmp, fd, err := d.createTemp(unix.O_WRONLY)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), d.join(tmp))
	defer f.Close()
	ok := false
	defer func() {
		if !ok {
			unix.Unlinkat(d.fd, tmp, 0)
		}
	}()
	if err := fill(f, src, perm, uid, gid, mode); err != nil {
		return err
	}
	mu := d.nameLock()
	mu.Lock()
	err = unix.Renameat(d.fd, tmp, d.fd, name)
	mu.Unlock()
	if err != nil {
		return &os.LinkError{Op: "rename", Old: d.join(tmp), New: d.join(name), Err: err}
	}
	ok = true
	if mode == syncAll {
		return d.Sync()
	}
	return nil
}

// fill writes src into the new file f, then gives it its owner and mode
// on the descriptor and, unless mode says not to, fsyncs it.
func fill(f *os.File, src io.WriterTo, perm os.FileMode, uid, gid int, mode syncMode) error {
	if _, err := src.WriteTo(f); err != nil {
		return err
	}
	if uid >= 0 || gid >= 0 {
		if err := f.Chown(uid, gid); err != nil { // fchown(2)
			return err
		}
	}
	// fchmod after fchown, which may clear set-id bits.
	if err := f.Chmod(perm.Perm()); err != nil {
		return err
	}
	if mode != syncNone {
		return f.Sync()
	}
	return nil
}

// writeNewFileTo is writeFileTo for a name that is new: the content goes
// into an unnamed file (O_TMPFILE), which is linked under name once whole.
// The directory changes once instead of three times (a temporary name
// added, then renamed), the file system allocates the inode outside the
// directory's lock, and a crash before the link leaves nothing to sweep.
// Should the name exist after all (a copy written before a crash, written
// again), it is replaced, as writeFileTo would. Where the file system or
// the lack of /proc does not allow it, it is writeFileTo.
func (d *Dir) writeNewFileTo(name string, src io.WriterTo, perm os.FileMode, uid, gid int, mode syncMode) error {
	if err := checkName(name); err != nil {
		return err
	}
	if !procFDs() {
		return d.writeFileTo(name, src, perm, uid, gid, mode)
	}
	fd, err := unix.Openat(d.fd, ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL) {
			return d.writeFileTo(name, src, perm, uid, gid, mode)
		}
		return &os.PathError{Op: "create", Path: d.join(name), Err: err}
	}
	f := os.NewFile(uintptr(fd), d.join(name))
	defer f.Close()
	if err := fill(f, src, perm, uid, gid, mode); err != nil {
		return err
	}
	self := "/proc/self/fd/" + strconv.Itoa(fd)
	mu := d.nameLock()
	mu.Lock()
	err = unix.Linkat(unix.AT_FDCWD, self, d.fd, name, unix.AT_SYMLINK_FOLLOW)
	if errors.Is(err, unix.EEXIST) {
		tmp := tempName("")
		if err = unix.Linkat(unix.AT_FDCWD, self, d.fd, tmp, unix.AT_SYMLINK_FOLLOW); err == nil {
			if err = unix.Renameat(d.fd, tmp, d.fd, name); err != nil {
				unix.Unlinkat(d.fd, tmp, 0)
			}
		}
	}
	mu.Unlock()
	if err != nil {
		return &os.LinkError{Op: "link", Old: self, New: d.join(name), Err: err}
	}
	if mode == syncAll {
		return d.Sync()
	}
	return nil
}

// procFDs reports whether /proc shows this process's descriptors, through
// which writeNewFileTo links an unnamed file.
var procFDs = sync.OnceValue(func() bool {
	var st unix.Stat_t
	return unix.Stat("/proc/self/fd", &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
})

// nameLocks serialise, per directory, the creates and renames that add a
// name to it on the delivery path. The kernel holds the directory's lock
// through each of them, and its waiters spin on a CPU while the holder
// works (on an ext4 without a journal, creating a file reads past every
// inode freed in the last minute): 32 sessions delivering into one folder
// spent more CPU spinning than writing. Waiting here parks the goroutine
// instead and leaves the CPU to the rest of the daemon. Directories share
// the locks by a hash of their path.
var nameLocks [64]sync.Mutex

var nameSeed = maphash.MakeSeed()

func (d *Dir) nameLock() *sync.Mutex {
	return &nameLocks[maphash.String(nameSeed, d.path)%uint64(len(nameLocks))]
}

// createTemp creates a new, empty, private temporary file in d, open with
// the access mode in flags.
func (d *Dir) createTemp(flags int) (string, int, error) {
	mu := d.nameLock()
	for range 10 {
		name := tempName("")
		mu.Lock()
		fd, err := unix.Openat(d.fd, name, flags|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		mu.Unlock()
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return "", -1, &os.PathError{Op: "create", Path: d.join(name), Err: err}
		}
		return name, fd, nil
	}
	return "", -1, fmt.Errorf("create temporary file in %s: too many collisions", d.path)
}

// tempName returns a new random name of the kind given, under TempPrefix.
func tempName(kind string) string {
	var rnd [8]byte
	rand.Read(rnd[:])
	return TempPrefix + kind + hex.EncodeToString(rnd[:])
}

// ErrTooLarge is returned when a file is larger than the caller allows.
var ErrTooLarge = errors.New("file too large")

// ErrNotRegular is returned when a name that should be a file is a symlink,
// directory, FIFO or anything else.
var ErrNotRegular = safeio.ErrNotRegular

// ReadFile reads name, which must be a regular file (not a symlink, FIFO or
// device) of at most max bytes; a larger one gives ErrTooLarge.
func (d *Dir) ReadFile(name string, max int64) ([]byte, error) {
	return d.readOwned(name, max, -1)
}

// readOwned is ReadFile for a file that must be owned by uid (-1: anyone).
// What the file is (regular, whose, how large) is checked on the opened
// descriptor before a byte is read.
func (d *Dir) readOwned(name string, max int64, uid int) ([]byte, error) {
	f, err := d.openOwned(name, max, uid)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return readUpTo(f, nil, st.Size(), max, d.join(name))
}

// readFileHead reads like ReadFile, but stops after the first head bytes if
// enough says they suffice (the index needs the frontmatter, not a 10 MB
// body), and reads no more than limit bytes in all: a file longer than that
// comes back cut.
func (d *Dir) readFileHead(name string, max, head, limit int64, enough func([]byte) bool) ([]byte, unix.Stat_t, error) {
	f, st, err := d.OpenRegular(name)
	if err != nil {
		return nil, st, err
	}
	defer f.Close()
	if st.Size > max {
		return nil, st, &os.PathError{Op: "read", Path: d.join(name), Err: ErrTooLarge}
	}
	var data []byte
	if head < max && st.Size > head && enough != nil {
		data = make([]byte, head)
		n, err := io.ReadFull(f, data)
		if err != nil && err != io.ErrUnexpectedEOF {
			return nil, st, err
		}
		data = data[:n]
		if enough(data) {
			return data, st, nil
		}
	}
	if st.Size > limit {
		data = slices.Grow(data, int(limit)-len(data))
		n, err := io.ReadFull(f, data[len(data):limit])
		if err != nil && err != io.ErrUnexpectedEOF {
			return nil, st, err
		}
		return data[:len(data)+n], st, nil
	}
	data, err = readUpTo(f, data, st.Size, max, d.join(name))
	return data, st, err
}

// readUpTo reads the rest of f after the bytes already read (have) and
// refuses a file of more than max bytes in all. size is what fstat said:
// the buffer is sized from it, so it rarely grows, and a file that grows
// past max meanwhile is refused after max+1 bytes.
func readUpTo(f *os.File, have []byte, size, max int64, path string) ([]byte, error) {
	buf := slices.Grow(have, int(min(size, max)+1)-len(have))
	r := io.LimitReader(f, max+1-int64(len(have)))
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if int64(len(buf)) > max {
		return nil, &os.PathError{Op: "read", Path: path, Err: ErrTooLarge}
	}
	return buf, nil
}

// OpenRegular opens name for reading, refusing anything but a regular file
// (a symlink, a FIFO, a device: ErrNotRegular, a symlink ErrSymlink too)
// and a mount point (ErrOtherMount), and returns its fstat.
func (d *Dir) OpenRegular(name string) (*os.File, unix.Stat_t, error) {
	var st unix.Stat_t
	if err := checkName(name); err != nil {
		return nil, st, err
	}
	// O_NONBLOCK: opening a FIFO planted under this name must not hang.
	fd, err := d.openat(name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY)
	if err != nil {
		return nil, st, &os.PathError{Op: "open", Path: d.join(name), Err: safeio.NotFollowed(err)}
	}
	f := os.NewFile(uintptr(fd), d.join(name))
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, st, &os.PathError{Op: "fstat", Path: d.join(name), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, st, &os.PathError{Op: "open", Path: d.join(name), Err: ErrNotRegular}
	}
	return f, st, nil
}

// Remove removes the file, symlink or empty directory name.
func (d *Dir) Remove(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	err := unix.Unlinkat(d.fd, name, 0)
	if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EPERM) {
		if err2 := unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR); err2 == nil || !errors.Is(err2, unix.ENOTDIR) {
			err = err2
		}
	}
	if err != nil {
		return &os.PathError{Op: "remove", Path: d.join(name), Err: err}
	}
	return nil
}

// RemoveAll removes name and, if it is a directory, everything in it. Symlinks
// are unlinked, never followed. A missing name is not an error.
func (d *Dir) RemoveAll(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	return d.removeTree(nil, name, 0, nil)
}

// RemoveTree removes name, an entry of d, and everything below it however
// deep, holding at most maxRemoveDepth descriptors at once: a directory
// found deeper is first moved up into d under a temporary name and removed
// from there. Each directory is made root's, mode 0700, before it is read,
// so that an owner still holding a descriptor inside the tree cannot keep
// adding to it. It is for trees already detached from any owner-writable
// place (a mailbox being deleted); leftovers of a crash carry TempPrefix.
func (d *Dir) RemoveTree(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	todo := []string{name}
	for len(todo) > 0 {
		n := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if err := d.removeTree(d, n, 0, &todo); err != nil {
			return err
		}
	}
	return nil
}

// removeTree removes name and everything below it. With top nil, as for
// RemoveAll, a tree deeper than maxRemoveDepth is an error; otherwise, as
// for RemoveTree, what lies that deep is moved up into top and added to
// todo, and each directory is made root's before it is read.
func (d *Dir) removeTree(top *Dir, name string, depth int, todo *[]string) error {
	err := unix.Unlinkat(d.fd, name, 0)
	switch {
	case err == nil, errors.Is(err, unix.ENOENT):
		return nil
	case !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM):
		return &os.PathError{Op: "remove", Path: d.join(name), Err: err}
	}
	if depth >= maxRemoveDepth {
		if top == nil {
			return fmt.Errorf("remove %s: directory tree deeper than %d levels", d.join(name), maxRemoveDepth)
		}
		hoisted := tempName("deep-")
		if err := unix.Renameat(d.fd, name, top.fd, hoisted); err != nil {
			return &os.LinkError{Op: "rename", Old: d.join(name), New: top.join(hoisted), Err: err}
		}
		*todo = append(*todo, hoisted)
		return nil
	}
	sub, err := d.OpenDir(name)
	if err != nil {
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return d.removeTree(top, name, depth+1, todo) // swapped since the unlink attempt
		}
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if top != nil {
		// Best effort: an unprivileged daemon (mailctl dev) owns the tree already.
		unix.Fchown(sub.fd, 0, 0)
		unix.Fchmod(sub.fd, 0o700)
	}
	err = sub.EachName(func(n string) error { return sub.removeTree(top, n, depth+1, todo) })
	sub.Close()
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "remove", Path: d.join(name), Err: err}
	}
	return nil
}

// nameBatch is how many names a directory listing holds at once.
const nameBatch = 1024

// EachName calls fn with each entry of the directory (without "." and
// ".."), reading nameBatch names at a time, so that a directory of millions
// of entries (its owner's to make) costs the daemon no more memory than a
// small one. fn may remove the entry it is given; entries others add or
// remove meanwhile may or may not be seen. It stops at fn's first error
// and returns it.
func (d *Dir) EachName(fn func(name string) error) error {
	// A fresh open file description, so that the read offset is our own.
	fd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: d.path, Err: err}
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	for {
		names, err := f.Readdirnames(nameBatch)
		for _, n := range names {
			if ferr := fn(n); ferr != nil {
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

// Rename renames oldName in d to newName in to. With noReplace, an existing
// newName is an error (ErrExists) instead of being replaced.
func (d *Dir) Rename(oldName string, to *Dir, newName string, noReplace bool) error {
	if err := checkName(oldName); err != nil {
		return err
	}
	if err := checkName(newName); err != nil {
		return err
	}
	var err error
	if noReplace {
		err = unix.Renameat2(d.fd, oldName, to.fd, newName, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			// A file system without RENAME_NOREPLACE: check, then rename.
			// The window is only open to the owner against its own files.
			if _, serr := to.Lstat(newName); serr == nil {
				err = unix.EEXIST
			} else {
				err = unix.Renameat(d.fd, oldName, to.fd, newName)
			}
		}
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("rename %s to %s: %w", d.join(oldName), to.join(newName), ErrExists)
		}
	} else {
		err = unix.Renameat(d.fd, oldName, to.fd, newName)
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: d.join(oldName), New: to.join(newName), Err: err}
	}
	return nil
}

// WriteFileAtomic durably replaces the file at path with data (temp file in
// the same directory, fsync, rename, fsync of the directory). It is for
// root-owned files such as the registry and the queue; mailbox files go
// through Dir.WriteFile.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	d, err := OpenDir(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.WriteFile(filepath.Base(path), data, perm, -1, -1)
}

// CleanTemps removes temporary files older than StaleTempAge from d. They are
// what a crash leaves behind; loaders skip them anyway.
func CleanTemps(d *Dir) { removeTemps(d, time.Now().Add(-StaleTempAge)) }

// removeTemps removes the temporary entries of d last changed before cutoff
// and returns how many it removed.
func removeTemps(d *Dir, cutoff time.Time) (n int, err error) {
	return removeOlder(d, cutoff, func(name string) bool { return strings.HasPrefix(name, TempPrefix) })
}

// removeOlder removes the entries of d that pick picks and that were last
// changed before cutoff, and returns how many it removed and the first
// error met (it goes on past errors).
func removeOlder(d *Dir, cutoff time.Time, pick func(name string) bool) (n int, err error) {
	lerr := d.EachName(func(name string) error {
		if !pick(name) {
			return nil
		}
		st, serr := d.Lstat(name)
		if serr != nil || !time.Unix(st.Mtim.Unix()).Before(cutoff) {
			return nil
		}
		if rerr := d.RemoveAll(name); rerr != nil {
			if err == nil {
				err = rerr
			}
			return nil
		}
		n++
		return nil
	})
	return n, cmp.Or(err, lerr)
}

// cleanOrphans removes the raw copy and attachments of messages whose .md
// (the commit point) was never written, as a crash between the two leaves
// them. Only files older than StaleTempAge go, so a delivery in progress is
// never touched.
func cleanOrphans(d *Dir) { removeOrphans(d, time.Now().Add(-StaleTempAge)) }

// removeOrphans removes the uncommitted raw copies and attachments of d last
// changed before cutoff and returns how many it removed.
func removeOrphans(d *Dir, cutoff time.Time) (n int, err error) {
	return removeOlder(d, cutoff, func(name string) bool {
		id, ok := strings.CutSuffix(name, ".eml")
		if !ok {
			id, ok = strings.CutSuffix(name, attSuffix)
		}
		return ok && !d.exists(id+".md")
	})
}

// exists says whether d has an entry name (of any kind).
func (d *Dir) exists(name string) bool {
	_, err := d.Lstat(name)
	return err == nil
}
