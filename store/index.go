package store

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"hash/maphash"
	"maps"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"golang.org/x/sys/unix"
)

// The index is a cache of the summaries of one folder's messages, so that
// listing never parses every file. The owner may add, remove or edit files at
// any time, so it is re-synced when the folder's mtime changes and the rows it
// returns are re-validated with fstatat. File systems stamp times with a coarse
// clock, so a change made within racyWindow of a sync may carry the same
// mtime as what was seen: such "racy" directories and files are re-checked
// until they have been quiet for longer than the window. (A variable for
// tests that need a folder at rest at once.)
var racyWindow = time.Second

// snippetLen is the number of characters of body kept per message.
const snippetLen = 160

// MaxMessageFile bounds the size of a message's .md file that the store reads.
var MaxMessageFile int64 = 64 << 20

// entry is what the index keeps in memory of one message: enough to order,
// count and pre-select rows. The row itself (sender, subject, snippet...) is
// in the folder's index file at off, or in sum when it could not be written
// there.
type entry struct {
	id       string
	sortKey  int64    // ReceivedAt (or Date) in Unix nanoseconds
	stamp    uint64   // hash of the file's fileStamp
	mid, tid uint64   // hashes of the Message-ID and the thread id
	off      int64    // offset of the row's record in the index file
	sum      *Summary // the row, when it is not in the index file
	read     bool
	trusted  bool
	starred  bool
	racy     bool
}

// fileStamp identifies a version of a file without reading it. An atomic
// replace changes the inode, an in-place edit the size, mtime or ctime.
type fileStamp struct {
	ino   uint64
	size  int64
	mtime int64
	ctime int64
}

// hash condenses a stamp for the in-memory index, which only compares them.
func (st fileStamp) hash() uint64 {
	var b [32]byte
	binary.LittleEndian.PutUint64(b[0:], st.ino)
	binary.LittleEndian.PutUint64(b[8:], uint64(st.size))
	binary.LittleEndian.PutUint64(b[16:], uint64(st.mtime))
	binary.LittleEndian.PutUint64(b[24:], uint64(st.ctime))
	return maphash.Bytes(hashSeed, b[:])
}

