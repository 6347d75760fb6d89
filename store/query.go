package store

import (
	"encoding/base64"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Listing: the query a caller asks, the page it gets, and how the index
// finds the page (with the rows it reads from the index file when a filter
// needs them).

// Query selects and pages the messages of a folder. Zero values select
// everything. Text matches case-insensitively in subject, sender and snippet;
// From and Subject match case-insensitive substrings; Since and Until bound
// the received time (Since inclusive, Until exclusive). Label selects the
// messages carrying that label (ignoring case); Starred selects starred (or,
// false, unstarred) messages.
type Query struct {
	Limit, Offset       int
	Cursor              string
	Unread, Trusted     *bool
	Starred             *bool
	Label               string
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
	Starred                               bool
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

func encodeCursor(e *entry) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(e.sortKey, 10) + "|" + e.id))
}

// decodeCursor returns the row a cursor continues after.
func decodeCursor(s string) (*entry, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, ErrInvalidCursor
	}
	k, id, ok := strings.Cut(string(b), "|")
	n, err := strconv.ParseInt(k, 10, 64)
	if !ok || err != nil || ValidID(id) != nil {
		return nil, ErrInvalidCursor
	}
	return &entry{sortKey: n, id: id}, nil
}

// matcher is a compiled Query filter.
type matcher struct {
	q                   Query
	from, subject, text string
	tid                 uint64
	none                bool            // everything matches
	rows                bool            // the filter needs the rows, not only the entries
	pre                 map[*entry]bool // the entries whose rows pass, when read ahead
}

