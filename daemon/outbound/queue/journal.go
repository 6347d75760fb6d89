package queue

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"sync"

	"github.com/mailctl/mailctl/internal/wal"
)

// The queue's state lives in one append-only journal (internal/wal): each
// change of an item is a record appended to it; a caller that needs the
// change durable commits it, sharing fsyncs with concurrent senders and
// attempts. The journal is rewritten with only the live items once most of
// it is dead.
//
// A record's payload's first byte says what it is:
//
//	'E' an item enqueued: a 4-byte length, the item's JSON, the signed
//	    message, then the data of its sent copy (copy_size bytes, if any)
//	'S' an item's new state: its JSON. Once an item is marked to be
//	    dropped (its "dropping" key, see Item.Dropping), every later
//	    state of it carries the mark, whichever append wrote it.
//	'A' an item settled and announced (its sent copy written, its
//	    after_send hooks run): its id. A restart only brings the sent copy
//	    up to date again, since that write may not have been durable.
//	'D' an item gone (settled, announced, and its sent copy durable): its id
//
// At start the records are replayed in order; wal cuts (and sets aside in
// corrupt/) a torn or damaged tail.
const (
	journalName  = "journal"
	journalMagic = "mailctl queue journal 1\n"
	// maxRecord bounds a record: the largest message plus its state.
	maxRecord = 1 << 30
	// compactMin is the journal size below which it is never rewritten.
	compactMin = 8 << 20
)

// loc is where an item's message is in the journal: n bytes at off in the
// payload of the record at rec, whose checksum covers them.
type loc struct {
	rec    wal.Loc
	off, n int64
}

type journal struct {
	log *wal.Log

	mu    sync.Mutex
	state map[string][]byte // each live item's latest state JSON
	// announced holds the live items that are settled and announced.
	announced map[string]bool
	// dropping holds the live items marked to be dropped: put keeps
	// the mark on their states.
	dropping map[string]bool
	data     map[string]loc // each live item's message
	live     int64          // bytes the live items would take rewritten
	closed   bool
}

// replayed is an item as the journal holds it at start.
type replayed struct {
	it        *Item
	loc       loc
	announced bool
}

// openJournal opens (creating) the journal in dir and replays it.
func openJournal(dir string, logf func(msg string, args ...any)) (*journal, map[string]replayed, error) {
	j := newJournal()
	items := map[string]replayed{}
	log, err := wal.Open(filepath.Join(dir, journalName), wal.Options{Magic: journalMagic, MaxRecord: maxRecord, Logf: logf,
		Refuse: func(f io.ReaderAt, size int64) error { return checkHeader(f, size, filepath.Join(dir, journalName)) }},
		func(p []byte, at wal.Loc) error { return j.apply(items, p, at) })
	if err != nil {
		return nil, nil, fmt.Errorf("opening the queue journal: %w", err)
	}
	j.log = log
	j.index(items)
	return j, items, nil
}

func newJournal() *journal {
	return &journal{state: map[string][]byte{}, data: map[string]loc{}, announced: map[string]bool{}, dropping: map[string]bool{}}
}

// index fills in the journal's view of the live items replayed: which are
// announced, where their messages are, and the bytes they would take
// rewritten.
func (j *journal) index(items map[string]replayed) {
	for id, x := range items {
		if x.announced {
			j.announced[id] = true
		}
		if x.it.Dropping {
			j.dropping[id] = true
		}
		j.data[id] = x.loc
		j.live += x.loc.n + int64(len(j.state[id])) + 2*wal.Header + 8
	}
}

