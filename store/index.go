package store

import (
	"cmp"
	"encoding/base64"
	"errors"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// The index is a cache of the summaries of one folder's messages, so that
// listing never parses every file. The owner may add, remove or edit files at
// any time, so it is re-synced when the folder's mtime changes and the rows it
// returns are re-validated with fstatat. File systems stamp times with a coarse
// clock, so a change made within racyWindow of a sync may carry the same
// mtime as what was seen: such "racy" directories and files are re-checked
// until they have been quiet for longer than the window.
const racyWindow = time.Second

// snippetLen is the number of characters of body kept per message.
const snippetLen = 160

// MaxMessageFile bounds the size of a message's .md file that the store reads.
var MaxMessageFile int64 = 64 << 20

// entry is one indexed message.
type entry struct {
	sum     Summary
	sortKey int64 // ReceivedAt (or Date) in Unix nanoseconds
	stat    fileStamp
	racy    bool
}

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

// isRacy reports whether a stamp with time t, read at now, could hide a later
// change with the same timestamp.
func isRacy(t int64, now time.Time) bool {
	return now.Sub(time.Unix(0, t)) < racyWindow
}

// folderIndex is the index of one folder of one mailbox. mu also serializes
// the store's own read-modify-write operations in the folder.
type folderIndex struct {
	mu       sync.Mutex
	loaded   bool
	dirStamp fileStamp
	dirRacy  bool
	entries  map[string]*entry // by id
	sorted   []*entry          // newest first; nil when it must be rebuilt
	reserved map[string]string // ids being delivered -> their Message-ID
	cleaned  bool
	dirSync  groupSync // shared directory fsyncs of concurrent deliveries
}

func newFolderIndex() *folderIndex {
	return &folderIndex{entries: map[string]*entry{}, reserved: map[string]string{}}
}

// sync brings the index up to date with the directory d whose files must be
// owned by uid. It reads only files whose stamp changed.
func (fi *folderIndex) sync(d *Dir, uid int) error {
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
	for i, r := range loadEntries(d, load, uid, now) {
		fi.apply(load[i], r.e, r.err)
	}
	for id := range fi.entries {
		if !seen[id] {
			delete(fi.entries, id)
			fi.sorted = nil
		}
	}
	fi.loaded = true
	fi.dirStamp = stamp
	fi.dirRacy = isRacy(stamp.mtime, now) || isRacy(stamp.ctime, now)
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
	e, err := loadEntry(d, id, uid, now)
	return fi.apply(id, e, err)
}

// check reports whether the file of id must be (re)loaded. An entry whose
// file is gone or is no longer a regular file is dropped (changed is true).
func (fi *folderIndex) check(d *Dir, id string) (load, changed bool) {
	e := fi.entries[id]
	st, err := d.Lstat(id + ".md")
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		if e != nil {
			fi.remove(id)
			return false, true
		}
		return false, false
	}
	return e == nil || e.stat != stampOf(&st) || e.racy, false
}

// apply stores the result of loading id and reports whether the index
// changed.
func (fi *folderIndex) apply(id string, ne *entry, err error) bool {
	e := fi.entries[id]
	if err != nil {
		// Unparsable or foreign files are not messages. The error can
		// quote file contents, so it is not logged.
		if e != nil {
			fi.remove(id)
			return true
		}
		return false
	}
	fi.put(ne)
	return e == nil || !summaryEqual(&e.sum, &ne.sum)
}

type loadResult struct {
	e   *entry
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
				e, err := loadEntry(d, ids[i], uid, now)
				out[i] = loadResult{e, err}
			}
		}()
	}
	wg.Wait()
	return out
}

func (fi *folderIndex) put(e *entry) {
	old := fi.entries[e.sum.ID]
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
	fi.entries[e.sum.ID] = e
}

func (fi *folderIndex) remove(id string) {
	if _, ok := fi.entries[id]; ok {
		delete(fi.entries, id)
		fi.sorted = nil
	}
}

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
func loadEntry(d *Dir, id string, uid int, now time.Time) (*entry, error) {
	data, st, err := d.readFileHead(id+".md", MaxMessageFile, indexHead, hasFrontmatter)
	if err != nil {
		return nil, err
	}
	if err := checkOwner(&st, uid); err != nil {
		return nil, err
	}
	m, body, err := parseForIndex(data)
	if err != nil {
		return nil, err
	}
	e := newEntry(id, m, body)
	e.stat = stampOf(&st)
	e.racy = isRacy(e.stat.mtime, now) || isRacy(e.stat.ctime, now)
	return e, nil
}