func newMatcher(q Query) matcher {
	m := matcher{q: q, from: strings.ToLower(q.From), subject: strings.ToLower(q.Subject), text: strings.ToLower(q.Text), tid: hashString(q.ThreadID)}
	m.rows = q.From != "" || q.Subject != "" || q.Text != "" || q.ThreadID != "" || q.Label != ""
	m.none = !m.rows && q.Unread == nil && q.Trusted == nil && q.Starred == nil && q.Since == nil && q.Until == nil
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

// match reports whether e matches, reading its row only when the entry
// alone cannot decide.
func (m *matcher) match(fi *folderIndex, e *entry) (bool, error) {
	if m.none {
		return true, nil
	}
	q := &m.q
	switch {
	case q.Unread != nil && *q.Unread == e.read:
		return false, nil
	case q.Trusted != nil && *q.Trusted != e.trusted:
		return false, nil
	case q.Starred != nil && *q.Starred != e.starred:
		return false, nil
	case q.ThreadID != "" && m.tid != e.tid:
		return false, nil
	case q.Since != nil && e.sortKey < UnixNano(*q.Since):
		return false, nil
	case q.Until != nil && e.sortKey >= UnixNano(*q.Until):
		return false, nil
	case !m.rows:
		return true, nil
	case m.pre != nil:
		return m.pre[e], nil
	}
	s, err := fi.summary(e)
	if err != nil {
		return false, err
	}
	return m.rowOK(&s), nil
}

// rowOK applies the filters that need the row.
func (m *matcher) rowOK(s *Summary) bool {
	q := &m.q
	switch {
	case q.ThreadID != "" && q.ThreadID != s.ThreadID:
		return false
	case !containsFold(s.From, m.from), !containsFold(s.Subject, m.subject):
		return false
	case q.Label != "" && !HasLabel(s.Labels, q.Label):
		return false
	}
	return m.text == "" || containsFold(s.Subject, m.text) || containsFold(s.From, m.text) || containsFold(s.Snippet, m.text)
}

// readAhead is how many rows a filter must read before they are read in one
// pass over the index file rather than one by one.
var readAhead = 256

// rowsMatching reads every row in one pass over the index file and returns
// the entries whose rows pass m's row filters.
func (fi *folderIndex) rowsMatching(m *matcher) (map[*entry]bool, error) {
	out := map[*entry]bool{}
	want := 0
	for _, e := range fi.entries {
		if e.sum != nil {
			if m.rowOK(e.sum) {
				out[e] = true
			}
		} else {
			want++
		}
	}
	if want == 0 {
		return out, nil
	}
	if fi.log == nil {
		return nil, errIndexStale
	}
	seen := 0
	err := fi.log.each(func(off int64, rec []byte) bool {
		id, ok := recordID(rec)
		if !ok {
			return false
		}
		e := fi.entries[string(id)]
		if e == nil || e.sum != nil || e.off != off {
			return true // superseded
		}
		s, ok := decodeSummary(rec)
		if !ok || s.ID != e.id {
			return false
		}
		seen++
		if m.rowOK(&s) {
			out[e] = true
		}
		return true
	})
	if err == nil && seen != want {
		err = errIndexStale
	}
	return out, err
}

// page computes one page of the index (which must be synced).
func (fi *folderIndex) page(q Query, folder string) (Page, []*entry, error) {
	w := pageWindow{limit: min(q.Limit, MaxLimit), skip: max(q.Offset, 0)}
	if w.limit <= 0 {
		w.limit = DefaultLimit
	}
	if q.Cursor != "" {
		var err error
		if w.pivot, err = decodeCursor(q.Cursor); err != nil {
			return Page{}, nil, err
		}
	}
	rows := fi.order()
	m := newMatcher(q)
	var p Page
	var sel []*entry
	if m.none {
		sel, p.Total, p.HasMore = w.ofAll(rows)
	} else {
		if m.rows && len(rows) > readAhead {
			pre, err := fi.rowsMatching(&m)
			if err != nil {
				return Page{}, nil, err
			}
			m.pre = pre
		}
		key, counted := m.totalKey()
		w.total = -1
		if counted {
			w.total = fi.knownTotal(key)
		}
		var err error
		if sel, p.Total, p.HasMore, err = w.ofMatches(rows, func(e *entry) (bool, error) { return m.match(fi, e) }); err != nil {
			return Page{}, nil, err
		}
		if counted && w.total < 0 {
			fi.keepTotal(key, p.Total)
		}
	}
	p.Items = make([]Summary, len(sel))
	for i, e := range sel {
		sum, err := fi.summary(e)
		if err != nil {
			return Page{}, nil, err
		}
		p.Items[i] = sum
		p.Items[i].Folder = folder
	}
	if p.HasMore {
		p.NextCursor = encodeCursor(sel[len(sel)-1])
	}
	return p, sel, nil
}

// pageWindow is the part of a listing a page shows: after pivot (a cursor's
// row), skip rows, then limit rows. total, when not -1, is the number of
// rows that match, known already.
type pageWindow struct {
	pivot       *entry
	skip, limit int
	total       int
}

// totalKey is a filter that needs no row: flags and date bounds.
type totalKey struct {
	unread, trusted, starred int8 // 0: any; 1: true; 2: false
	since, until             int64
	hasSince, hasUntil       bool
}

type totalAt struct {
	version uint64
	total   int
}

// maxTotals bounds the filters whose totals a folder keeps.
const maxTotals = 64

// knownTotal is the number of rows that match key as the folder is now,
// or -1 when it is not known.
func (fi *folderIndex) knownTotal(key totalKey) int {
	if at, ok := fi.totals[key]; ok && at.version == fi.version {
		return at.total
	}
	return -1
}

// keepTotal records total as the number of rows that match key now.
func (fi *folderIndex) keepTotal(key totalKey, total int) {
	if len(fi.totals) >= maxTotals {
		clear(fi.totals)
	}
	if fi.totals == nil {
		fi.totals = map[totalKey]totalAt{}
	}
	fi.totals[key] = totalAt{version: fi.version, total: total}
}

// totalKey is m's filter as a totalKey, when it needs no row.
func (m *matcher) totalKey() (totalKey, bool) {
	if m.rows {
		return totalKey{}, false
	}
	tri := func(b *bool) int8 {
		switch {
		case b == nil:
			return 0
		case *b:
			return 1
		}
		return 2
	}
	k := totalKey{unread: tri(m.q.Unread), trusted: tri(m.q.Trusted), starred: tri(m.q.Starred)}
	if m.q.Since != nil {
		k.since, k.hasSince = UnixNano(*m.q.Since), true
	}
	if m.q.Until != nil {
		k.until, k.hasUntil = UnixNano(*m.q.Until), true
	}
	return k, true
}

// start is the position of the first row after the pivot.
func (w pageWindow) start(rows []*entry) int {
	if w.pivot == nil {
		return 0
	}
	i, found := slices.BinarySearchFunc(rows, w.pivot, less)
	if found {
		i++
	}
	return i
}

// ofAll finds the window by position when every row matches.
func (w pageWindow) ofAll(rows []*entry) (sel []*entry, total int, more bool) {
	start := min(w.start(rows)+w.skip, len(rows))
	end := min(start+w.limit, len(rows))
	return rows[start:end], len(rows), end < len(rows) && end > start
}

// ofMatches counts the matching rows and keeps the window in one pass,
// without building the filtered list. When the total is known it starts at
// the pivot and stops at the first match past the window instead.
func (w pageWindow) ofMatches(rows []*entry, match func(*entry) (bool, error)) (sel []*entry, total int, more bool, err error) {
	known := w.total >= 0
	if known {
		rows = rows[w.start(rows):]
	}
	skip := w.skip
	for _, e := range rows {
		ok, err := match(e)
		if err != nil {
			return nil, 0, false, err
		}
		switch {
		case !ok:
			continue
		case w.pivot != nil && less(e, w.pivot) <= 0:
		case skip > 0:
			skip--
		case len(sel) < w.limit:
			sel = append(sel, e)
		case known:
			return sel, w.total, len(sel) > 0, nil
		default:
			more = true
		}
		total++
	}
	if known {
		return sel, w.total, false, nil
	}
	return sel, total, more && len(sel) > 0, nil
}
