package store

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// A large message is never held in memory whole: its raw copy is written
// from a RawSource that streams it, and its large attachments are written,
// as they are decoded, into Spills in the folder the message goes to, which
// the store then moves into the message's attachment folder.

// RawSource is a message's raw bytes, written to <id>.eml by WriteTo.
type RawSource interface {
	io.WriterTo
	// Size is how many bytes WriteTo writes.
	Size() int64
}

// rawBytes is a RawSource held in memory.
type rawBytes []byte

func (b rawBytes) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(b)
	return int64(n), err
}

func (b rawBytes) Size() int64 { return int64(len(b)) }

// copyBodyMax is the largest body renderedOf copies after the frontmatter
// into one array: past it a second write(2) costs less than the copy.
const copyBodyMax = 32 << 10

// renderedOf writes what Render(m, body) makes. A large body is not copied
// into an array with the frontmatter: the frontmatter is written, then the
// body from the string it is (an *os.File writes a string without a copy).
func renderedOf(m *Message, body string) io.WriterTo {
	if len(body) <= copyBodyMax {
		return rawBytes(Render(m, body))
	}
	return rendered{head: Render(m, ""), body: body}
}

// rendered is a message file as its frontmatter and its body.
type rendered struct {
	head []byte
	body string
}

func (r rendered) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(r.head)
	if err != nil {
		return int64(n), err
	}
	k, err := io.WriteString(w, r.body)
	return int64(n + k), err
}

// rawOf is b as a RawSource; nil (no raw copy) for nil.
func rawOf(b []byte) RawSource {
	if b == nil {
		return nil
	}
	return rawBytes(b)
}

// Spill is an attachment being written as it is decoded, before its message
// is stored: a temporary file in the folder the message goes to (a name
// loaders skip). A delivery given it as AttachmentData.File moves it into
// the message's attachment folder instead of writing its bytes again. Call
// Discard when the message is not stored (and in any case once the delivery
// returned: it does nothing then).
type Spill struct {
	dir  *Dir // the folder, held open
	st   unix.Stat_t
	name string
	f    *os.File
	size int64
}

// NewSpill starts an attachment in mailbox/folder (created if missing).
func (s *Store) NewSpill(mailbox, folder string) (*Spill, error) {
	_, d, done, err := s.openFolderNow(mailbox, folder, true)
	if err != nil {
		return nil, err
	}
	defer done()
	fd, err := unix.FcntlInt(uintptr(d.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "dup", Path: d.path, Err: err}
	}
	dir := &Dir{fd: fd, path: d.path, dev: d.dev, mnt: d.mnt}
	st, err := dir.Stat()
	if err != nil {
		dir.Close()
		return nil, err
	}
	name, tfd, err := dir.createTemp(unix.O_RDWR)
	if err != nil {
		dir.Close()
		return nil, err
	}
	return &Spill{dir: dir, st: st, name: name, f: os.NewFile(uintptr(tfd), dir.join(name))}, nil
}

// Write appends p to the attachment.
func (sp *Spill) Write(p []byte) (int, error) {
	if sp.f == nil {
		return 0, errors.New("store: write to a spill that was discarded or placed")
	}
	n, err := sp.f.Write(p)
	sp.size += int64(n)
	return n, err
}

// Size is how many bytes were written.
func (sp *Spill) Size() int64 { return sp.size }

// ReadAt reads back what was written.
func (sp *Spill) ReadAt(p []byte, off int64) (int, error) {
	if sp.f == nil {
		return 0, errors.New("store: read from a spill that was discarded or placed")
	}
	return sp.f.ReadAt(p, off)
}

// Discard removes the temporary file, unless the spill was placed.
func (sp *Spill) Discard() {
	if sp == nil || sp.f == nil {
		return
	}
	sp.f.Close()
	sp.f = nil
	unix.Unlinkat(sp.dir.fd, sp.name, 0)
	sp.dir.Close()
}

// place makes the spill attachment name in ad, the attachment folder of a
// message in folder d: owned and moded as writeFile would, fsynced unless
// mode is syncNone, and renamed there when the spill is in d (else its
// bytes are copied). The spill is spent either way.
func (sp *Spill) place(d, ad *Dir, name string, uid, gid int, mode syncMode) error {
	if sp.f == nil {
		return errors.New("store: a spill placed twice or after Discard")
	}
	st, err := d.Stat()
	if err != nil {
		return err
	}
	if st.Dev != sp.st.Dev || st.Ino != sp.st.Ino {
		// The folder was replaced since the spill began: copy the bytes.
		if _, err := sp.f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		defer sp.Discard()
		return ad.writeFileTo(name, readerTo{io.LimitReader(sp.f, sp.size)}, FileMode, uid, gid, mode)
	}
	if uid >= 0 || gid >= 0 {
		if err := sp.f.Chown(uid, gid); err != nil {
			return err
		}
	}
	if err := sp.f.Chmod(FileMode.Perm()); err != nil {
		return err
	}
	if mode != syncNone {
		if err := sp.f.Sync(); err != nil {
			return err
		}
	}
	if err := unix.Renameat(sp.dir.fd, sp.name, ad.fd, name); err != nil {
		return &os.LinkError{Op: "rename", Old: sp.dir.join(sp.name), New: ad.join(name), Err: err}
	}
	sp.f.Close()
	sp.f = nil
	sp.dir.Close()
	return nil
}

// readerTo makes a reader a WriterTo (io.Copy, which uses copy_file_range
// between files).
type readerTo struct{ r io.Reader }

func (r readerTo) WriteTo(w io.Writer) (int64, error) { return io.Copy(w, r.r) }

// attachmentSize is how many bytes an attachment has.
func (a *AttachmentData) size() int64 {
	if a.File != nil {
		return a.File.Size()
	}
	return int64(len(a.Data))
}