func stampOf(st *unix.Stat_t) fileStamp {
	return fileStamp{ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}

// racy reports whether the stamp, read at now, could hide a later change
// with the same timestamps.
func (st fileStamp) racy(now time.Time) bool {
	return now.Sub(time.Unix(0, st.mtime)) < racyWindow || now.Sub(time.Unix(0, st.ctime)) < racyWindow
}

// folderIndex is the index of one folder of one mailbox. mu also serializes
// the store's own read-modify-write operations in the folder.
type folderIndex struct {
	mu       sync.Mutex
	loaded   bool
	dirStamp fileStamp
	dirRacy  bool
	entries  map[string]*entry        // by id
	sorted   []*entry                 // newest first; nil when it must be rebuilt
	reserved map[string]string        // ids being delivered -> their Message-ID
	creating map[string]chan struct{} // ids CreateUnsynced is writing; closed when done
	cleaned  bool
	dirSync  groupSync // shared directory fsyncs of concurrent deliveries

	folder   string
	log      *indexLog // the folder's index file; nil: rows stay in memory
	logTried bool      // the index file was opened (or could not be)
	uid, gid int       // the owner, for the index file

	// version changes with every change to entries; totals holds the
	// number of rows that matched filters that need no row (flags, dates)
	// at a version, so that a page of such a listing stops at its window.
	version uint64
	totals  map[totalKey]totalAt

	// For the store's bound on what is held in memory.
	held    atomic.Int64 // entries held
	lastUse atomic.Int64
	total   *atomic.Int64 // the store's sum of held
}

func newFolderIndex(folder string, total *atomic.Int64) *folderIndex {
	return &folderIndex{folder: folder, entries: map[string]*entry{}, reserved: map[string]string{}, creating: map[string]chan struct{}{}, total: total}
}

// count publishes how many entries the index holds.
func (fi *folderIndex) count() {
	fi.version++
	n := int64(len(fi.entries))
	if old := fi.held.Swap(n); old != n && fi.total != nil {
		fi.total.Add(n - old)
	}
}

// openLog reads the folder's index file back, if the index holds nothing
// yet: the rows it logged become entries, and a logged scan whose stamp the
// folder still has spares the next sync from looking at every file.
func (fi *folderIndex) openLog(mb *mailbox) {
	fi.logTried = true
	fi.uid, fi.gid = mb.uid, mb.gid
	var scan *scanRec
	l := openIndexLog(mb.dir, indexFile(fi.folder), mb.uid, mb.gid, func(e *entry) {
		fi.entries[e.id] = e
	}, func(s scanRec) {
		scan = &s
	})
	fi.log = l
	fi.sorted = nil
	if l != nil && scan != nil {
		fi.loaded = true
		fi.dirStamp, fi.dirRacy = scan.stamp, scan.racy
	}
	fi.count()
}

// drop forgets everything the index holds in memory and closes its file;
// the next use reads the file back.
func (fi *folderIndex) drop() {
	fi.log.close()
	fi.log, fi.logTried, fi.loaded = nil, false, false
	fi.entries = map[string]*entry{}
	fi.sorted = nil
	fi.count()
}

// rebuild throws the index file away (it no longer says what the store
// wrote) and the index with it: the next sync parses the folder anew.
func (fi *folderIndex) rebuild(mb *mailbox) {
	if fi.log != nil {
		unix.Unlinkat(mb.dir.fd, indexFile(fi.folder), 0)
	}
	fi.drop()
}

// summary returns the row of e.
func (fi *folderIndex) summary(e *entry) (Summary, error) {
	if e.sum != nil {
		return *e.sum, nil
	}
	if fi.log == nil {
		return Summary{}, errIndexStale
	}
	return fi.log.readSummary(e)
}

// sync brings the index up to date with the directory d of mailbox mb. It
// reads only files whose stamp changed.
func (fi *folderIndex) sync(d *Dir, mb *mailbox) error {
	if !fi.loaded && !fi.logTried {
		fi.openLog(mb)
	}
	dst, err := d.Stat()
	if err != nil {
		return err
	}
	stamp := stampOf(&dst)
	if fi.loaded && stamp == fi.dirStamp && !fi.dirRacy {
		return nil
	}
	if !fi.cleaned {
		CleanTemps(d)
		cleanOrphans(d)
		fi.cleaned = true
	}
	names, err := d.Names()
	if err != nil {
		return err
	}
	now := time.Now()
	seen := make(map[string]bool, len(names))
	var load []string
	for _, name := range names {
		id, ok := mdID(name)
		if !ok {
			continue
		}
		seen[id] = true
		if l, _ := fi.check(d, id); l {
			load = append(load, id)
		}
	}
	for i, r := range loadEntries(d, load, mb.uid, now) {
		fi.apply(load[i], r)
	}
	for id := range fi.entries {
		if !seen[id] {
			delete(fi.entries, id)
			fi.sorted = nil
		}
	}
	fi.loaded = true
	fi.dirStamp = stamp
	fi.dirRacy = stamp.racy(now)
	if fi.log != nil {
		fi.log.append(encodeScan(scanRec{stamp: fi.dirStamp, racy: fi.dirRacy}))
	}
	fi.maybeCompact(mb)
	fi.count()
	return nil
}

// mdID returns the id of a message file name, or false for names that are not
// messages (temporary files, other extensions, ids the store would refuse).
func mdID(name string) (string, bool) {
	id, ok := strings.CutSuffix(name, ".md")
	if !ok || ValidID(id) != nil {
		return "", false
	}
	return id, true
}

// refresh re-reads id if its file changed since it was indexed and reports
// whether the index changed.
func (fi *folderIndex) refresh(d *Dir, id string, uid int, now time.Time) bool {
	load, changed := fi.check(d, id)
	if !load {
		return changed
	}
	return fi.apply(id, loadEntry(d, id, uid, now))
}

// check reports whether the file of id must be (re)loaded. An entry whose
// file is gone or is no longer a regular file is dropped (changed is true).
func (fi *folderIndex) check(d *Dir, id string) (load, changed bool) {
	e := fi.entries[id]
	st, err := d.Lstat(id + ".md")
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		if e != nil {
			fi.remove(id)
		}
		return false, e != nil
	}
	return e == nil || e.stamp != stampOf(&st).hash() || e.racy, false
}

