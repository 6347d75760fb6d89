// Package intake makes accepted inbound messages durable before they are
// answered, at the cost of about one shared fsync: each copy of a message is
// recorded in an append-only journal (internal/wal, the outbound queue's
// log file) with group commit, then written into its mailbox without an
// fsync; a checkpoint, once a second, makes everything written durable at
// once (syncfs) before the records of the written copies are dropped.
// After a crash the journal is replayed: every copy recorded and not known
// to be written is written again, under the id it was given, replacing
// whatever an interrupted write left. docs/security.md states what survives
// a power loss.
//
// The journal is a few segment files (journal.<n>): new records go to the
// active one; a checkpoint starts another and empties (truncates) each old
// one whose copies are all written and synced, to be reused. A message too
// large to hold in memory is written, as it arrives, to a spool file of its
// own (spool/<n>), made durable before its copies are recorded and removed
// once they are written and synced. Records:
//
//	'M' a copy recorded: a 4-byte length, its JSON (mrec), then the
//	    message's bytes when it was held in memory
//	'W' a copy written into its mailbox: its sequence number and the boot
//	    it was written in (after a reboot the files may be lost, so a 'W'
//	    from another boot is not trusted)
//	'X' a copy given up (its write failed; the client was told to retry)
//	'R' a copy to write again although written: the sync that was to make
//	    its files durable failed, so the page cache may have lost them
//
// 'W', 'X' and 'R' go to the segment of the copy's 'M', so that emptying a
// segment never leaves an 'M' without them.
package intake

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mailctl/mailctl/internal/crashpoint"
	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/internal/wal"
	"github.com/mailctl/mailctl/store"
)

const (
	magic     = magicPrefix + "1\n" // formats.InboundJournal
	segPrefix = "journal."
	spoolDir  = "spool"
	// maxRecord bounds a record: a message held in memory and its entry.
	maxRecord = 64 << 20
	// segmentBytes is the size past which a checkpoint starts a new
	// segment even when no copy was written since the last one.
	segmentBytes = 64 << 20
)

// Checkpoints run once a second while written copies wait for one, or at
// once when checkpointBatch wait.
const (
	checkpointEvery = time.Second
	checkpointBatch = 1024
)

// Entry is one copy of a message, for one mailbox's folder, as the journal
// records it: what is needed to write the copy again, the same.
type Entry struct {
	Mailbox string `json:"mailbox"`
	Folder  string `json:"folder"`
	ID      string `json:"id"` // the message's id in the folder
	// Msg is its frontmatter as known before the message is parsed (the
	// parse fills in the rest again).
	Msg store.Message `json:"msg"`
	// Prefix is written before the message in the raw copy (our
	// Authentication-Results header).
	Prefix string `json:"prefix"`
	// Key is the delivery's key (store.DeliveryKey) in hex, remembered
	// again when the copy is written again; "" for none.
	Key string `json:"key,omitempty"`
	// Identity is the identity of the mailbox the copy was delivered to
	// (store.MailboxIdentity), so that a copy is never written again into
	// a mailbox made later under the same name; "" for a record written
	// before identities were recorded.
	Identity string `json:"identity,omitempty"`
}

// mrec is the JSON of an 'M' record.
type mrec struct {
	Seq uint64 `json:"seq"`
	Entry
	// Spool names the spool file of a message too large to hold, whose
	// first Size bytes are the message; else the message's Size bytes
	// follow the JSON in the record.
	Spool string `json:"spool,omitempty"`
	Size  int64  `json:"size"`
}

// Options configure a Journal.
type Options struct {
	// Sync makes every file written so far durable: the store's Sync
	// (syncfs of its file system).
	Sync func() error
	// Logf reports what the replay found and what a checkpoint could not do.
	Logf func(msg string, args ...any)
	// Written, when set, is called by Open for each copy the journal
	// still holds that is known to be written (so not returned to write
	// again), oldest first: its files are there, but what the write did
	// after them and left to the next checkpoint's Sync (remembering the
	// delivery's key) may be lost with the process, and the caller does
	// it again.
	Written func(e Entry)
}

