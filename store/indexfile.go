package store

import (
	"bufio"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"hash/maphash"
	"io"
	"math"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The persisted index. Each folder has, beside it in the mailbox directory,
// a file (indexFile) that logs the index rows the daemon has computed: one
// record per message version and one per completed directory scan. A
// restarted daemon reads it back instead of parsing every message, and keeps
// in memory only a small skeleton per message (id, order, file stamp,
// flags, where its row is in the file); a listing reads the rows of the page
// it returns from the file. The file is a cache: it is never fsynced, every
// record carries a checksum, a torn or foreign tail is cut off, and anything
// it says is checked against the folder the same way the in-memory index
// always was (the directory's stamp, then each file's stamp). The owner may
// delete or scribble over it; that costs a rebuild, never a wrong answer
// about another mailbox, and nothing in it is trusted beyond what the owner
// could write into the message files themselves.

// indexFile names the persisted index of a folder, in the mailbox directory
// beside the folder (inside it, its creation would move the folder's stamp
// and cost a scan). The leading dot keeps it out of folder names.
func indexFile(folder string) string { return ".mailctl-index." + folder }

// indexMagic starts every index file; a new layout gets a new magic.
// MCTLIDX2 added the starred flag: files of the first layout are rebuilt.
// MCTLIDX3 stores times as seconds and nanoseconds, which hold any date
// (Unix nanoseconds wrap around before 1678 and after 2262).
var indexMagic = [8]byte{'M', 'C', 'T', 'L', 'I', 'D', 'X', '3'}

// Bounds of what the store reads back from an index file: a larger file or
// record is not one the store wrote, and is rebuilt.
const (
	maxIndexFile   = 1 << 30
	maxIndexRecord = 4 << 20
)

// Record kinds.
const (
	recPut  = 'P' // a message's row
	recScan = 'S' // the folder's stamp after a complete scan
)

// errIndexStale means a row could not be read back from the index file as
// written: the file was changed under the daemon. The caller rebuilds.
var errIndexStale = errors.New("index file changed on disk")

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// hashSeed makes the in-memory hashes of Message-IDs and thread ids; they
// only pre-select rows, which are then compared in full.
var hashSeed = maphash.MakeSeed()

func hashString(s string) uint64 {
	if s == "" {
		return 0
	}
	return maphash.String(hashSeed, s)
}

func hashBytes(b []byte) uint64 {
	if len(b) == 0 {
		return 0
	}
	return maphash.Bytes(hashSeed, b)
}

// indexLog is an open index file.
type indexLog struct {
	f       *os.File
	end     int64 // where the next record goes
	records int   // records in the file, live or superseded
	broken  bool  // a write failed: no more appends
}

// scanRec is a recScan record.
type scanRec struct {
	stamp fileStamp
	racy  bool
}

// openIndexLog opens the folder's index file, creating it (owned by
// uid:gid) when it is missing or unusable, and calls put for every row
// record and scan for every scan record in it, in order. A nil log means
// the folder cannot have one (the name is taken by something that is not a
// file the store can remove); the index then lives in memory.
func openIndexLog(d *Dir, name string, uid, gid int, put func(*entry), scan func(scanRec)) *indexLog {
	fd, err := unix.Openat(d.fd, name, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err == nil {
		f := os.NewFile(uintptr(fd), d.join(name))
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink == 1 &&
			checkOwner(&st, uid) == nil && st.Size <= maxIndexFile {
			l := &indexLog{f: f}
			if l.load(st.Size, put, scan) {
				return l
			}
		}
		f.Close()
	} else if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENXIO) {
		return nil
	}
	// Missing, or not one the store can use: start a new one.
	if err := unix.Unlinkat(d.fd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return nil
	}
	return createIndexLog(d, name, uid, gid)
}

// createIndexLog creates a new, empty index file under name, or returns
// nil.
func createIndexLog(d *Dir, name string, uid, gid int) *indexLog {
	fd, err := unix.Openat(d.fd, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), d.join(name))
	if (uid >= 0 || gid >= 0) && f.Chown(uid, gid) != nil {
		f.Close()
		unix.Unlinkat(d.fd, name, 0)
		return nil
	}
	if _, err := f.WriteAt(indexMagic[:], 0); err != nil {
		f.Close()
		unix.Unlinkat(d.fd, name, 0)
		return nil
	}
	return &indexLog{f: f, end: int64(len(indexMagic))}
}

