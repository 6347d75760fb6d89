// Package wal is an append-only file of checksummed records with group
// commit: the durable record both the outbound queue and the inbound
// journal keep. A caller that needs its append durable waits for an fsync
// that began after it, so concurrent callers share fsyncs instead of paying
// a temporary file, an fsync, a rename and a directory fsync each.
//
// The file starts with a magic line naming its format and version. A
// record is a 4-byte big-endian payload length, the payload's CRC-32C and
// the payload. At open the records are replayed in order; a record cut
// short or failing its checksum ends the replay: it and everything after it
// were never acknowledged if the file was being appended to when the
// process died. That tail is copied to corrupt/ beside the file, and the
// file is cut there.
package wal

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/mailctl/mailctl/internal/safeio"
)

// Header is the size of a record's header: length and checksum.
const Header = 8

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Loc is where a record's payload is in the file: N bytes at Off (its
// header is the Header bytes before Off).
type Loc struct{ Off, N int64 }

// Options configure a Log.
type Options struct {
	// Magic is the file's first bytes; a file that starts otherwise is set
	// aside whole and started again.
	Magic string
	// MaxRecord bounds a payload; a longer one read back ends the replay.
	MaxRecord int64
	// Logf reports what the replay cut or set aside.
	Logf func(msg string, args ...any)
	// Refuse, when set, looks at a file that does not start with Magic
	// before it is set aside: an error (a later release's file, a damaged
	// version stamp) stops Open and leaves the file as it is.
	Refuse func(f io.ReaderAt, size int64) error
}

// Log is one open log file. It is safe for concurrent use.
type Log struct {
	dir, path string
	o         Options

	mu      sync.Mutex
	cond    *sync.Cond
	f       *os.File
	size    int64  // end of the last whole record
	written uint64 // appends so far
	synced  uint64 // appends covered by a finished fsync
	syncing bool
	closed  bool
	err     error // a failed write or fsync: appends are refused until reopened
	syncs   int   // fsyncs done by Commit
	fsync   func(*os.File) error
}

// Open opens (creating) the log at path and replays it: apply gets each
// whole record's payload, in order, with its location. An error from apply
// is reported through Logf and the replay goes on.
func Open(path string, o Options, apply func(p []byte, at Loc) error) (*Log, error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.MaxRecord <= 0 {
		o.MaxRecord = 1 << 30
	}
	l := &Log{dir: filepath.Dir(path), path: path, o: o, fsync: (*os.File).Sync}
	l.cond = sync.NewCond(&l.mu)
	f, err := openRegular(path)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	l.f = f
	if err := l.replay(apply); err != nil {
		f.Close()
		return nil, err
	}
	return l, nil
}

// openRegular opens (creating) the regular file at path for reading and
// writing. The log is written as root: a symbolic link where it is kept is
// never followed (its target would be set aside and overwritten), and a
// FIFO, a device or a directory is refused unread, without waiting on it
// or taking it as a terminal. Each is safeio.ErrNotRegular (a link
// safeio.ErrSymlink too).
func openRegular(path string) (*os.File, error) {
	return safeio.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}

// replay reads every whole record and cuts the file after the last one.
func (l *Log) replay(apply func(p []byte, at Loc) error) error {
	st, err := l.f.Stat()
	if err != nil {
		return err
	}
	if st.Size() == 0 {
		return l.create()
	}
	r := bufio.NewReaderSize(io.NewSectionReader(l.f, 0, st.Size()), 1<<16)
	head := make([]byte, len(l.o.Magic))
	if _, err := io.ReadFull(r, head); err != nil || string(head) != l.o.Magic {
		if l.o.Refuse != nil {
			if err := l.o.Refuse(l.f, st.Size()); err != nil {
				return err
			}
		}
		// Not a file this version knows: set all of it aside.
		l.o.Logf("journal unreadable: set aside", "file", l.path, "moved_to", filepath.Join(l.dir, "corrupt"))
		if err := l.cut(0, st.Size()); err != nil {
			return err
		}
		return l.create()
	}
	off := l.readRecords(r, st.Size(), apply)
	if off < st.Size() {
		if err := l.cut(off, st.Size()); err != nil {
			return err
		}
	}
	l.size = off
	return nil
}

