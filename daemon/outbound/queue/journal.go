package queue

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/mailctl/mailctl/internal/safeio"
)

// The queue's state lives in one append-only journal. Each change of an
// item is a record appended to it; a caller that needs the change durable
// waits for an fsync that began after its append, so concurrent senders and
// attempts share fsyncs (group commit) instead of paying a temporary file, an
// fsync, a rename and a directory fsync each. The journal is rewritten with
// only the live items once most of it is dead.
//
// A record is a 4-byte big-endian payload length, the payload's CRC-32C and
// the payload. The payload's first byte says what it is:
//
//	'E' an item enqueued: a 4-byte length, the item's JSON, the signed
//	    message, then the data of its sent copy (copy_size bytes, if any)
//	'S' an item's new state: its JSON
//	'A' an item settled and announced (its sent copy written, its
//	    after_send hooks run): its id. A restart only brings the sent copy
//	    up to date again, since that write may not have been durable.
//	'D' an item gone (settled, announced, and its sent copy durable): its id
//
// At start the records are replayed in order. A record cut short or failing
// its checksum ends the replay: it and everything after it were never
// acknowledged if the journal was being appended to when the daemon died,
// and are copied to corrupt/ otherwise, and the journal is cut there.
const (
	journalName  = "journal"
	journalMagic = "mailctl queue journal 1\n"
	recHeader    = 8
	// maxRecord bounds a record: the largest message plus its state.
	maxRecord = 1 << 30
	// compactMin is the journal size below which it is never rewritten.
	compactMin = 8 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// loc is where an item's message is in the journal file: n bytes at off,
// inside the record of recN bytes at rec, whose checksum covers them.
type loc struct{ off, n, rec, recN int64 }

type journal struct {
	dir, path string

	mu    sync.Mutex
	cond  *sync.Cond
	f     *os.File
	size  int64             // end of the last whole record
	state map[string][]byte // each live item's latest state JSON
	// announced holds the live items that are settled and announced.
	announced map[string]bool
	data      map[string]loc // each live item's message
	live      int64          // bytes the live items would take rewritten
	written   uint64         // appends so far
	synced    uint64         // appends covered by a finished fsync
	syncing   bool
	closed    bool
	err       error // a failed write: the journal refuses appends until restart
	syncs     int   // fsyncs done by commit
	// fsync syncs the file; tests hold it to see commits grouped.
	fsync func(*os.File) error
}

// replayed is an item as the journal holds it at start.
type replayed struct {
	it        *Item
	loc       loc
	announced bool
}

// openJournal opens (creating) the journal in dir and replays it.
func openJournal(dir string, logf func(msg string, args ...any)) (*journal, map[string]replayed, error) {
	j := &journal{dir: dir, path: filepath.Join(dir, journalName), state: map[string][]byte{}, data: map[string]loc{}, announced: map[string]bool{},
		fsync: (*os.File).Sync}
	j.cond = sync.NewCond(&j.mu)
	f, err := os.OpenFile(j.path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("opening the queue journal: %w", err)
	}
	j.f = f
	items, err := j.replay(logf)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return j, items, nil
}

// replay reads every whole record, cuts the journal after the last one, and
// returns the items it holds.
func (j *journal) replay(logf func(msg string, args ...any)) (map[string]replayed, error) {
	st, err := j.f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() == 0 {
		return j.create()
	}
	r := bufio.NewReaderSize(io.NewSectionReader(j.f, 0, st.Size()), 1<<16)
	head := make([]byte, len(journalMagic))
	if _, err := io.ReadFull(r, head); err != nil || string(head) != journalMagic {
		// Not a journal this version knows: set all of it aside.
		logf("queue journal unreadable: set aside", "moved_to", filepath.Join(j.dir, "corrupt"))
		if err := j.cut(0, st.Size()); err != nil {
			return nil, err
		}
		return j.create()
	}
	items := map[string]replayed{}
	off, _ := j.readRecords(r, st.Size(), items, logf)
	if off < st.Size() {
		if err := j.cut(off, st.Size()); err != nil {
			return nil, err
		}
	}
	j.size = off
	j.index(items)
	return items, nil
}

// create writes the header of a new, empty journal, and makes it and the
// file's directory entry durable.
func (j *journal) create() (map[string]replayed, error) {
	if _, err := j.f.WriteAt([]byte(journalMagic), 0); err != nil {
		return nil, fmt.Errorf("writing the queue journal: %w", err)
	}
	if err := j.f.Sync(); err != nil {
		return nil, err
	}
	j.size = int64(len(journalMagic))
	return map[string]replayed{}, safeio.SyncDir(j.dir)
}

// readRecords applies the records r holds after the header to items, up to
// the first that is cut short or fails its checksum, and returns the offset
// where the whole records end. size is the file's size, which no record may
// reach past.
func (j *journal) readRecords(r io.Reader, size int64, items map[string]replayed, logf func(msg string, args ...any)) (int64, stopReason) {
	off := int64(len(journalMagic))
	var hdr [recHeader]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err != io.EOF {
				logf("queue journal ends in a partial record: cut", "offset", off)
				return off, stopPartial
			}
			return off, stopEnd
		}
		n := binary.BigEndian.Uint32(hdr[:4])
		sum := binary.BigEndian.Uint32(hdr[4:])
		if n == 0 {
			// Zeros: what a crash can leave past the last whole record.
			logf("queue journal ends in a partial record: cut", "offset", off)
			return off, stopPartial
		}
		if n > maxRecord {
			logf("queue journal record has an impossible length: it and what follows are set aside", "offset", off)
			return off, stopDamaged
		}
		if off+recHeader+int64(n) > size {
			logf("queue journal ends in a partial record: cut", "offset", off)
			return off, stopPartial
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(r, payload); err != nil || crc32.Checksum(payload, crcTable) != sum {
			logf("queue journal record fails its checksum: it and what follows are set aside", "offset", off)
			return off, stopDamaged
		}
		if err := j.apply(items, payload, off+recHeader); err != nil {
			logf("queue journal record not understood: skipped", "offset", off, "err", err)
		}
		off += recHeader + int64(n)
	}
}

