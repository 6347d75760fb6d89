// Package give gives a mailbox folder, and the mail in it, to another
// owner (`mailctl mailboxes give`) by file descriptors: each entry is
// looked at through a descriptor of its own and given through that same
// descriptor, so nothing the folder's present owner renames, links or
// swaps in between can lead the change to a file outside the mailbox.
package give

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/mailctl/mailctl/store"
	"golang.org/x/sys/unix"
)

// MaxDepth bounds how many folders deep the walk goes below the folder it
// is given (a mailbox holds two or three levels); what lies deeper is left
// as it is and named. Each level holds one descriptor open.
const MaxDepth = 64

// MaxNamed is how many of the entries left as they are a Result names;
// past it they are only counted.
const MaxNamed = 10

// Left is an entry the walk did not give, and why.
type Left struct {
	Path string
	Why  string
}

// Result is what a walk did.
type Result struct {
	Given     int    // folders and files given
	LeftCount int    // entries left as they are
	Left      []Left // the first MaxNamed of them, in the order met
}

func (r *Result) leave(path, why string) {
	r.LeftCount++
	if len(r.Left) < MaxNamed {
		r.Left = append(r.Left, Left{path, why})
	}
}

// looked, when set (by this package's tests only), is called for each
// entry once the walk has looked at it through its own descriptor and
// before it gives it: where a test swaps the entry, as the folder's
// present owner could at that moment.
var looked func(path string)

// Folder gives the folder at path to uid and gid (-1 leaves that one as it
// is), with every folder below it on the same file system and every
// regular file of one link in them, each only when it is the folder's
// present owner's (or already uid's; a folder also when it is root's). A
// mailbox's own folders and files are its owner's (a folder may be root's,
// made by the daemon and not yet given), and its files have one link
// each: a file with more links may be a hard link to a file outside
// (root's, where fs.protected_hardlinks is 0), and so may a file of
// another uid whose other names were removed since; a folder of another
// user is that user's. They are left as they are, as are symbolic links (neither
// followed nor changed), FIFOs, sockets, devices, mounts and whatever lies
// past MaxDepth; the Result counts them and names the first few. path
// itself may not be a symbolic link.
func Folder(path string, uid, gid int) (*Result, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		// Which one it is, for the message only (O_DIRECTORY|O_NOFOLLOW
		// answers ENOTDIR for a symbolic link).
		if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
			return nil, fmt.Errorf("%s is a symbolic link: give the folder it names, by its own path, if that is the mailbox", path)
		}
		return nil, fmt.Errorf("%s is not a folder", path)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	dev, mnt, err := store.MountOf(fd)
	if err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	w := &walker{dev: dev, mnt: mnt, owner: st.Uid, uid: uid, gid: gid, res: &Result{}}
	if err := w.dir(fd, path, 0); err != nil {
		return w.res, err
	}
	return w.res, nil
}

type walker struct {
	dev, mnt uint64 // the mount the folder given is on (mnt 0 where the kernel does not say)
	owner    uint32 // the folder's owner before it is given
	uid, gid int
	res      *Result
}

// openat opens name, an entry of the folder open at dirfd, with flags,
// refusing with store.ErrOtherMount a mount point without asking the file
// system mounted there anything (an owner's FUSE daemon may never answer),
// as the store's own opens do.
func (w *walker) openat(dirfd int, name string, flags int) (int, error) {
	return store.OpenOnMount(dirfd, name, flags, w.dev, w.mnt)
}

// dir gives what the folder open at fd holds, then the folder; it closes
// fd.
func (w *walker) dir(fd int, path string, depth int) error {
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	for {
		names, err := f.Readdirnames(256)
		for _, name := range names {
			if err := w.entry(fd, path, name, depth); err != nil {
				return err
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if err := unix.Fchown(fd, w.uid, w.gid); err != nil {
		return &os.PathError{Op: "chown", Path: path, Err: err}
	}
	w.res.Given++
	return nil
}

// entry gives the entry name of the folder open at dirfd when it is a
// folder or a file of one link, as the descriptor it opens says, through
// that descriptor.
func (w *walker) entry(dirfd int, dirPath, name string, depth int) error {
	p := filepath.Join(dirPath, name)
	// O_PATH opens without reading or writing, so a FIFO does not block
	// and a device's driver is not called; O_NOFOLLOW keeps a symbolic
	// link itself.
	fd, err := w.openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if errors.Is(err, unix.ENOENT) {
		return nil // removed since the listing: nothing to give
	}
	if errors.Is(err, store.ErrOtherMount) {
		w.res.leave(p, "another file system (a mount)")
		return nil
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "stat", Path: p, Err: err}
	}
	if looked != nil {
		looked(p)
	}
	switch mode := st.Mode & unix.S_IFMT; {
	case st.Dev != w.dev:
		w.res.leave(p, "another file system (a mount)")
	case mode == unix.S_IFDIR && st.Uid != w.owner && int(st.Uid) != w.uid && st.Uid != 0:
		// A mailbox's folders are its owner's, or root's where the daemon
		// made one and did not give it yet: one of another user's
		// (another mailbox's, where the folder given is not a mailbox)
		// is theirs, and so is what it holds.
		w.res.leave(p, fmt.Sprintf("a folder of uid %d, neither the folder's owner's, root's nor the new owner's", st.Uid))
	case mode == unix.S_IFDIR && depth+1 > MaxDepth:
		w.res.leave(p, fmt.Sprintf("a folder more than %d deep", MaxDepth))
	case mode == unix.S_IFDIR:
		// The descriptor to list it by is opened by name again: if that
		// name is no longer the folder looked at, it is left alone.
		dfd, err := w.openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, store.ErrOtherMount) {
			w.res.leave(p, "a folder replaced while it was being given")
			return nil
		}
		if err != nil {
			return &os.PathError{Op: "open", Path: p, Err: err}
		}
		var dst unix.Stat_t
		if err := unix.Fstat(dfd, &dst); err != nil {
			unix.Close(dfd)
			return &os.PathError{Op: "stat", Path: p, Err: err}
		}
		if dst.Dev != st.Dev || dst.Ino != st.Ino {
			unix.Close(dfd)
			w.res.leave(p, "a folder replaced while it was being given")
			return nil
		}
		return w.dir(dfd, p, depth+1)
	case mode == unix.S_IFREG && st.Uid != w.owner && int(st.Uid) != w.uid:
		// The store gives each file it writes the mailbox's owner: a file
		// of someone else's may be theirs, linked in, of one link once
		// they removed their own name for it (root replacing a file by a
		// rename leaves the old one so).
		w.res.leave(p, fmt.Sprintf("a file of uid %d, neither the folder's owner's nor the new owner's", st.Uid))
	case mode == unix.S_IFREG && st.Nlink == 1:
		if err := unix.Fchownat(fd, "", w.uid, w.gid, unix.AT_EMPTY_PATH); err != nil {
			return &os.PathError{Op: "chown", Path: p, Err: err}
		}
		w.res.Given++
	case mode == unix.S_IFREG:
		w.res.leave(p, fmt.Sprintf("a file of %d links (one may be outside the mailbox)", st.Nlink))
	case mode == unix.S_IFLNK:
		w.res.leave(p, "a symbolic link")
	default:
		w.res.leave(p, "not a regular file (a FIFO, socket or device)")
	}
	return nil
}