// errForeign is returned for a file in a mailbox that its owner does not own:
// the owner may have hard-linked a file it can read but must not see through
// the daemon (or that the daemon must not change).
var errForeign = errors.New("file is not owned by the mailbox owner")

func checkOwner(st *unix.Stat_t, uid int) error {
	if uid >= 0 && int(st.Uid) != uid {
		return errForeign
	}
	return nil
}

// newEntry builds the index row of a message stored under id. The id is the
// file name, whatever the frontmatter says.
func newEntry(id string, m *Message, body string) *entry {
	t := m.ReceivedAt
	if t.IsZero() {
		t = m.Date
	}
	return &entry{
		sortKey: t.UnixNano(),
		// Clones: the decoder's strings may share the memory of the
		// whole file, which the index must not keep alive.
		sum: Summary{
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
		},
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
		a.DeliveryStatus == b.DeliveryStatus && slices.Equal(a.Labels, b.Labels)
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
		if r == utf8.RuneError {
			r = '\uFFFD'
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
	return strings.Compare(b.sum.ID, a.sum.ID)
}

func (fi *folderIndex) order() []*entry {
	if fi.sorted == nil {
		s := make([]*entry, 0, len(fi.entries))
		for _, e := range fi.entries {
			s = append(s, e)
		}
		slices.SortFunc(s, less)
		fi.sorted = s
	}
	return fi.sorted
}

// Query selects and pages the messages of a folder. Zero values select
// everything. Text matches case-insensitively in subject, sender and snippet;
// From and Subject match case-insensitive substrings; Since and Until bound
// the received time (Since inclusive, Until exclusive).
type Query struct {
	Limit, Offset       int
	Cursor              string
	Unread, Trusted     *bool
	From, Subject, Text string
	ThreadID            string
	Since, Until        *time.Time
}

// Summary is one row of a listing.
type Summary struct {
	ID, Folder, MessageID, ThreadID, From string
	To                                    []string
	Subject                               string
	Date, ReceivedAt                      time.Time
	Read                                  bool
	Trusted                               string
	Attachments                           int
	Snippet                               string
	DeliveryStatus                        string
	Labels                                []string
}

// Page is one page of a listing. Total counts every message the query
// matches; NextCursor continues after the last item when HasMore.
type Page struct {
	Items      []Summary
	Total      int
	NextCursor string
	HasMore    bool
}

// Listing limits.
const (
	DefaultLimit = 50
	MaxLimit     = 200
)

// ErrInvalidCursor is returned for a cursor the store did not hand out.
var ErrInvalidCursor = errors.New("invalid cursor")

type cursor struct {
	key int64
	id  string
}

func encodeCursor(e *entry) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(e.sortKey, 10) + "|" + e.sum.ID))
}

func decodeCursor(s string) (cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, ErrInvalidCursor
	}
	k, id, ok := strings.Cut(string(b), "|")
	n, err := strconv.ParseInt(k, 10, 64)
	if !ok || err != nil || ValidID(id) != nil {
		return cursor{}, ErrInvalidCursor
	}
	return cursor{key: n, id: id}, nil
}

// matcher is a compiled Query filter.
type matcher struct {
	q                   Query
	from, subject, text string
	none                bool
}

func newMatcher(q Query) matcher {
	m := matcher{q: q, from: strings.ToLower(q.From), subject: strings.ToLower(q.Subject), text: strings.ToLower(q.Text)}
	m.none = q.Unread == nil && q.Trusted == nil && q.From == "" && q.Subject == "" && q.Text == "" &&
		q.ThreadID == "" && q.Since == nil && q.Until == nil
	return m
}

// containsFold reports whether s contains lowSub (already lower case),
// ignoring case. ASCII text, the common case, is compared without allocating.
func containsFold(s, lowSub string) bool {
	if lowSub == "" {
		return true
	}
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return strings.Contains(strings.ToLower(s), lowSub)
		}
	}
	for i := 0; i+len(lowSub) <= len(s); i++ {
		j := 0
		for ; j < len(lowSub); j++ {
			c := s[i+j]
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != lowSub[j] {
				break
			}
		}
		if j == len(lowSub) {
			return true
		}
	}
	return false
}