// Journal is the inbound journal of one daemon.
type Journal struct {
	dir  string
	o    Options
	boot string

	mu     sync.Mutex
	segs   map[int]*segment // by number
	active *segment
	spare  []*segment
	spools map[string]*Spool // spool files in use, by name
	// freeSpools are emptied spool files kept for reuse.
	freeSpools []string
	nextSeq    atomic.Uint64
	nextSpool  uint64
	written    []*Ticket // written copies waiting for a checkpoint
	closed     bool

	ckMu sync.Mutex // one checkpoint at a time
	kick chan struct{}
}

// segment is one journal file. refs counts the copies recorded in it that
// are not yet written and synced.
type segment struct {
	n    int
	log  *wal.Log
	refs int
}

// Pending is a copy the journal recorded before the daemon stopped and does
// not know to be written: the caller writes it again (store's
// ReplaceUnsynced), then calls Written.
type Pending struct {
	*Ticket
	Entry
	// Size is the message's size, without Entry.Prefix.
	Size int64
	read func() io.Reader
}

// Open reads the message from its start (without Entry.Prefix).
func (p *Pending) Open() io.Reader { return p.read() }

// Open opens (creating) the journal in dir and replays it. It returns the
// copies to write again, oldest first; the caller writes them before it
// takes new mail, then checkpoints.
func Open(dir string, o Options) (*Journal, []*Pending, error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if err := os.MkdirAll(filepath.Join(dir, spoolDir), 0o700); err != nil {
		return nil, nil, fmt.Errorf("inbound journal: %w", err)
	}
	j := &Journal{dir: dir, o: o, boot: bootID(), segs: map[int]*segment{}, spools: map[string]*Spool{},
		nextSpool: 1, kick: make(chan struct{}, 1)}
	j.nextSeq.Store(1)
	r := &replay{j: j, msgs: map[uint64]*replayed{}, done: map[uint64]bool{}, written: map[uint64]bool{}}
	names, err := filepath.Glob(filepath.Join(dir, segPrefix+"*"))
	if err != nil {
		return nil, nil, err
	}
	for _, name := range names {
		n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(name), segPrefix))
		if err != nil || n < 0 {
			continue
		}
		if err := r.segment(n, name); err != nil {
			j.closeAll()
			return nil, nil, err
		}
	}
	pending := r.pending()
	if o.Written != nil {
		for _, seq := range slices.Sorted(maps.Keys(r.msgs)) {
			if r.written[seq] {
				o.Written(r.msgs[seq].rec.Entry)
			}
		}
	}
	r.removeStraySpools()
	if err := j.newActive(); err != nil {
		j.closeAll()
		return nil, nil, err
	}
	return j, pending, nil
}

// bootID names this boot of the machine; "" when it cannot be read, and
// then no 'W' record is trusted.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// replay gathers the records of every segment.
type replay struct {
	j       *Journal
	msgs    map[uint64]*replayed
	done    map[uint64]bool // trusted 'W' and every 'X'
	written map[uint64]bool // trusted 'W' not undone by an 'R'
}

type replayed struct {
	rec  mrec
	seg  *segment
	at   wal.Loc // the 'M' payload
	data int64   // where its own bytes start in the payload
}

func (r *replay) segment(n int, path string) error {
	seg := &segment{n: n}
	log, err := wal.Open(path, wal.Options{Magic: magic, MaxRecord: maxRecord, Logf: r.j.o.Logf, Refuse: refuse(path)}, func(p []byte, at wal.Loc) error {
		return r.apply(seg, p, at)
	})
	if err != nil {
		return fmt.Errorf("inbound journal: %w", err)
	}
	seg.log = log
	r.j.segs[n] = seg
	return nil
}