// apply stores the result of loading id and reports whether the index
// changed.
func (fi *folderIndex) apply(id string, r loadResult) bool {
	e := fi.entries[id]
	if r.err != nil {
		// Unparsable or foreign files are not messages. The error can
		// quote file contents, so it is not logged.
		if e != nil {
			fi.remove(id)
		}
		return e != nil
	}
	changed := true
	if e != nil && e.sortKey == r.e.sortKey {
		if old, err := fi.summary(e); err == nil {
			changed = !summaryEqual(&old, r.e.sum)
		}
	}
	fi.put(r.e, r.st)
	return changed
}

type loadResult struct {
	e   *entry
	st  fileStamp
	err error
}

// loadEntries loads many files, in parallel when there are many: a first
// listing of a large folder is bound by parsing and by I/O latency.
func loadEntries(d *Dir, ids []string, uid int, now time.Time) []loadResult {
	out := make([]loadResult, len(ids))
	workers := min(2*runtime.GOMAXPROCS(0), 8)
	if len(ids) < 64 {
		workers = 1
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(ids) {
					return
				}
				out[i] = loadEntry(d, ids[i], uid, now)
			}
		}()
	}
	wg.Wait()
	return out
}

// put installs e, whose row is in e.sum and whose file has stamp st. The row
// goes to the index file when there is one, and leaves memory.
func (fi *folderIndex) put(e *entry, st fileStamp) {
	if fi.log != nil && e.sum != nil {
		if off, err := fi.log.append(encodePut(e, st, e.sum)); err == nil {
			e.off, e.sum = off, nil
		}
	}
	old := fi.entries[e.id]
	if old == nil || old.sortKey != e.sortKey {
		fi.sorted = nil
	} else if fi.sorted != nil {
		// Same place in the order: swap the row in place.
		if i, ok := slices.BinarySearchFunc(fi.sorted, old, less); ok && fi.sorted[i] == old {
			fi.sorted[i] = e
		} else {
			fi.sorted = nil
		}
	}
	fi.entries[e.id] = e
	fi.version++
}

func (fi *folderIndex) remove(id string) {
	fi.version++
	if _, ok := fi.entries[id]; ok {
		delete(fi.entries, id)
		fi.sorted = nil
	}
}

// maybeCompact rewrites the index file when most of its records are
// superseded rows and scans.
func (fi *folderIndex) maybeCompact(mb *mailbox) {
	if fi.log == nil || fi.log.records <= 2*len(fi.entries)+1024 {
		return
	}
	// On failure the old file still serves; a later sync tries again.
	fi.compact(mb.dir)
}

// compact writes the live rows to a new index file and puts it in place of
// the old one. Rows the old file no longer holds as written make it fail.
func (fi *folderIndex) compact(d *Dir) error {
	tmp, fd, err := d.createTemp(unix.O_RDWR)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), d.join(tmp))
	ok := false
	defer func() {
		if !ok {
			f.Close()
			unix.Unlinkat(d.fd, tmp, 0)
		}
	}()
	if (fi.uid >= 0 || fi.gid >= 0) && f.Chown(fi.uid, fi.gid) != nil {
		return errIndexStale
	}
	w := bufio.NewWriterSize(f, 1<<20)
	w.Write(indexMagic[:])
	pos := int64(len(indexMagic))
	offs := make(map[*entry]int64, len(fi.entries))
	for _, e := range fi.order() {
		if e.sum != nil {
			continue
		}
		rec, err := fi.log.readRecord(e.off)
		if err != nil {
			return err
		}
		if _, err := w.Write(frame(rec)); err != nil {
			return err
		}
		offs[e] = pos
		pos += 8 + int64(len(rec))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := unix.Renameat(d.fd, tmp, d.fd, indexFile(fi.folder)); err != nil {
		return err
	}
	ok = true
	fi.log.close()
	fi.log = &indexLog{f: f, end: pos, records: len(offs)}
	for e, off := range offs {
		e.off = off
	}
	return nil
}