func (m *matcher) match(e *entry) bool {
	if m.none {
		return true
	}
	s := &e.sum
	q := &m.q
	switch {
	case q.Unread != nil && *q.Unread == s.Read:
		return false
	case q.Trusted != nil && *q.Trusted != (s.Trusted == TrustedValue):
		return false
	case q.ThreadID != "" && q.ThreadID != s.ThreadID:
		return false
	case q.Since != nil && e.sortKey < q.Since.UnixNano():
		return false
	case q.Until != nil && e.sortKey >= q.Until.UnixNano():
		return false
	case !containsFold(s.From, m.from), !containsFold(s.Subject, m.subject):
		return false
	}
	if m.text != "" && !containsFold(s.Subject, m.text) && !containsFold(s.From, m.text) && !containsFold(s.Snippet, m.text) {
		return false
	}
	return true
}

// page computes one page of the index (which must be synced).
func (fi *folderIndex) page(q Query, folder string) (Page, []*entry, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	limit = min(limit, MaxLimit)
	var pivot *entry
	if q.Cursor != "" {
		c, err := decodeCursor(q.Cursor)
		if err != nil {
			return Page{}, nil, err
		}
		pivot = &entry{sortKey: c.key, sum: Summary{ID: c.id}}
	}
	skip := max(q.Offset, 0)
	rows := fi.order()
	m := newMatcher(q)
	var p Page
	var sel []*entry
	if m.none {
		// Everything matches: find the window by position.
		start := 0
		if pivot != nil {
			start, _ = slices.BinarySearchFunc(rows, pivot, less)
			if start < len(rows) && less(rows[start], pivot) == 0 {
				start++
			}
		}
		start = min(start+skip, len(rows))
		end := min(start+limit, len(rows))
		sel = rows[start:end]
		p.Total = len(rows)
		p.HasMore = end < len(rows)
	} else {
		// One pass that counts the matches and keeps the window, without
		// building the filtered list.
		for _, e := range rows {
			if !m.match(e) {
				continue
			}
			p.Total++
			if pivot != nil && less(e, pivot) <= 0 {
				continue
			}
			if skip > 0 {
				skip--
				continue
			}
			if len(sel) < limit {
				sel = append(sel, e)
			} else {
				p.HasMore = true
			}
		}
	}
	p.Items = make([]Summary, len(sel))
	for i, e := range sel {
		p.Items[i] = e.sum
		p.Items[i].Folder = folder
	}
	if len(sel) == 0 {
		p.HasMore = false
	}
	if p.HasMore {
		p.NextCursor = encodeCursor(sel[len(sel)-1])
	}
	return p, sel, nil
}

// list syncs the index with d, computes the page and re-validates its rows,
// recomputing when a row turned out to be stale.
func (fi *folderIndex) list(d *Dir, uid int, folder string, q Query) (Page, error) {
	if err := fi.sync(d, uid); err != nil {
		return Page{}, err
	}
	for attempt := 0; ; attempt++ {
		p, rows, err := fi.page(q, folder)
		if err != nil || attempt == 3 {
			return p, err
		}
		changed := false
		now := time.Now()
		for _, e := range rows {
			if fi.refresh(d, e.sum.ID, uid, now) {
				changed = true
			}
		}
		if !changed {
			return p, nil
		}
	}
}

func (fi *folderIndex) findMessageID(messageID string) (string, bool) {
	for id, mid := range fi.reserved {
		if mid == messageID {
			return id, true
		}
	}
	for _, e := range fi.entries {
		if e.sum.MessageID == messageID {
			return e.sum.ID, true
		}
	}
	return "", false
}

// entryAfterWrite indexes a message the store just wrote.
func (fi *folderIndex) entryAfterWrite(d *Dir, id string, m *Message, body string) {
	st, err := d.Lstat(id + ".md")
	if err != nil {
		fi.remove(id)
		return
	}
	e := newEntry(id, m, body)
	e.stat = stampOf(&st)
	e.racy = true
	fi.put(e)
}

// TrustedValue is how the frontmatter spells the verdict protocol.Trusted;
// the store keeps the verdict as the text it reads (it imports no protocol
// types) and the daemon's TestVerdictSpelling holds the two together.
const TrustedValue = "true"