func (r *replay) apply(seg *segment, p []byte, at wal.Loc) error {
	switch p[0] {
	case 'M':
		if len(p) < 5 {
			return errors.New("short message record")
		}
		n := int64(binary.BigEndian.Uint32(p[1:5]))
		if 5+n > int64(len(p)) {
			return errors.New("message record: entry longer than the record")
		}
		var rec mrec
		if err := json.Unmarshal(p[5:5+n], &rec); err != nil {
			return err
		}
		if inline := int64(len(p)) - 5 - n; rec.Spool == "" && inline != rec.Size {
			return fmt.Errorf("copy %d: %d bytes of message, the record says %d", rec.Seq, inline, rec.Size)
		}
		r.msgs[rec.Seq] = &replayed{rec: rec, seg: seg, at: at, data: 5 + n}
		if rec.Seq >= r.j.nextSeq.Load() {
			r.j.nextSeq.Store(rec.Seq + 1)
		}
	case 'W':
		if len(p) < 9 {
			return errors.New("short written record")
		}
		if boot := string(p[9:]); boot != "" && boot == r.j.boot {
			r.done[binary.BigEndian.Uint64(p[1:9])] = true
			r.written[binary.BigEndian.Uint64(p[1:9])] = true
		}
	case 'X':
		if len(p) < 9 {
			return errors.New("short given-up record")
		}
		r.done[binary.BigEndian.Uint64(p[1:9])] = true
	case 'R':
		if len(p) < 9 {
			return errors.New("short write-again record")
		}
		delete(r.done, binary.BigEndian.Uint64(p[1:9]))
		delete(r.written, binary.BigEndian.Uint64(p[1:9]))
	default:
		return fmt.Errorf("record kind %q", p[0])
	}
	return nil
}

// pending is the copies replayed that are not known to be written, oldest
// first, each holding its segment and spool.
func (r *replay) pending() []*Pending {
	var out []*Pending
	for _, seq := range slices.Sorted(maps.Keys(r.msgs)) {
		x := r.msgs[seq]
		if r.done[seq] {
			continue
		}
		t := &Ticket{j: r.j, seq: seq, seg: x.seg}
		x.seg.refs++
		p := &Pending{Ticket: t, Entry: x.rec.Entry, Size: x.rec.Size}
		if x.rec.Spool == "" {
			p.read = func() io.Reader { return io.NewSectionReader(x.seg.log, x.at.Off+x.data, x.at.N-x.data) }
		} else {
			sp, err := r.spool(x.rec.Spool, x.rec.Size)
			if err != nil {
				r.j.o.Logf("inbound journal: a recorded message's spool is unreadable: the copy is lost", "mailbox", x.rec.Mailbox, "id", x.rec.ID, "err", err)
				x.seg.refs--
				continue
			}
			t.spool = sp
			sp.refs++
			p.read = func() io.Reader { return bufio.NewReaderSize(io.NewSectionReader(sp.f, 0, x.rec.Size), 64<<10) }
		}
		out = append(out, p)
	}
	return out
}

// spool opens a replayed message's spool file, which must hold size bytes.
func (r *replay) spool(name string, size int64) (*Spool, error) {
	if sp := r.j.spools[name]; sp != nil {
		return sp, nil
	}
	if strings.ContainsAny(name, "/\x00") || name == "" || name[0] == '.' {
		return nil, fmt.Errorf("bad spool name %q", name)
	}
	f, st, err := safeio.OpenRegular(filepath.Join(r.j.dir, spoolDir, name), math.MaxInt64)
	if err != nil {
		return nil, err
	}
	if st.Size() < size {
		f.Close()
		return nil, fmt.Errorf("spool %s is shorter than the message it holds", name)
	}
	sp := &Spool{j: r.j, name: name, f: f, synced: true}
	r.j.spools[name] = sp
	return sp, nil
}

// removeStraySpools empties the spool files no pending copy needs (those
// of copies written, or of messages refused or cut off before they were
// recorded) and keeps maxFreeSpools of them for reuse.
func (r *replay) removeStraySpools() {
	dir := filepath.Join(r.j.dir, spoolDir)
	names, _ := os.ReadDir(dir)
	for _, e := range names {
		name := e.Name()
		if n, err := strconv.ParseUint(strings.TrimPrefix(name, freePrefix), 10, 64); err == nil {
			r.j.nextSpool = max(r.j.nextSpool, n+1)
		}
		if r.j.spools[name] != nil {
			continue
		}
		if len(r.j.freeSpools) < maxFreeSpools && emptyRegular(filepath.Join(dir, name)) == nil {
			free := name
			if !strings.HasPrefix(name, freePrefix) {
				free = freePrefix + name
				if os.Rename(filepath.Join(dir, name), filepath.Join(dir, free)) != nil {
					os.Remove(filepath.Join(dir, name))
					continue
				}
			}
			r.j.freeSpools = append(r.j.freeSpools, free)
			continue
		}
		os.Remove(filepath.Join(dir, name))
	}
}