// filesParsed counts the message files the index has parsed, for tests and
// benchmarks that show what the index file spares.
var filesParsed atomic.Int64

// indexHead is how much of a message file the index reads when the
// frontmatter and the start of the body fit in it.
const indexHead = 64 << 10

// hasFrontmatter reports whether a file's head holds its whole frontmatter
// and enough of the body for a snippet.
func hasFrontmatter(head []byte) bool {
	_, body, err := split(head)
	return err == nil && len(body) >= 4*snippetLen
}

// loadEntry reads and parses one message file of d (its head if that is
// enough: a cut body still makes the same snippet).
func loadEntry(d *Dir, id string, uid int, now time.Time) loadResult {
	data, st, err := d.readFileHead(id+".md", MaxMessageFile, indexHead, hasFrontmatter)
	if err != nil {
		return loadResult{err: err}
	}
	if err := checkOwner(&st, uid); err != nil {
		return loadResult{err: err}
	}
	filesParsed.Add(1)
	m, body, err := parseForIndex(data)
	if err != nil {
		return loadResult{err: err}
	}
	stamp := stampOf(&st)
	return loadResult{newEntry(id, m, body, stamp, stamp.racy(now)), stamp, nil}
}

// errForeign is returned for a file in a mailbox that its owner does not own:
// the owner may have hard-linked a file it can read but must not see through
// the daemon (or that the daemon must not change).
var errForeign = errors.New("file is not owned by the mailbox owner")

// Times outside what Unix nanoseconds can hold (before 1678, after 2262).
var (
	minNanoTime = time.Unix(0, math.MinInt64)
	maxNanoTime = time.Unix(0, math.MaxInt64)
)