// stopReason is why readRecords stopped.
type stopReason int

const (
	stopEnd     stopReason = iota // at the end of the last whole record
	stopPartial                   // in a record that runs past the end: an append cut short, or under way
	stopDamaged                   // at a record that cannot be right: a bad length or checksum
)

// index fills in the journal's view of the live items replayed: which are
// announced, where their messages are, and the bytes they would take
// rewritten.
func (j *journal) index(items map[string]replayed) {
	for id, x := range items {
		if x.announced {
			j.announced[id] = true
		}
		j.data[id] = x.loc
		j.live += x.loc.n + int64(len(j.state[id])) + 2*recHeader + 8
	}
}

// apply replays one record; at is the offset of its payload in the file.
func (j *journal) apply(items map[string]replayed, p []byte, at int64) error {
	switch p[0] {
	case 'E':
		if len(p) < 5 {
			return errors.New("short enqueue record")
		}
		n := int64(binary.BigEndian.Uint32(p[1:5]))
		if 5+n > int64(len(p)) {
			return errors.New("enqueue record: state longer than the record")
		}
		var it Item
		if err := json.Unmarshal(p[5:5+n], &it); err != nil {
			return err
		}
		if err := checkItem(&it); err != nil {
			return err
		}
		l := loc{off: at + 5 + n, n: int64(len(p)) - 5 - n, rec: at - recHeader, recN: recHeader + int64(len(p))}
		if l.n != it.Size+it.CopySize {
			return fmt.Errorf("item %s: %d bytes of message and sent copy, the item says %d", it.ID, l.n, it.Size+it.CopySize)
		}
		items[it.ID] = replayed{it: &it, loc: l}
		j.state[it.ID] = append([]byte(nil), p[5:5+n]...)
	case 'S':
		var it Item
		if err := json.Unmarshal(p[1:], &it); err != nil {
			return err
		}
		x, ok := items[it.ID]
		if !ok {
			return fmt.Errorf("state of %s, which is not queued", it.ID)
		}
		if err := checkItem(&it); err != nil {
			return err
		}
		it.Size, it.CopySize = x.it.Size, x.it.CopySize
		x.it = &it
		items[it.ID] = x
		j.state[it.ID] = append([]byte(nil), p[1:]...)
	case 'A':
		id := string(p[1:])
		x, ok := items[id]
		if !ok {
			return fmt.Errorf("announcement of %s, which is not queued", id)
		}
		x.announced = true
		items[id] = x
	case 'D':
		id := string(p[1:])
		delete(items, id)
		delete(j.state, id)
	default:
		return fmt.Errorf("record kind %q", p[0])
	}
	return nil
}

