package store

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// MailboxSnapshot says what SnapshotMailbox linked.
type MailboxSnapshot struct {
	UID, GID uint32
	// Messages counts the .md files linked; Files every file (raw copies
	// and attachments too); Bytes their sizes.
	Messages, Files int
	Bytes           int64
	// Skipped counts entries left out: not a committed message's file, not
	// a regular file, or not owned by the mailbox's owner.
	Skipped int
	// Warnings name what was left out that an operator may miss: a folder
	// or file on another file system than the store (a mount), which a
	// hard link cannot reach.
	Warnings []string
}

// SnapshotMailbox hard-links the committed messages of mailbox name (their
// .md, raw copy and attachments) into dst/<folder>/, a directory only root
// can reach on the store's file system, while every folder of the mailbox
// is locked against moves, rewrites and purges. The links keep the files
// as they were even when the store replaces or removes them afterwards
// (the store never writes into an existing file), so the snapshot costs a
// link per file under the locks and can be read at leisure after.
//
// A message is in the snapshot once: a move holds the locks of both its
// folders. A delivery in progress (its .md, the commit point, not yet in
// place) is left out with its raw copy and attachments. What the owner put
// in the mailbox that is not a regular file of theirs is left out too, as
// is a file of theirs that cannot take one more link, and anything on
// another file system than dst (a mount inside the mailbox), which is named
// in Warnings: one mount, an owner's or an operator's, must not end the
// snapshot of every mailbox.
func (s *Store) SnapshotMailbox(name string, dst *Dir) (MailboxSnapshot, error) {
	var out MailboxSnapshot
	mb, err := s.openMailbox(name)
	if errors.Is(err, ErrOtherMount) {
		// Its owner as the store's directory lists it; its files are not
		// the store's.
		st, _, _ := s.root.lstat(name)
		out.UID, out.GID = st.Uid, st.Gid
		out.Skipped++
		out.Warnings = append(out.Warnings, leftOut(name))
		return out, nil
	}
	if err != nil {
		return out, err
	}
	defer mb.close()
	out.UID, out.GID = uint32(mb.uid), uint32(mb.gid)
	type opened struct {
		name string
		d    *Dir
	}
	var folders []opened
	defer func() {
		for _, f := range folders {
			f.d.Close()
		}
	}()
	err = mb.dir.EachName(func(n string) error {
		if ValidFolder(n) != nil {
			out.Skipped++
			return nil
		}
		d, err := mb.folder(n, false)
		if err != nil {
			out.Skipped++ // a file, a symlink, or another owner's directory
			if errors.Is(err, ErrOtherMount) {
				out.Warnings = append(out.Warnings, leftOut(name+"/"+n))
			}
			return nil
		}
		folders = append(folders, opened{n, d})
		return nil
	})
	if err != nil {
		return out, err
	}
	// The index locks in name order, the order Move takes its two in.
	slices.SortFunc(folders, func(a, b opened) int { return strings.Compare(a.name, b.name) })
	// Every index first, then the locks: s.index takes the store's lock,
	// which is never taken while one of these is held.
	fis := make([]*folderIndex, len(folders))
	for i, f := range folders {
		fis[i] = s.index(name, f.name)
	}
	for _, fi := range fis {
		fi.mu.Lock()
		defer fi.mu.Unlock()
	}
	for _, f := range folders {
		to, err := dst.MkdirOwned(f.name, 0o700, -1, -1)
		if err != nil {
			return out, err
		}
		err = snapshotFolder(f.d, to, mb.uid, &out, name+"/"+f.name)
		to.Close()
		if err != nil {
			return out, fmt.Errorf("snapshot of %s/%s: %w", name, f.name, err)
		}
	}
	return out, nil
}

// snapshotFolder links the committed messages of folder d into to: first
// every .md (the commit point), then the raw copy and attachments of each
// message whose .md the snapshot holds.
func snapshotFolder(d, to *Dir, uid int, out *MailboxSnapshot, where string) error {
	err := d.EachName(func(n string) error {
		if id, ok := strings.CutSuffix(n, ".md"); ok && ValidID(id) == nil && !strings.HasPrefix(n, ".") {
			if linked, err := linkOwned(d, to, n, uid, out, where); err != nil {
				return err
			} else if linked {
				out.Messages++
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return d.EachName(func(n string) error {
		if strings.HasPrefix(n, ".") { // temporary files, legacy index files
			out.Skipped++
			return nil
		}
		if id, ok := strings.CutSuffix(n, ".md"); ok && ValidID(id) == nil {
			return nil // linked above
		}
		if id, ok := strings.CutSuffix(n, ".eml"); ok && to.exists(id+".md") {
			_, err := linkOwned(d, to, n, uid, out, where)
			return err
		}
		if id, ok := strings.CutSuffix(n, attSuffix); ok && to.exists(id+".md") {
			return snapshotAttachments(d, to, n, uid, out, where)
		}
		out.Skipped++
		return nil
	})
}

// snapshotAttachments links the files of a message's attachment folder.
func snapshotAttachments(d, to *Dir, name string, uid int, out *MailboxSnapshot, where string) error {
	src, err := d.OpenDir(name)
	if err != nil {
		out.Skipped++ // a symlink or a file where the folder should be
		if errors.Is(err, ErrOtherMount) {
			out.Warnings = append(out.Warnings, leftOut(where+"/"+name))
		}
		return nil
	}
	defer src.Close()
	if st, err := src.Stat(); err != nil || int(st.Uid) != uid {
		out.Skipped++
		return nil
	}
	sub, err := to.MkdirOwned(name, 0o700, -1, -1)
	if err != nil {
		return err
	}
	defer sub.Close()
	return src.EachName(func(n string) error {
		if strings.HasPrefix(n, ".") {
			out.Skipped++
			return nil
		}
		_, err := linkOwned(src, sub, n, uid, out, where+"/"+name)
		return err
	})
}

// linkOwned hard-links d/name to to/name when it is a regular file of uid.
// The link is checked after it is made, so an entry the owner swaps for a
// symlink or another file meanwhile is caught on the link, which the owner
// cannot reach, and removed.
func linkOwned(d, to *Dir, name string, uid int, out *MailboxSnapshot, where string) (bool, error) {
	if err := unix.Linkat(d.fd, name, to.fd, name, 0); err != nil {
		if errors.Is(err, unix.EXDEV) {
			// A file mounted over (a bind mount) is on another file
			// system, which no link reaches.
			out.Skipped++
			out.Warnings = append(out.Warnings, leftOut(where+"/"+name))
			return false, nil
		}
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EMLINK) {
			// Gone meanwhile (moved by the owner), a directory, or a
			// file the owner gave as many links as the file system
			// allows (65000 on ext4): left out, so that what one owner
			// does to their files never stops the snapshot of the rest.
			out.Skipped++
			return false, nil
		}
		return false, &os.LinkError{Op: "link", Old: d.join(name), New: to.join(name), Err: err}
	}
	st, err := to.Lstat(name)
	if err != nil {
		return false, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != uid {
		out.Skipped++
		return false, to.Remove(name)
	}
	out.Files++
	out.Bytes += st.Size
	return true, nil
}

// leftOut is the warning for what a snapshot leaves out because it is a
// mount (ErrOtherMount): what, named from the mailbox down.
func leftOut(what string) string {
	return what + ": on another file system than the store (a mount): left out"
}