// create writes the magic of a new, empty file, and makes it and the
// file's directory entry durable.
func (l *Log) create() error {
	if _, err := l.f.WriteAt([]byte(l.o.Magic), 0); err != nil {
		return fmt.Errorf("writing %s: %w", l.path, err)
	}
	if err := l.f.Sync(); err != nil {
		return err
	}
	l.size = int64(len(l.o.Magic))
	return safeio.SyncDir(l.dir)
}

// Stop is why a replay or a Scan stopped.
type Stop int

const (
	// StopEnd is the end of the last whole record.
	StopEnd Stop = iota
	// StopPartial is a record that runs past the end: an append cut
	// short, or under way as a reader read the file.
	StopPartial
	// StopDamaged is a record that cannot be right: a bad length or
	// checksum.
	StopDamaged
)

// readRecords applies the records r holds after the magic (Scan), logging
// why it stopped, and returns the offset where the whole records end.
func (l *Log) readRecords(r io.Reader, size int64, apply func(p []byte, at Loc) error) int64 {
	off, stop := Scan(r, len(l.o.Magic), size, l.o.MaxRecord, func(p []byte, at Loc) error {
		err := apply(p, at)
		if err != nil {
			l.o.Logf("journal record not understood: skipped", "file", l.path, "offset", at.Off-Header, "err", err)
		}
		return nil
	})
	switch stop {
	case StopPartial:
		l.o.Logf("journal ends in a partial record: cut", "file", l.path, "offset", off)
	case StopDamaged:
		l.o.Logf("journal record fails its checks: it and what follows are set aside", "file", l.path, "offset", off)
	}
	return off
}

// Scan reads the records r holds, r being positioned just past a magic of
// magicLen bytes in a file of size bytes, and gives each whole record's
// payload to apply, up to the first that is cut short or cannot be right.
// It returns the offset where the whole records end and why it stopped.
// An error from apply skips that record. Scan takes no lock: a reader
// (mailctl queue inspect) may scan a file the daemon appends to, and sees
// an append under way as StopPartial.
func Scan(r io.Reader, magicLen int, size, maxRecord int64, apply func(p []byte, at Loc) error) (int64, Stop) {
	if maxRecord <= 0 {
		maxRecord = 1 << 30
	}
	off := int64(magicLen)
	var hdr [Header]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err != io.EOF {
				return off, StopPartial
			}
			return off, StopEnd
		}
		n := int64(binary.BigEndian.Uint32(hdr[:4]))
		sum := binary.BigEndian.Uint32(hdr[4:])
		switch {
		case n == 0:
			// Zeros: what a crash can leave past the last whole record.
			return off, StopPartial
		case n > maxRecord:
			return off, StopDamaged
		case off+Header+n > size:
			return off, StopPartial
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(r, payload); err != nil || crc32.Checksum(payload, crcTable) != sum {
			return off, StopDamaged
		}
		_ = apply(payload, Loc{Off: off + Header, N: n})
		off += Header + n
	}
}

// cut copies [from, to) to corrupt/ and truncates the file at from.
func (l *Log) cut(from, to int64) error {
	cdir := filepath.Join(l.dir, "corrupt")
	if err := os.MkdirAll(cdir, 0o700); err != nil {
		return err
	}
	tail := make([]byte, to-from)
	if _, err := l.f.ReadAt(tail, from); err != nil && err != io.EOF {
		return err
	}
	name := filepath.Join(cdir, fmt.Sprintf("%s-%d-at-%d", filepath.Base(l.path), time.Now().UnixNano(), from))
	if err := safeio.WriteFile(name, tail); err != nil {
		return err
	}
	if err := l.f.Truncate(from); err != nil {
		return err
	}
	return l.f.Sync()
}

// Record builds one record of the payload given in parts.
func Record(payload ...[]byte) []byte {
	n := 0
	for _, p := range payload {
		n += len(p)
	}
	b := make([]byte, Header, Header+n)
	for _, p := range payload {
		b = append(b, p...)
	}
	binary.BigEndian.PutUint32(b[:4], uint32(n))
	binary.BigEndian.PutUint32(b[4:8], crc32.Checksum(b[Header:], crcTable))
	return b
}