// checkItem refuses a state no attempt could use.
func checkItem(it *Item) error {
	if !itemIDRE.MatchString(it.ID) {
		return fmt.Errorf("bad item id %q", it.ID)
	}
	if len(it.Recipients) == 0 {
		return fmt.Errorf("item %s has no recipients", it.ID)
	}
	return nil
}

// cut copies [from, to) to corrupt/ and truncates the journal at from.
func (j *journal) cut(from, to int64) error {
	cdir := filepath.Join(j.dir, "corrupt")
	if err := os.MkdirAll(cdir, 0o700); err != nil {
		return err
	}
	tail := make([]byte, to-from)
	if _, err := j.f.ReadAt(tail, from); err != nil && err != io.EOF {
		return err
	}
	name := filepath.Join(cdir, fmt.Sprintf("journal-%d-at-%d", time.Now().UnixNano(), from))
	if err := safeio.WriteFile(name, tail); err != nil {
		return err
	}
	if err := j.f.Truncate(from); err != nil {
		return err
	}
	return j.f.Sync()
}

// record builds one record.
func record(payload ...[]byte) []byte {
	n := 0
	for _, p := range payload {
		n += len(p)
	}
	b := make([]byte, recHeader, recHeader+n)
	for _, p := range payload {
		b = append(b, p...)
	}
	binary.BigEndian.PutUint32(b[:4], uint32(n))
	binary.BigEndian.PutUint32(b[4:8], crc32.Checksum(b[recHeader:], crcTable))
	return b
}

// enqueueRecord builds the record of an item enqueued with state st and
// its data, and says where in the record the data starts.
func enqueueRecord(st []byte, data ...[]byte) ([]byte, int64) {
	head := binary.BigEndian.AppendUint32([]byte{'E'}, uint32(len(st)))
	return record(append([][]byte{head, st}, data...)...), recHeader + int64(len(head)+len(st))
}

// append writes rec at the end and returns the append's number, for commit.
// Call with j.mu held.
func (j *journal) appendLocked(rec []byte) (uint64, error) {
	if j.closed {
		return 0, errors.New("the queue journal is closed")
	}
	if j.err != nil {
		return 0, j.err
	}
	if _, err := j.f.WriteAt(rec, j.size); err != nil {
		// Whatever part reached the file is past j.size: the next append
		// overwrites it, and a restart cuts it as a partial record.
		return 0, fmt.Errorf("appending to the queue journal: %w", err)
	}
	j.size += int64(len(rec))
	j.written++
	return j.written, nil
}

// enqueue appends a new item with its message and its sent copy's data.
func (j *journal) enqueue(it *Item, data, cp []byte) (uint64, error) {
	st, err := json.Marshal(it)
	if err != nil {
		return 0, err
	}
	rec, at := enqueueRecord(st, data, cp)
	j.mu.Lock()
	defer j.mu.Unlock()
	start := j.size
	w, err := j.appendLocked(rec)
	if err != nil {
		return 0, err
	}
	l := loc{off: start + at, n: int64(len(data) + len(cp)), rec: start, recN: int64(len(rec))}
	j.data[it.ID] = l
	j.state[it.ID] = st
	j.live += int64(len(rec)) + recHeader + 8
	delete(j.announced, it.ID)
	return w, nil
}

// put appends an item's new state.
func (j *journal) put(it *Item) (uint64, error) {
	st, err := json.Marshal(it)
	if err != nil {
		return 0, err
	}
	rec := record([]byte{'S'}, st)
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.data[it.ID]; !ok {
		return 0, fmt.Errorf("queue journal: no item %s", it.ID)
	}
	w, err := j.appendLocked(rec)
	if err != nil {
		return 0, err
	}
	j.live += int64(len(st) - len(j.state[it.ID]))
	j.state[it.ID] = st
	j.maybeCompactLocked()
	return w, nil
}

// maybeCompactLocked rewrites the journal once it is mostly dead records. A
// rewrite that fails before its rename changes nothing: the journal goes on
// and a later append tries again.
func (j *journal) maybeCompactLocked() {
	if j.size > compactMin && j.live*4 < j.size {
		j.compactLocked()
	}
}