// emptyRegular truncates the spool file at path, opened without following
// a symbolic link or waiting on a FIFO: what is no regular file is left
// for removal, its link's target untouched.
func emptyRegular(path string) error {
	f, err := safeio.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	err = f.Truncate(0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// newActive makes an empty segment the active one: a spare, or an empty one
// found at open, or a new file. Call with j.mu held (or before the journal
// is shared).
func (j *Journal) newActive() error {
	if n := len(j.spare); n > 0 {
		j.active, j.spare = j.spare[n-1], j.spare[:n-1]
		return nil
	}
	for _, n := range slices.Sorted(maps.Keys(j.segs)) {
		if s := j.segs[n]; s != j.active && s.refs == 0 && s.log.Empty() {
			j.active = s
			return nil
		}
	}
	n := 0
	for j.segs[n] != nil {
		n++
	}
	log, err := wal.Open(filepath.Join(j.dir, segPrefix+strconv.Itoa(n)), wal.Options{Magic: magic, MaxRecord: maxRecord, Logf: j.o.Logf,
		Refuse: refuse(filepath.Join(j.dir, segPrefix+strconv.Itoa(n)))},
		func([]byte, wal.Loc) error { return errors.New("a new segment is not empty") })
	if err != nil {
		return fmt.Errorf("inbound journal: %w", err)
	}
	seg := &segment{n: n, log: log}
	j.segs[n] = seg
	j.active = seg
	return nil
}

// Ticket is one copy recorded, until it is written and synced, or given up.
type Ticket struct {
	j     *Journal
	seq   uint64
	seg   *segment // where its 'M' is
	spool *Spool   // its message, when spooled
	done  bool
}

// releaseLocked lets the ticket's segment be emptied and its spool go.
// Call with j.mu held.
func (t *Ticket) releaseLocked() {
	if t.seg != nil {
		t.seg.refs--
		t.seg = nil
	}
	if t.spool != nil {
		t.spool.unrefLocked()
		t.spool = nil
	}
}

// Add records entry e, whose message is data (held in memory) or, when sp
// is not nil, sp's bytes, and returns once the record is durable: the fsync
// is shared with concurrent Adds.
func (j *Journal) Add(e *Entry, data []byte, sp *Spool) (*Ticket, error) {
	rec := mrec{Entry: *e, Size: int64(len(data))}
	if sp != nil {
		// The spool first: its bytes and its name.
		if err := sp.sync(); err != nil {
			return nil, err
		}
		rec.Spool, rec.Size, data = sp.name, sp.size, nil
	}
	rec.Seq = j.nextSeq.Add(1) - 1
	js, err := json.Marshal(&rec)
	if err != nil {
		return nil, err
	}
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil, errors.New("the inbound journal is closed")
	}
	seg := j.active
	w, _, err := seg.log.Append(binary.BigEndian.AppendUint32([]byte{'M'}, uint32(len(js))), js, data)
	if err != nil {
		j.mu.Unlock()
		return nil, err
	}
	t := &Ticket{j: j, seq: rec.Seq, seg: seg}
	seg.refs++
	if sp != nil {
		t.spool = sp
		sp.refs++
	}
	j.mu.Unlock()
	crashpoint.Hit("intake-appended")
	if err := seg.log.Commit(w); err != nil {
		t.Abandon()
		return nil, err
	}
	return t, nil
}

// mark appends a 'W' or 'X' record of the ticket to its own segment. Call
// with j.mu held.
func (t *Ticket) markLocked(kind byte, extra string) {
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], t.seq)
	// A lost mark only makes a restart write the copy again.
	_, _, _ = t.seg.log.Append([]byte{kind}, seq[:], []byte(extra))
}

// Written records that the copy's files are written (no fsync: after a
// crash its 'W' is trusted only if the machine did not restart). The next
// checkpoint makes them durable and lets the record go.
func (t *Ticket) Written() {
	j := t.j
	j.mu.Lock()
	if t.done || j.closed {
		j.mu.Unlock()
		return
	}
	t.done = true
	t.markLocked('W', j.boot)
	j.written = append(j.written, t)
	n := len(j.written)
	j.mu.Unlock()
	if n >= checkpointBatch {
		j.Kick()
	}
}

// Abandon records that the copy will not be written (its write failed and
// the client was told to try again) and lets the record go.
func (t *Ticket) Abandon() {
	j := t.j
	j.mu.Lock()
	defer j.mu.Unlock()
	if t.done || j.closed {
		return
	}
	t.done = true
	t.markLocked('X', "")
	t.releaseLocked()
}

