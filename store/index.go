package store

import (
	"database/sql"
	"errors"
	"fmt"
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

// The index holds a row per message (what a listing shows and what a query
// filters on, with the file's stamp) and its full text, in the index
// database (indexdb.go). The owner may add, remove or edit files at any
// time, so a folder is scanned again when its directory's stamp changes, and
// the rows a listing returns are checked with fstatat. File systems stamp
// times with a coarse clock, so a change made within racyWindow of a scan
// may carry the same mtime as what was seen: such "racy" directories and
// files are checked again until they have been quiet for longer than the
// window. (A variable for tests that need a folder at rest at once.)
var racyWindow = time.Second

// snippetLen is the number of characters of body kept per message.
const snippetLen = 160

// MaxMessageFile bounds the size of a message's .md file that the store reads.
var MaxMessageFile int64 = 64 << 20

// maxIndexedBody bounds how much of a body the full-text index holds; the
// rest of a longer body is not searchable. (Past orderedBody it holds the
// body's words but not their order: bodyText.)
const maxIndexedBody = 1 << 20

// indexHead is how much of a message file a scan reads when the frontmatter
// fits in it: the body beyond maxIndexedBody is not indexed.
const indexHead = maxIndexedBody + 64<<10

// fileStamp identifies a version of a file without reading it. An atomic
// replace changes the inode, an in-place edit the size, mtime or ctime.
type fileStamp struct {
	ino   uint64
	size  int64
	mtime int64
	ctime int64
}

func stampOf(st *unix.Stat_t) fileStamp {
	return fileStamp{ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}

// racy reports whether the stamp, read at now, could hide a later change
// with the same timestamps.
func (st fileStamp) racy(now time.Time) bool {
	return now.Sub(time.Unix(0, st.mtime)) < racyWindow || now.Sub(time.Unix(0, st.ctime)) < racyWindow
}

// folderIndex is the store's handle on one folder of one mailbox: the lock
// that serializes the store's read-modify-write operations in it, the ids
// being written, and what the index database said of the folder when last
// asked. It holds nothing per message.
type folderIndex struct {
	mu       sync.Mutex
	x        *indexDB
	mailbox  string
	folder   string
	loaded   bool                     // attached to the database and scanned once in this process
	reserved map[string]string        // ids being delivered -> their Message-ID
	creating map[string]chan struct{} // ids CreateUnsynced is writing; closed when done
	cleaned  bool
	dirSync  groupSync // shared directory fsyncs of concurrent deliveries
	// nextN is, per id base allocated lately, the suffix after the last
	// one given: messages with one subject in one second take base,
	// base-2, base-3... and each new one starts looking there instead of at
	// base (which would cost a look at every earlier one's files).
	nextN map[string]int

	gen      uint64 // the database generation row belongs to
	row      folderRow
	attached bool

	// building is closed when IndexAll has read the folder's files into
	// the index, and read counts them; nil when it is not reading them. A
	// listing meanwhile waits for it a while (buildWait), then answers
	// ErrIndexing rather than wait for the whole folder.
	building atomic.Pointer[chan struct{}]
	read     atomic.Int64
	inAll    bool // the sync is IndexAll's (set with mu held)
}

// buildWait is how long a listing waits for IndexAll to finish reading its
// folder before it answers ErrIndexing: well within a request's deadline.
var buildWait = 10 * time.Second

// claim marks the folder as being built by the caller, unless someone is
// building it already; release ends the caller's mark.
func (fi *folderIndex) claim() (chan struct{}, bool) {
	built := make(chan struct{})
	if !fi.building.CompareAndSwap(nil, &built) {
		return nil, false
	}
	fi.read.Store(0)
	return built, true
}

func (fi *folderIndex) release(built chan struct{}) {
	fi.building.Store(nil)
	close(built)
}

// waitBuilt waits, at most buildWait, for IndexAll to finish reading the
// folder's files, and reports whether it has (or was not reading them).
func (fi *folderIndex) waitBuilt() bool {
	ch := fi.building.Load()
	if ch == nil {
		return true
	}
	t := time.NewTimer(buildWait)
	defer t.Stop()
	select {
	case <-*ch:
		return true
	case <-t.C:
		return false
	}
}

func newFolderIndex(x *indexDB, mailbox, folder string) *folderIndex {
	return &folderIndex{x: x, mailbox: mailbox, folder: folder, reserved: map[string]string{}, creating: map[string]chan struct{}{}}
}

// attach makes sure the folder has its row in the database of this
// generation, for the mailbox as it is now.
func (fi *folderIndex) attach(mb *mailbox) error {
	_, gen := fi.x.handle()
	if fi.attached && fi.gen == gen {
		return nil
	}
	r, err := fi.x.ensureFolder(gen, fi.mailbox, fi.folder, identityOf(mb))
	if err != nil {
		return fi.x.damaged(gen, err)
	}
	fi.gen, fi.row, fi.attached = gen, r, true
	return nil
}

// forget drops what fi knows of the database: the next use attaches again.
func (fi *folderIndex) forget() {
	fi.attached, fi.loaded = false, false
}

// sync brings the folder's rows up to date with the directory d of mailbox
// mb. It reads only files whose stamp changed.
func (fi *folderIndex) sync(d *Dir, mb *mailbox) error {
	for try := 0; ; try++ {
		err := fi.trySync(d, mb)
		if err == nil || try > 0 || !(errors.Is(err, errStaleGen) || isDamage(err)) {
			return err
		}
		fi.forget()
	}
}

func (fi *folderIndex) trySync(d *Dir, mb *mailbox) error {
	if err := fi.attach(mb); err != nil {
		return err
	}
	if !fi.loaded {
		removeLegacyIndex(mb.dir, mb.uid)
	}
	// Rows queued for the database land first: the scan compares with them.
	if err := fi.x.w.flush(); err != nil && !errors.Is(err, errStaleGen) {
		return fi.x.damaged(fi.gen, err)
	}
	dst, err := d.Stat()
	if err != nil {
		return err
	}
	stamp := stampOf(&dst)
	_, lost := fi.x.w.lost.LoadAndDelete(fi.row.fid)
	if fi.row.scanned && stamp == fi.row.stamp && !fi.row.racy && !lost {
		fi.loaded = true
		return nil
	}
	if !fi.cleaned {
		// Stale temporary files and orphans can only have come with a
		// change of the directory; the daemon's start-up sweep took the
		// rest.
		CleanTemps(d)
		cleanOrphans(d)
		fi.cleaned = true
	}
	now := time.Now()
	if fi.inAll && testHookBuilding != nil {
		testHookBuilding(fi.folder)
	}
	if err := fi.scan(d, mb, now); err != nil {
		if lost {
			fi.x.w.lost.Store(fi.row.fid, true)
		}
		return fi.x.damaged(fi.gen, err)
	}
	racy := stamp.racy(now)
	err = fi.x.write(fi.gen, func(tx *sql.Tx) error {
		_, err := tx.Exec("UPDATE folders SET dir_ino = ?, dir_size = ?, dir_mtime = ?, dir_ctime = ?, racy = ?, scanned = 1 WHERE fid = ?",
			int64(stamp.ino), stamp.size, stamp.mtime, stamp.ctime, racy, fi.row.fid)
		return err
	})
	if err != nil {
		return fi.x.damaged(fi.gen, err)
	}
	fi.row.stamp, fi.row.racy, fi.row.scanned = stamp, racy, true
	fi.loaded = true
	return nil
}

// ErrIndexing is returned by a listing of a folder whose files IndexAll is
// reading into the index (after a start with no index, or a reindex).
var ErrIndexing = errors.New("the folder's index is being built from its files")

// testHookBuilding, when set (by tests only), runs when IndexAll starts
// reading a folder's files, with the folder marked as being built.
var testHookBuilding func(folder string)

// scanChunk is how many directory entries a scan handles at a time, and
// scanBatch how many bytes of files it reads before writing their rows: the
// scan's memory is bounded by them, not by the size of the folder.
const (
	scanChunk = 1024
	scanBatch = 8 << 20
)

// scanned is a file a scan read: its row, or why it is not a message.
type scanned struct {
	id    string
	fresh bool // the folder had no row for it
	loadResult
}

// scan compares every message file of d with its row and writes the rows of
// files that changed; rows whose file is gone are removed. Files are read
// and parsed while the rows of the ones before are written.
func (fi *folderIndex) scan(d *Dir, mb *mailbox, now time.Time) error {
	db, _ := fi.x.handle()
	var maxRid int64
	if err := db.QueryRow("SELECT coalesce(max(rid), 0) FROM messages WHERE fid = ?", fi.row.fid).Scan(&maxRid); err != nil {
		return err
	}
	seen := make([]uint64, maxRid/64+1) // rows whose file is there
	fd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: d.path, Err: err}
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()

	batches := make(chan []scanned, 1)
	written := make(chan error, 1)
	var failed atomic.Bool
	go func() {
		var err error
		for b := range batches {
			if err == nil {
				if err = fi.writeScanned(b); err != nil {
					failed.Store(true)
				}
			}
		}
		written <- err
	}()
	err = func() error {
		defer close(batches)
		for !failed.Load() {
			names, rerr := f.Readdirnames(scanChunk)
			var ids []string
			for _, n := range names {
				if id, ok := mdID(n); ok {
					ids = append(ids, id)
				}
			}
			if err := fi.scanIDs(db, d, mb, ids, seen, now, batches); err != nil {
				return err
			}
			if rerr != nil {
				return nil
			}
		}
		return nil
	}()
	if werr := <-written; err == nil {
		err = werr
	}
	if err != nil {
		return err
	}
	// Rows whose file was not seen: removed by the owner.
	rows, err := db.Query("SELECT rid, id FROM messages WHERE fid = ?", fi.row.fid)
	if err != nil {
		return err
	}
	var gone []string
	for rows.Next() {
		var rid int64
		var id string
		if err := rows.Scan(&rid, &id); err != nil {
			rows.Close()
			return err
		}
		// Rows past maxRid were written by this scan.
		if rid <= maxRid && seen[rid/64]&(1<<(rid%64)) == 0 {
			gone = append(gone, id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(gone) == 0 {
		return nil
	}
	return fi.x.write(fi.gen, func(tx *sql.Tx) error {
		return writeRows(fi.x, tx, func(w *rowWriter) error {
			for _, id := range gone {
				if err := w.remove(fi.row.fid, id); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// writeScanned writes the rows of files a scan read, and removes those of
// files that turned out not to be messages.
func (fi *folderIndex) writeScanned(b []scanned) error {
	// In the order of their ids, which is that of arrival: the rows then
	// land beside each other in the folder's indexes (by id, by date),
	// which a directory's order does not give, so a batch reads and
	// writes each page of them once rather than many times.
	slices.SortFunc(b, func(x, y scanned) int { return strings.Compare(x.id, y.id) })
	return fi.x.write(fi.gen, func(tx *sql.Tx) error {
		return writeRows(fi.x, tx, func(w *rowWriter) error {
			for _, r := range b {
				var err error
				if r.err != nil {
					// Unparsable or foreign files are not messages. The
					// error can quote file contents, so it is not logged.
					err = w.remove(fi.row.fid, r.id)
				} else {
					err = w.put(fi.row.fid, fi.row.mid, r.row, r.fresh)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// scanIDs handles one chunk of a scan: it marks the rows whose file is
// there, and reads the files that are new or changed, handing them to the
// writer in batches of at most scanBatch bytes.
func (fi *folderIndex) scanIDs(db *sql.DB, d *Dir, mb *mailbox, ids []string, seen []uint64, now time.Time, out chan<- []scanned) error {
	if len(ids) == 0 {
		return nil
	}
	type have struct {
		rid   int64
		stamp fileStamp
		racy  bool
	}
	known := make(map[string]have, len(ids))
	q := "SELECT rid, id, ino, size, mtime, ctime, racy FROM messages WHERE fid = ? AND id IN (?" + strings.Repeat(",?", len(ids)-1) + ")"
	args := make([]any, 0, len(ids)+1)
	args = append(args, fi.row.fid)
	for _, id := range ids {
		args = append(args, id)
	}
	rows, err := db.Query(q, args...)
	if err != nil {
		return err
	}
	for rows.Next() {
		var h have
		var id string
		var ino int64
		if err := rows.Scan(&h.rid, &id, &ino, &h.stamp.size, &h.stamp.mtime, &h.stamp.ctime, &h.racy); err != nil {
			rows.Close()
			return err
		}
		h.stamp.ino = uint64(ino)
		known[id] = h
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var load []string
	bytes := int64(0)
	flush := func() {
		if len(load) == 0 {
			return
		}
		b := make([]scanned, len(load))
		for i, r := range loadRows(d, load, mb.uid, now) {
			_, had := known[load[i]]
			b[i] = scanned{id: load[i], fresh: !had, loadResult: r}
		}
		fi.read.Add(int64(len(b)))
		out <- b
		load, bytes = nil, 0
	}
	for _, id := range ids {
		h, ok := known[id]
		st, err := d.Lstat(id + ".md")
		if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue // not a message (any row goes as unseen)
		}
		if ok && h.rid < int64(len(seen))*64 {
			seen[h.rid/64] |= 1 << (h.rid % 64)
		}
		if !ok || h.stamp != stampOf(&st) || h.racy {
			load = append(load, id)
			if bytes += min(st.Size, indexHead); bytes >= scanBatch {
				flush()
			}
		}
	}
	flush()
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

type loadResult struct {
	row *indexRow
	err error
}

// loadRows loads many files, in parallel when there are many: a first
// listing of a large folder is bound by parsing and by I/O latency.
func loadRows(d *Dir, ids []string, uid int, now time.Time) []loadResult {
	out := make([]loadResult, len(ids))
	workers := min(2*runtime.GOMAXPROCS(0), 4)
	if len(ids) < 16 {
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
				out[i] = loadRow(d, ids[i], uid, now)
			}
		}()
	}
	wg.Wait()
	return out
}

// filesParsed counts the message files the index has parsed, for tests and
// benchmarks that show what the index spares.
var filesParsed atomic.Int64

// loadRow reads and parses one message file of d: at most indexHead bytes
// of it when its frontmatter fits there (the body past maxIndexedBody is
// not indexed).
func loadRow(d *Dir, id string, uid int, now time.Time) loadResult {
	data, st, err := d.readFileHead(id+".md", MaxMessageFile, indexHead, MaxFrontmatter+indexHead, func(head []byte) bool {
		_, _, err := split(head)
		return err == nil
	})
	if err != nil {
		return loadResult{err: err}
	}
	if err := checkOwner(&st, uid); err != nil {
		return loadResult{err: err}
	}
	filesParsed.Add(1)
	m, body, err := parseForIndex(data)
	if errors.Is(err, ErrNoFrontmatter) && int64(len(data)) < st.Size {
		err = &os.PathError{Op: "read", Path: d.join(id + ".md"), Err: fmt.Errorf("frontmatter: %w", ErrTooLarge)}
	}
	if err != nil {
		return loadResult{err: err}
	}
	stamp := stampOf(&st)
	return loadResult{row: newRow(id, m, body, stamp, stamp.racy(now))}
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

// entryAfterWrite hands the row of a message the store just wrote (its
// files visible) to the index writer; the caller does not wait for it.
// Called with fi.mu held.
func (fi *folderIndex) entryAfterWrite(mb *mailbox, d *Dir, id string, m *Message, body string) {
	fi.entry(mb, d, id, m, body, false)
}

// entryAfterCreate is entryAfterWrite for a message just created under an
// id no file had: its row is inserted without being looked up first.
func (fi *folderIndex) entryAfterCreate(mb *mailbox, d *Dir, id string, m *Message, body string) {
	fi.entry(mb, d, id, m, body, true)
}

func (fi *folderIndex) entry(mb *mailbox, d *Dir, id string, m *Message, body string, fresh bool) {
	if !fi.attached {
		if fi.attach(mb) != nil {
			return // the next sync reads the file
		}
	}
	st, err := d.Lstat(id + ".md")
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		fi.remove(id)
		return
	}
	stamp := stampOf(&st)
	r := newRow(id, m, body, stamp, true)
	fi.x.w.add(&indexOp{gen: fi.gen, fid: fi.row.fid, mid: fi.row.mid, row: r, fresh: fresh, size: r.size()})
}

// remove hands the removal of a message's row to the index writer. Called
// with fi.mu held.
func (fi *folderIndex) remove(id string) {
	if !fi.attached {
		return // not attached: the next sync finds the file gone
	}
	fi.x.w.add(&indexOp{gen: fi.gen, fid: fi.row.fid, del: id, size: 64 + len(id)})
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

// TrustedValue is how the frontmatter spells the verdict protocol.Trusted;
// the store keeps the verdict as the text it reads (it imports no protocol
// types) and the daemon's TestVerdictSpelling holds the two together.
const TrustedValue = "true"