// announce appends that a settled item has been announced. It needs no
// fsync: losing it to a power loss only announces the item once more.
func (j *journal) announce(id string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.data[id]; !ok || j.announced[id] {
		return
	}
	if _, err := j.appendLocked(record([]byte{'A'}, []byte(id))); err != nil {
		return
	}
	j.announced[id] = true
}

// drop appends that an item is gone. It needs no fsync: an item whose drop
// is lost comes back settled and is announced again, which changes nothing.
func (j *journal) drop(id string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	l, ok := j.data[id]
	if !ok {
		return
	}
	if _, err := j.appendLocked(record([]byte{'D'}, []byte(id))); err != nil {
		return
	}
	j.live -= l.n + int64(len(j.state[id])) + 2*recHeader + 8
	delete(j.data, id)
	delete(j.state, id)
	delete(j.announced, id)
	j.maybeCompactLocked()
}

// commit returns once append w is durable, sharing fsyncs with concurrent
// callers: an fsync that began after the append covers it.
func (j *journal) commit(w uint64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for j.synced < w {
		if j.err != nil {
			return j.err
		}
		if j.syncing {
			j.cond.Wait()
			continue
		}
		j.syncing = true
		target, f := j.written, j.f
		j.mu.Unlock()
		err := j.fsync(f)
		j.mu.Lock()
		j.syncs++
		j.syncing = false
		if err != nil {
			// After a failed fsync the kernel may have dropped the dirty
			// pages: nothing written since the last good fsync can be
			// trusted, so stop until a restart replays what is on disk.
			j.err = fmt.Errorf("syncing the queue journal: %w", err)
		} else if target > j.synced {
			j.synced = target
		}
		j.cond.Broadcast()
	}
	return nil
}

// read returns an item's message, checked against its record's checksum.
func (j *journal) read(id string) ([]byte, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	l, ok := j.data[id]
	if !ok {
		return nil, fmt.Errorf("no message for %s in the queue journal", id)
	}
	if j.closed {
		return nil, errors.New("the queue journal is closed")
	}
	return readRecordData(j.f, l)
}

func readRecordData(f *os.File, l loc) ([]byte, error) {
	buf := make([]byte, l.recN)
	if _, err := f.ReadAt(buf, l.rec); err != nil {
		return nil, err
	}
	if crc32.Checksum(buf[recHeader:], crcTable) != binary.BigEndian.Uint32(buf[4:8]) {
		return nil, errors.New("the queued message fails its checksum")
	}
	return buf[l.off-l.rec : l.off-l.rec+l.n], nil
}

// compactLocked rewrites the journal with the live items only: a new file
// is written and synced, then renamed over the old one. Call with j.mu held.
func (j *journal) compactLocked() error {
	for j.syncing {
		j.cond.Wait()
	}
	tmp, err := os.CreateTemp(j.dir, safeio.TempPrefix+journalName+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	// A failed write is kept by w and returned by its Flush.
	w := bufio.NewWriterSize(tmp, 1<<16)
	off := int64(len(journalMagic))
	w.WriteString(journalMagic)
	locs := make(map[string]loc, len(j.data))
	var live int64
	for _, id := range slices.Sorted(maps.Keys(j.data)) {
		data, err := readRecordData(j.f, j.data[id])
		if err != nil {
			tmp.Close()
			return err
		}
		rec, at := enqueueRecord(j.state[id], data)
		w.Write(rec)
		locs[id] = loc{off: off + at, n: int64(len(data)), rec: off, recN: int64(len(rec))}
		off += int64(len(rec))
		if j.announced[id] {
			a := record([]byte{'A'}, []byte(id))
			w.Write(a)
			off += int64(len(a))
		}
		live += int64(len(rec)) + recHeader + 8
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := os.Rename(tmp.Name(), j.path); err != nil {
		tmp.Close()
		return err
	}
	// The new file has the name now: appends must go to it.
	j.f.Close()
	j.f, j.size, j.data, j.live = tmp, off, locs, live
	if err := safeio.SyncDir(j.dir); err != nil {
		j.err = fmt.Errorf("rewriting the queue journal: %w", err)
		j.cond.Broadcast()
		return j.err
	}
	// Everything appended so far is in the new file, synced.
	j.synced = j.written
	j.cond.Broadcast()
	return nil
}

// close closes the file; appends fail afterwards.
func (j *journal) close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for j.syncing {
		j.cond.Wait()
	}
	if j.closed {
		return nil
	}
	j.closed = true
	return j.f.Close()
}