// Kick asks Run for a checkpoint now.
func (j *Journal) Kick() {
	select {
	case j.kick <- struct{}{}:
	default:
	}
}

// Run checkpoints once a second while written copies wait for it, and when
// kicked, until ctx ends.
func (j *Journal) Run(ctx context.Context) {
	tick := time.NewTicker(checkpointEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-j.kick:
		}
		if err := j.Checkpoint(); err != nil {
			j.o.Logf("inbound checkpoint failed; the written messages stay in the journal", "err", err)
		}
	}
}

// Checkpoint makes the copies written so far durable (Options.Sync) and
// lets their records go: a new segment takes the appends, and each old one
// no longer holding a copy to write is emptied for reuse. It does nothing
// when nothing waits.
func (j *Journal) Checkpoint() error {
	j.ckMu.Lock()
	defer j.ckMu.Unlock()
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	done := j.written
	j.written = nil
	if len(done) == 0 && j.active.log.Size() < segmentBytes && len(j.emptiableLocked()) == 0 {
		j.mu.Unlock()
		return nil
	}
	if !j.active.log.Empty() {
		if err := j.newActive(); err != nil {
			j.written = append(done, j.written...)
			j.mu.Unlock()
			return err
		}
	}
	j.mu.Unlock()
	// Every copy in done was written before this: syncfs covers it.
	if err := j.o.Sync(); err != nil {
		// After a failed sync the kernel may have dropped what it could
		// not write: a restart must write these copies again, even in
		// this boot. They wait for a checkpoint whose sync succeeds.
		j.mu.Lock()
		for _, t := range done {
			t.markLocked('R', "")
		}
		j.written = append(done, j.written...)
		j.mu.Unlock()
		return err
	}
	crashpoint.Hit("intake-synced")
	j.mu.Lock()
	for _, t := range done {
		t.releaseLocked()
	}
	free := j.emptiableLocked()
	j.mu.Unlock()
	for _, s := range free {
		// Emptied durably: a record it held must never be replayed after
		// the copy was changed or removed.
		if err := s.log.Reset(); err != nil {
			return err
		}
		j.mu.Lock()
		if s.refs == 0 && s != j.active {
			j.spare = append(j.spare, s)
		}
		j.mu.Unlock()
	}
	return nil
}

// emptiableLocked is the old segments that hold no copy to write any more
// and are not yet emptied, in order. Call with j.mu held.
func (j *Journal) emptiableLocked() []*segment {
	var out []*segment
	for _, n := range slices.Sorted(maps.Keys(j.segs)) {
		s := j.segs[n]
		if s != j.active && s.refs == 0 && !slices.Contains(j.spare, s) && !s.log.Empty() {
			out = append(out, s)
		}
	}
	return out
}

// Close closes the segments and spools. Records and spools still in use are
// kept for the next start.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil
	}
	j.closed = true
	for _, sp := range j.spools {
		sp.f.Close()
	}
	return j.closeAll()
}

func (j *Journal) closeAll() error {
	var errs []error
	for _, s := range j.segs {
		errs = append(errs, s.log.Close())
	}
	return errors.Join(errs...)
}

// Stats is what the journal holds, for tests and the benchmark.
type Stats struct {
	Segments, Spare, Spools int
	Syncs                   int // fsyncs of the records' commits
}

// Stats says what the journal holds.
func (j *Journal) Stats() Stats {
	j.mu.Lock()
	defer j.mu.Unlock()
	st := Stats{Segments: len(j.segs), Spare: len(j.spare), Spools: len(j.spools)}
	for _, s := range j.segs {
		st.Syncs += s.log.Syncs()
	}
	return st
}

// magicPrefix is the first line of a segment before its version.
const magicPrefix = "mailctl inbound journal "

// refuse stops the journal from opening a segment a later release wrote
// (or one whose version is damaged) instead of setting it aside with the
// copies it holds: the error names both versions and what to run.
func refuse(path string) func(f io.ReaderAt, size int64) error {
	return func(f io.ReaderAt, size int64) error {
		return formats.CheckFirstLine(f, size, magicPrefix, formats.InboundJournal, "the inbound journal", path)
	}
}