// apply replays one record found at at.
func (j *journal) apply(items map[string]replayed, p []byte, at wal.Loc) error {
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
		l := loc{rec: at, off: 5 + n, n: int64(len(p)) - 5 - n}
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

// enqueuePayload is the payload of an item enqueued with state st and its
// data, and where in it the data starts.
func enqueuePayload(st []byte, data ...[]byte) ([][]byte, int64) {
	head := binary.BigEndian.AppendUint32([]byte{'E'}, uint32(len(st)))
	return append([][]byte{head, st}, data...), int64(len(head) + len(st))
}

// appendLocked appends a record and returns the append's number, for commit.
// Call with j.mu held.
func (j *journal) appendLocked(payload ...[]byte) (uint64, wal.Loc, error) {
	if j.closed {
		return 0, wal.Loc{}, errors.New("the queue journal is closed")
	}
	return j.log.Append(payload...)
}

// enqueue appends a new item with its message and its sent copy's data.
func (j *journal) enqueue(it *Item, data, cp []byte) (uint64, error) {
	st, err := json.Marshal(it)
	if err != nil {
		return 0, err
	}
	payload, off := enqueuePayload(st, data, cp)
	j.mu.Lock()
	defer j.mu.Unlock()
	w, at, err := j.appendLocked(payload...)
	if err != nil {
		return 0, err
	}
	j.data[it.ID] = loc{rec: at, off: off, n: int64(len(data) + len(cp))}
	j.state[it.ID] = st
	j.live += at.N + 2*wal.Header + 8
	delete(j.announced, it.ID)
	return w, nil
}

// put appends an item's new state, with the mark to drop it if it has one
// (markDropping).
func (j *journal) put(it *Item) (uint64, error) {
	st, err := json.Marshal(it)
	if err != nil {
		return 0, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.data[it.ID]; !ok {
		return 0, fmt.Errorf("queue journal: no item %s", it.ID)
	}
	if j.dropping[it.ID] && !it.Dropping {
		// A state taken before the mark (the attempt's, whose append
		// may come after it).
		c := *it
		c.Dropping = true
		if st, err = json.Marshal(&c); err != nil {
			return 0, err
		}
	}
	w, _, err := j.appendLocked([]byte{'S'}, st)
	if err != nil {
		return 0, err
	}
	j.live += int64(len(st) - len(j.state[it.ID]))
	j.state[it.ID] = st
	j.maybeCompactLocked()
	return w, nil
}

// markDropping appends the item's latest state marked to be dropped
// (Item.Dropping) and returns the append's number, for commit; ok is false
// when the journal holds no such item (dropped meanwhile) or it is marked
// already.
func (j *journal) markDropping(id string) (w uint64, ok bool, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, live := j.data[id]; !live || j.dropping[id] {
		return 0, false, nil
	}
	var it Item
	if err := json.Unmarshal(j.state[id], &it); err != nil {
		return 0, false, err
	}
	it.Dropping = true
	st, err := json.Marshal(&it)
	if err != nil {
		return 0, false, err
	}
	if w, _, err = j.appendLocked([]byte{'S'}, st); err != nil {
		return 0, false, err
	}
	j.live += int64(len(st) - len(j.state[id]))
	j.state[id] = st
	j.dropping[id] = true
	j.maybeCompactLocked()
	return w, true, nil
}

// maybeCompactLocked rewrites the journal once it is mostly dead records. A
// rewrite that fails before its rename changes nothing: the journal goes on
// and a later append tries again.
func (j *journal) maybeCompactLocked() {
	if size := j.log.Size(); size > compactMin && j.live*4 < size {
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
	if _, _, err := j.appendLocked([]byte{'A'}, []byte(id)); err != nil {
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
	if _, _, err := j.appendLocked([]byte{'D'}, []byte(id)); err != nil {
		return
	}
	j.live -= l.n + int64(len(j.state[id])) + 2*wal.Header + 8
	delete(j.data, id)
	delete(j.state, id)
	delete(j.announced, id)
	delete(j.dropping, id)
	j.maybeCompactLocked()
}

// commit returns once append w is durable, sharing fsyncs with concurrent
// callers.
func (j *journal) commit(w uint64) error { return j.log.Commit(w) }

// read returns an item's message, checked against its record's checksum.
func (j *journal) read(id string) ([]byte, error) {
	j.mu.Lock()
	l, ok := j.data[id]
	closed := j.closed
	j.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("no message for %s in the queue journal", id)
	}
	if closed {
		return nil, errors.New("the queue journal is closed")
	}
	return j.readLoc(l)
}

func (j *journal) readLoc(l loc) ([]byte, error) {
	p, err := j.log.Read(l.rec)
	if err != nil {
		return nil, fmt.Errorf("the queued message: %w", err)
	}
	return p[l.off : l.off+l.n], nil
}

// compactLocked rewrites the journal with the live items only. Call with
// j.mu held.
func (j *journal) compactLocked() error {
	locs := make(map[string]loc, len(j.data))
	var live int64
	err := j.log.Rewrite(func(w *wal.Writer) error {
		for _, id := range slices.Sorted(maps.Keys(j.data)) {
			l := j.data[id]
			p, err := w.Read(l.rec)
			if err != nil {
				return err
			}
			data := p[l.off : l.off+l.n]
			payload, off := enqueuePayload(j.state[id], data)
			at := w.Append(payload...)
			locs[id] = loc{rec: at, off: off, n: int64(len(data))}
			if j.announced[id] {
				w.Append([]byte{'A'}, []byte(id))
			}
			live += at.N + 2*wal.Header + 8
		}
		return nil
	})
	if err != nil {
		return err
	}
	j.data, j.live = locs, live
	return nil
}

// close closes the file; appends fail afterwards.
func (j *journal) close() error {
	j.mu.Lock()
	j.closed = true
	j.mu.Unlock()
	return j.log.Close()
}
