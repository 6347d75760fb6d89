package store

import (
	"fmt"
	"strings"
	"sync"
)

// What a listing can keep between calls. Counting the rows a listing
// matches (its total) walks every one of them, so in a folder of 100,000
// messages it costs milliseconds while the page itself costs little. The
// index therefore numbers its write transactions and records, per folder,
// the last one that changed the folder's rows; a total counted at a version
// is reused while the version stays. Nothing here grows with the number of
// messages: a number per folder, and at most countCacheMax totals.

// countCacheMax bounds the totals kept; past it they are dropped and
// counted again.
const countCacheMax = 256

// changeLog is the versions of folders' rows.
type changeLog struct {
	mu    sync.Mutex
	seq   uint64           // write transactions published so far
	epoch uint64           // the last one that changed rows of folders it did not name
	fids  map[int64]uint64 // folder -> the last one that changed its rows

	// Of the write transaction under way (its writer holds wmu).
	pending    map[int64]struct{}
	pendingAll bool

	counts map[string]countEntry
}

type countEntry struct {
	version uint64
	n       int
}

func newChangeLog() *changeLog {
	return &changeLog{fids: map[int64]uint64{}, pending: map[int64]struct{}{}, counts: map[string]countEntry{}}
}

// touch records that the write transaction under way changes the rows of
// folder fid. Called by the writer holding wmu.
func (c *changeLog) touch(fid int64) {
	c.mu.Lock()
	c.pending[fid] = struct{}{}
	c.mu.Unlock()
}

// touchAll records that the write transaction under way changes rows of
// folders it does not name (a mailbox's, dropped).
func (c *changeLog) touchAll() {
	c.mu.Lock()
	c.pendingAll = true
	c.mu.Unlock()
}

// publish gives the folders the write transaction changed a new version.
// It runs after the transaction ended (committed or not): a version read
// before a commit is then never taken for the state after it.
func (c *changeLog) publish() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) == 0 && !c.pendingAll {
		return
	}
	c.seq++
	for fid := range c.pending {
		c.fids[fid] = c.seq
	}
	if c.pendingAll {
		c.epoch = c.seq
	}
	clear(c.pending)
	c.pendingAll = false
}

// reset forgets every version and total: the database was replaced.
func (c *changeLog) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	c.epoch = c.seq
	clear(c.fids)
	clear(c.counts)
}

// version is the version of the rows of the given folders, to be read
// before the rows are.
func (c *changeLog) version(fids map[int64]string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.epoch
	for fid := range fids {
		v = max(v, c.fids[fid])
	}
	return v
}

// count returns the total counted by query with args at version, if it
// was.
func (c *changeLog) count(version uint64, query string, args []any) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.counts[countKey(query, args)]
	return e.n, ok && e.version == version
}

// keepCount records the total counted by query with args at version.
func (c *changeLog) keepCount(version uint64, query string, args []any, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.counts) >= countCacheMax {
		clear(c.counts)
	}
	c.counts[countKey(query, args)] = countEntry{version: version, n: n}
}

func countKey(query string, args []any) string {
	var b strings.Builder
	b.WriteString(query)
	for _, a := range args {
		// Arguments are numbers, booleans and strings; %q keeps a string
		// from running into the next.
		fmt.Fprintf(&b, "\x00%T:%q", a, fmt.Sprint(a))
	}
	return b.String()
}