// load reads every record of a file of size bytes. A record that does not
// check out ends the log there (a torn write, or not ours): the file is cut
// to the records before it. It reports false when the file is not an index
// file at all.
func (l *indexLog) load(size int64, put func(*entry), scan func(scanRec)) bool {
	var magic [8]byte
	if _, err := l.f.ReadAt(magic[:], 0); err != nil || size < int64(len(magic)) || magic != indexMagic {
		return false
	}
	return l.cut(l.scan(size, func(off int64, rec []byte) bool {
		switch rec[0] {
		case recPut:
			e, ok := decodeSkeleton(rec)
			if !ok {
				return false
			}
			e.off = off
			put(e)
		case recScan:
			s, ok := decodeScan(rec)
			if !ok {
				return false
			}
			scan(s)
		default:
			return false
		}
		l.records++
		return true
	}))
}

// scan calls fn with the offset and payload of every record of the first
// end bytes of the file, in order; the payload is only valid during the
// call. It stops at the first record that does not check out or that fn
// refuses, and returns its offset (end when there is none).
func (l *indexLog) scan(end int64, fn func(off int64, rec []byte) bool) int64 {
	br := bufio.NewReaderSize(io.NewSectionReader(l.f, 0, end), 1<<20)
	if _, err := br.Discard(len(indexMagic)); err != nil {
		return 0
	}
	off := int64(len(indexMagic))
	var hdr [8]byte
	var buf []byte
	for off < end {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			break
		}
		n := binary.LittleEndian.Uint32(hdr[0:4])
		if n == 0 || n > maxIndexRecord || off+8+int64(n) > end {
			break
		}
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(br, buf); err != nil || crc32.Checksum(buf, crcTable) != binary.LittleEndian.Uint32(hdr[4:8]) {
			break
		}
		if !fn(off, buf) {
			break
		}
		off += 8 + int64(n)
	}
	return off
}

// cut ends the log at off.
func (l *indexLog) cut(off int64) bool {
	l.end = off
	l.f.Truncate(off)
	return true
}

func (l *indexLog) close() {
	if l != nil {
		l.f.Close()
	}
}

// append writes one record and returns its offset.
func (l *indexLog) append(payload []byte) (int64, error) {
	if l.broken {
		return 0, errIndexStale
	}
	if len(payload) > maxIndexRecord || l.end+8+int64(len(payload)) > maxIndexFile {
		return 0, ErrTooLarge
	}
	rec := frame(payload)
	off := l.end
	if _, err := l.f.WriteAt(rec, off); err != nil {
		l.broken = true
		return 0, err
	}
	l.end += int64(len(rec))
	l.records++
	return off, nil
}