// bigPart is the size past which a record's last part is written as it is
// rather than copied into the record.
const bigPart = 64 << 10

// Append writes a record of the payload given in parts at the end and
// returns the append's number, for Commit, and where its payload is.
func (l *Log) Append(payload ...[]byte) (uint64, Loc, error) {
	// A large last part (a message) is written from where it is.
	var last []byte
	if k := len(payload); k > 0 && len(payload[k-1]) > bigPart {
		last = payload[k-1]
		payload = payload[:k-1]
	}
	head := Record(payload...)
	if last != nil {
		n := binary.BigEndian.Uint32(head[:4]) + uint32(len(last))
		sum := crc32.Update(binary.BigEndian.Uint32(head[4:8]), crcTable, last)
		binary.BigEndian.PutUint32(head[:4], n)
		binary.BigEndian.PutUint32(head[4:8], sum)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, Loc{}, errors.New("the journal is closed")
	}
	if l.err != nil {
		return 0, Loc{}, l.err
	}
	at := l.size
	_, err := l.f.WriteAt(head, at)
	if err == nil && last != nil {
		_, err = l.f.WriteAt(last, at+int64(len(head)))
	}
	if err != nil {
		// Whatever part reached the file is past l.size: the next append
		// overwrites it, and a restart cuts it as a partial record.
		return 0, Loc{}, fmt.Errorf("appending to %s: %w", l.path, err)
	}
	n := int64(len(head) + len(last))
	l.size += n
	l.written++
	return l.written, Loc{Off: at + Header, N: n - Header}, nil
}

// Snapshot copies the file to w up to the end of its last whole record at
// the moment of the call. The descriptor is opened under the lock appends
// take, so a rewrite that renames a new file into place later leaves the
// copy whole; appends after the call lie past the end it copies.
func (l *Log) Snapshot(w io.Writer) (int64, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return 0, errors.New("the journal is closed")
	}
	f, _, err := safeio.OpenRegular(l.path, math.MaxInt64) // never waits with the lock held
	size := l.size
	l.mu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("opening %s for a snapshot: %w", l.path, err)
	}
	defer f.Close()
	n, err := io.Copy(w, io.NewSectionReader(f, 0, size))
	if err == nil && n != size {
		err = fmt.Errorf("%s is %d bytes, %d expected", l.path, n, size)
	}
	return n, err
}

// Commit returns once append w is durable, sharing fsyncs with concurrent
// callers: an fsync that began after the append covers it.
func (l *Log) Commit(w uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.synced < w {
		if l.err != nil {
			return l.err
		}
		if l.syncing {
			l.cond.Wait()
			continue
		}
		l.syncing = true
		target, f := l.written, l.f
		l.mu.Unlock()
		err := l.fsync(f)
		l.mu.Lock()
		l.syncs++
		l.syncing = false
		if err != nil {
			// After a failed fsync the kernel may have dropped the dirty
			// pages: nothing written since the last good fsync can be
			// trusted, so stop until a restart replays what is on disk.
			l.err = fmt.Errorf("syncing %s: %w", l.path, err)
		} else if target > l.synced {
			l.synced = target
		}
		l.cond.Broadcast()
	}
	return nil
}

// Read returns the payload at at, checked against its record's checksum.
func (l *Log) Read(at Loc) ([]byte, error) {
	l.mu.Lock()
	f, closed := l.f, l.closed
	l.mu.Unlock()
	if closed {
		return nil, errors.New("the journal is closed")
	}
	return readRecord(f, at)
}

func readRecord(f *os.File, at Loc) ([]byte, error) {
	buf := make([]byte, Header+at.N)
	if _, err := f.ReadAt(buf, at.Off-Header); err != nil {
		return nil, err
	}
	if int64(binary.BigEndian.Uint32(buf[:4])) != at.N || crc32.Checksum(buf[Header:], crcTable) != binary.BigEndian.Uint32(buf[4:8]) {
		return nil, fmt.Errorf("%s: the record at %d fails its checksum", f.Name(), at.Off-Header)
	}
	return buf[Header:], nil
}