// UnixNano is t in Unix nanoseconds, clamped to what an int64 holds.
// time.Time.UnixNano wraps around outside 1678-2262, so a hand-edited date
// of the year 1, or a "before" of the year 1000, would sort or compare as
// some date in between (and "purge before 1000" would purge everything);
// clamped, such a date sorts first or last. Every sort key and every bound
// compared with one goes through it.
func UnixNano(t time.Time) int64 {
	switch {
	case t.Before(minNanoTime):
		return math.MinInt64
	case t.After(maxNanoTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}

func checkOwner(st *unix.Stat_t, uid int) error {
	if uid >= 0 && int(st.Uid) != uid {
		return errForeign
	}
	return nil
}

// newEntry builds the index row of a message stored under id, in a file
// with stamp st. The id is the file name, whatever the frontmatter says.
func newEntry(id string, m *Message, body string, st fileStamp, racy bool) *entry {
	t := m.ReceivedAt
	if t.IsZero() {
		t = m.Date
	}
	// Clones: the decoder's strings may share the memory of the whole
	// file, which the index must not keep alive.
	sum := &Summary{
		ID:             strings.Clone(id),
		MessageID:      strings.Clone(m.MessageID),
		ThreadID:       strings.Clone(m.ThreadID),
		From:           strings.Clone(m.From),
		To:             cloneStrings(m.To),
		Subject:        strings.Clone(m.Subject),
		Date:           m.Date,
		ReceivedAt:     m.ReceivedAt,
		Read:           m.Read,
		Trusted:        strings.Clone(m.Trusted),
		Attachments:    len(m.Attachments),
		Snippet:        Snippet(body, snippetLen),
		DeliveryStatus: strings.Clone(m.DeliveryStatus),
		Labels:         cloneStrings(m.Labels),
		Starred:        m.Starred,
	}
	return &entry{
		id:      sum.ID,
		sortKey: UnixNano(t),
		stamp:   st.hash(),
		racy:    racy,
		mid:     hashString(sum.MessageID),
		tid:     hashString(sum.ThreadID),
		read:    sum.Read,
		starred: sum.Starred,
		trusted: sum.Trusted == TrustedValue,
		sum:     sum,
	}
}

func cloneStrings(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = strings.Clone(v)
	}
	return out
}

func summaryEqual(a, b *Summary) bool {
	return a.ID == b.ID && a.MessageID == b.MessageID && a.ThreadID == b.ThreadID && a.From == b.From &&
		slices.Equal(a.To, b.To) && a.Subject == b.Subject && a.Date.Equal(b.Date) &&
		a.ReceivedAt.Equal(b.ReceivedAt) && a.Read == b.Read && a.Trusted == b.Trusted &&
		a.Attachments == b.Attachments && a.Snippet == b.Snippet &&
		a.DeliveryStatus == b.DeliveryStatus && slices.Equal(a.Labels, b.Labels) && a.Starred == b.Starred
}

// Snippet returns the first n characters of body with runs of white space
// collapsed to one space. It stops reading once it has them, so a 10 MB body
// costs no more than a short one.
func Snippet(body string, n int) string {
	var b strings.Builder
	count := 0
	space := false
	for _, r := range body {
		if unicode.IsSpace(r) || r == 0 {
			space = b.Len() > 0
			continue
		}
		if count >= n {
			break
		}
		if space {
			b.WriteByte(' ')
			count++
			space = false
			if count >= n {
				break
			}
		}
		b.WriteRune(r)
		count++
	}
	return b.String()
}

// less orders newest first: by time, then by id.
func less(a, b *entry) int {
	if c := cmp.Compare(b.sortKey, a.sortKey); c != 0 {
		return c
	}
	return strings.Compare(b.id, a.id)
}

func (fi *folderIndex) order() []*entry {
	if fi.sorted == nil {
		fi.sorted = slices.SortedFunc(maps.Values(fi.entries), less)
	}
	return fi.sorted
}

// list syncs the index with d, computes the page and re-validates its rows,
// recomputing when a row turned out to be stale. An index file that no
// longer reads back as written is rebuilt from the folder.
func (fi *folderIndex) list(d *Dir, mb *mailbox, folder string, q Query) (p Page, err error) {
	err = fi.synced(d, mb, func() error {
		for attempt := 0; ; attempt++ {
			var rows []*entry
			p, rows, err = fi.page(q, folder)
			if err != nil || attempt == 3 {
				return err
			}
			changed := false
			now := time.Now()
			for _, e := range rows {
				if fi.refresh(d, e.id, mb.uid, now) {
					changed = true
				}
			}
			if !changed {
				return nil
			}
		}
	})
	return p, err
}

// synced runs fn with the index synced with d. When the index file no
// longer reads back as written, the index is rebuilt from the folder and fn
// runs once more.
func (fi *folderIndex) synced(d *Dir, mb *mailbox, fn func() error) error {
	for try := 0; ; try++ {
		err := fi.sync(d, mb)
		if err == nil {
			err = fn()
		}
		if try > 0 || !errors.Is(err, errIndexStale) {
			return err
		}
		fi.rebuild(mb)
	}
}

// findMessageID returns the newest message with the Message-ID, or one
// being delivered.
func (fi *folderIndex) findMessageID(messageID string) (string, bool, error) {
	for id, mid := range fi.reserved {
		if mid == messageID {
			return id, true, nil
		}
	}
	h := hashString(messageID)
	for _, e := range fi.order() {
		if e.mid != h {
			continue
		}
		s, err := fi.summary(e)
		if err != nil {
			return "", false, err
		}
		if s.MessageID == messageID {
			return e.id, true, nil
		}
	}
	return "", false, nil
}

// entryAfterWrite indexes a message the store just wrote, when the index
// is loaded (otherwise its next sync reads the file).
func (fi *folderIndex) entryAfterWrite(mb *mailbox, d *Dir, id string, m *Message, body string) {
	if !fi.loaded {
		return
	}
	st, err := d.Lstat(id + ".md")
	if err != nil {
		fi.remove(id)
		fi.count()
		return
	}
	stamp := stampOf(&st)
	fi.put(newEntry(id, m, body, stamp, true), stamp)
	fi.maybeCompact(mb)
	fi.count()
}

// TrustedValue is how the frontmatter spells the verdict protocol.Trusted;
// the store keeps the verdict as the text it reads (it imports no protocol
// types) and the daemon's TestVerdictSpelling holds the two together.
const TrustedValue = "true"