// frame is payload as a record: its length and checksum, then itself.
func frame(payload []byte) []byte {
	rec := make([]byte, 8, 8+len(payload))
	binary.LittleEndian.PutUint32(rec[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(rec[4:8], crc32.Checksum(payload, crcTable))
	return append(rec, payload...)
}

// readRecord reads back the record at off.
func (l *indexLog) readRecord(off int64) ([]byte, error) {
	var hdr [8]byte
	if _, err := l.f.ReadAt(hdr[:], off); err != nil {
		return nil, errIndexStale
	}
	n := binary.LittleEndian.Uint32(hdr[0:4])
	if n == 0 || n > maxIndexRecord {
		return nil, errIndexStale
	}
	buf := make([]byte, n)
	if _, err := l.f.ReadAt(buf, off+8); err != nil || crc32.Checksum(buf, crcTable) != binary.LittleEndian.Uint32(hdr[4:8]) {
		return nil, errIndexStale
	}
	return buf, nil
}

// each calls fn with the offset and payload of every row record, in file
// order; the payload is only valid during the call. A record that does not
// read back as written, or that fn refuses, gives errIndexStale.
func (l *indexLog) each(fn func(off int64, rec []byte) bool) error {
	if l.scan(l.end, func(off int64, rec []byte) bool { return rec[0] != recPut || fn(off, rec) }) != l.end {
		return errIndexStale
	}
	return nil
}

// recordID returns the message id of a row record.
func recordID(rec []byte) ([]byte, bool) {
	r := recReader{b: rec[1:]}
	id := r.bytes()
	return id, !r.bad
}

// readSummary reads the row of e back.
func (l *indexLog) readSummary(e *entry) (Summary, error) {
	buf, err := l.readRecord(e.off)
	if err != nil {
		return Summary{}, err
	}
	s, ok := decodeSummary(buf)
	if !ok || s.ID != e.id {
		return Summary{}, errIndexStale
	}
	return s, nil
}

// The encoding of a put record: kind, id, the skeleton (order key, file
// stamp, flags, hashes), then the rest of the summary. Strings are a uvarint
// length and bytes, times are a flag, Unix nanoseconds and a zone offset.

type recWriter struct{ b []byte }

func (w *recWriter) u8(v byte)    { w.b = append(w.b, v) }
func (w *recWriter) u64(v uint64) { w.b = binary.LittleEndian.AppendUint64(w.b, v) }
func (w *recWriter) i64(v int64)  { w.u64(uint64(v)) }
func (w *recWriter) uv(v uint64)  { w.b = binary.AppendUvarint(w.b, v) }
func (w *recWriter) str(s string) { w.uv(uint64(len(s))); w.b = append(w.b, s...) }
func (w *recWriter) stamp(st fileStamp) {
	w.u64(st.ino)
	w.i64(st.size)
	w.i64(st.mtime)
	w.i64(st.ctime)
}
func (w *recWriter) strs(s []string) {
	w.uv(uint64(len(s)))
	for _, v := range s {
		w.str(v)
	}
}
func (w *recWriter) time(t time.Time) {
	if t.IsZero() {
		w.u8(0)
		return
	}
	_, zone := t.Zone()
	w.u8(1)
	w.i64(t.Unix())
	w.i64(int64(t.Nanosecond()))
	w.i64(int64(zone))
}

type recReader struct {
	b   []byte
	bad bool
}

func (r *recReader) need(n int) []byte {
	if r.bad || n < 0 || len(r.b) < n {
		r.bad = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}
func (r *recReader) u8() byte {
	if v := r.need(1); v != nil {
		return v[0]
	}
	return 0
}
func (r *recReader) u64() uint64 {
	if v := r.need(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}
func (r *recReader) i64() int64 { return int64(r.u64()) }
func (r *recReader) stamp() fileStamp {
	return fileStamp{ino: r.u64(), size: r.i64(), mtime: r.i64(), ctime: r.i64()}
}
func (r *recReader) uv() uint64 {
	if r.bad {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}
func (r *recReader) bytes() []byte {
	n := r.uv()
	if n > uint64(len(r.b)) {
		r.bad = true
		return nil
	}
	return r.need(int(n))
}
func (r *recReader) str() string { return string(r.bytes()) }
func (r *recReader) strs() []string {
	n := r.uv()
	if n > uint64(len(r.b)) { // each string takes at least one byte
		r.bad = true
		return nil
	}
	if n == 0 {
		return nil
	}
	out := make([]string, 0, n)
	for range n {
		out = append(out, r.str())
	}
	return out
}
func (r *recReader) time() time.Time {
	switch r.u8() {
	case 0:
		return time.Time{}
	case 1:
		sec, ns, zone := r.i64(), r.i64(), r.i64()
		if zone < -18*3600 || zone > 18*3600 || ns < 0 || ns >= 1e9 {
			r.bad = true
			return time.Time{}
		}
		t := time.Unix(sec, ns)
		if zone == 0 {
			return t.UTC()
		}
		return t.In(time.FixedZone("", int(zone)))
	}
	r.bad = true
	return time.Time{}
}

// Flags of a put record.
const (
	flagRead = 1 << iota
	flagTrusted
	flagRacy
	flagStarred
)

// bit is f when on, else 0.
func bit(on bool, f byte) byte {
	if on {
		return f
	}
	return 0
}

// encodePut encodes the row of e (whose summary is s) with its file stamp.
func encodePut(e *entry, st fileStamp, s *Summary) []byte {
	w := recWriter{b: make([]byte, 0, 256+len(s.Snippet)+len(s.Subject))}
	w.u8(recPut)
	w.str(e.id)
	w.i64(e.sortKey)
	w.stamp(st)
	w.u8(bit(e.read, flagRead) | bit(e.trusted, flagTrusted) | bit(e.racy, flagRacy) | bit(e.starred, flagStarred))
	w.str(s.MessageID)
	w.str(s.ThreadID)
	w.str(s.From)
	w.strs(s.To)
	w.str(s.Subject)
	w.time(s.Date)
	w.time(s.ReceivedAt)
	w.str(s.Trusted)
	w.uv(uint64(s.Attachments))
	w.str(s.Snippet)
	w.str(s.DeliveryStatus)
	w.strs(s.Labels)
	return w.b
}

// decodeSkeleton decodes what the in-memory index keeps of a put record.
func decodeSkeleton(b []byte) (*entry, bool) {
	r := recReader{b: b[1:]}
	id := r.bytes()
	e := &entry{sortKey: r.i64()}
	st := r.stamp()
	flags := r.u8()
	mid, tid := r.bytes(), r.bytes()
	if r.bad || ValidID(string(id)) != nil {
		return nil, false
	}
	e.id = string(id)
	e.stamp = st.hash()
	e.read, e.trusted, e.racy = flags&flagRead != 0, flags&flagTrusted != 0, flags&flagRacy != 0
	e.starred = flags&flagStarred != 0
	e.mid, e.tid = hashBytes(mid), hashBytes(tid)
	return e, true
}

// decodeSummary decodes the whole row of a put record.
func decodeSummary(b []byte) (Summary, bool) {
	if len(b) == 0 || b[0] != recPut {
		return Summary{}, false
	}
	r := recReader{b: b[1:]}
	var s Summary
	s.ID = r.str()
	r.i64()
	r.need(32)
	flags := r.u8()
	s.Read = flags&flagRead != 0
	s.Starred = flags&flagStarred != 0
	s.MessageID = r.str()
	s.ThreadID = r.str()
	s.From = r.str()
	s.To = r.strs()
	s.Subject = r.str()
	s.Date = r.time()
	s.ReceivedAt = r.time()
	s.Trusted = r.str()
	att := r.uv()
	s.Snippet = r.str()
	s.DeliveryStatus = r.str()
	s.Labels = r.strs()
	if r.bad || len(r.b) != 0 || att > math.MaxInt32 {
		return Summary{}, false
	}
	s.Attachments = int(att)
	return s, true
}

func encodeScan(s scanRec) []byte {
	w := recWriter{}
	w.u8(recScan)
	w.stamp(s.stamp)
	w.u8(bit(s.racy, 1))
	return w.b
}

func decodeScan(b []byte) (scanRec, bool) {
	r := recReader{b: b[1:]}
	s := scanRec{stamp: r.stamp()}
	racy := r.u8()
	if r.bad || len(r.b) != 0 || racy > 1 {
		return scanRec{}, false
	}
	s.racy = racy == 1
	return s, true
}