// ReadAt reads the file's bytes at off, unchecked: for reading part of a
// payload this process wrote, or one the replay checked.
func (l *Log) ReadAt(p []byte, off int64) (int, error) {
	l.mu.Lock()
	f := l.f
	l.mu.Unlock()
	return f.ReadAt(p, off)
}

// Size is the end of the last whole record.
func (l *Log) Size() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.size
}

// Empty reports whether the log holds no record.
func (l *Log) Empty() bool { return l.Size() == int64(len(l.o.Magic)) }

// Writer writes the records of a new file for Rewrite, and reads those of
// the file it replaces.
type Writer struct {
	w   *bufio.Writer
	off int64
	old *os.File
}

// Read returns a payload of the file being replaced, as Log.Read does.
func (w *Writer) Read(at Loc) ([]byte, error) { return readRecord(w.old, at) }

// Append writes a record and returns where its payload is in the new file.
func (w *Writer) Append(payload ...[]byte) Loc {
	rec := Record(payload...)
	w.w.Write(rec) // a failed write is kept by w.w and returned by its Flush
	at := Loc{Off: w.off + Header, N: int64(len(rec) - Header)}
	w.off += int64(len(rec))
	return at
}

// Rewrite replaces the file with what fill writes: a new file is written
// and synced, then renamed over the old one, and the directory synced. A
// rewrite that fails before its rename changes nothing. Appends made while
// fill runs wait; fill must not call the Log (Writer.Read reads it).
func (l *Log) Rewrite(fill func(w *Writer) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.quiesceLocked(); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(l.dir, safeio.TempPrefix+filepath.Base(l.path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	w := &Writer{w: bufio.NewWriterSize(tmp, 1<<16), off: int64(len(l.o.Magic)), old: l.f}
	w.w.WriteString(l.o.Magic)
	if err := fill(w); err != nil {
		tmp.Close()
		return err
	}
	if err := w.w.Flush(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := os.Rename(tmp.Name(), l.path); err != nil {
		tmp.Close()
		return err
	}
	// The new file has the name now: appends must go to it.
	l.f.Close()
	l.f, l.size = tmp, w.off
	if err := safeio.SyncDir(l.dir); err != nil {
		l.err = fmt.Errorf("rewriting %s: %w", l.path, err)
		l.cond.Broadcast()
		return l.err
	}
	// Everything appended so far is in the new file, synced.
	l.synced = l.written
	l.cond.Broadcast()
	return nil
}

// Reset empties the file, back to its magic, and makes that durable.
func (l *Log) Reset() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.quiesceLocked(); err != nil {
		return err
	}
	if err := l.f.Truncate(int64(len(l.o.Magic))); err != nil {
		return err
	}
	if err := l.f.Sync(); err != nil {
		l.err = fmt.Errorf("syncing %s: %w", l.path, err)
		return l.err
	}
	l.size = int64(len(l.o.Magic))
	l.synced = l.written
	return nil
}

// quiesceLocked waits until no fsync runs, for a change of the whole file.
// Call with l.mu held.
func (l *Log) quiesceLocked() error {
	for l.syncing {
		l.cond.Wait()
	}
	if l.closed {
		return errors.New("the journal is closed")
	}
	return nil
}

// Close closes the file; appends fail afterwards.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.syncing {
		l.cond.Wait()
	}
	if l.closed {
		return nil
	}
	l.closed = true
	return l.f.Close()
}

// Syncs is how many fsyncs Commit made (for tests and benchmarks).
func (l *Log) Syncs() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.syncs
}

// SetFsync replaces the fsync Commit makes; tests hold it to see commits
// grouped.
func (l *Log) SetFsync(fsync func(*os.File) error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fsync = fsync
}

// State is how many appends were made and whether an fsync is under way
// (for tests that wait for commits to pile up).
func (l *Log) State() (written uint64, syncing bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.written, l.syncing
}

// Err is the write or fsync failure that stopped the log, if any.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}
