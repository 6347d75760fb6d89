package store

import (
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Listing: the query a caller asks, the page it gets, and how the index
// database finds the page.

// Query selects and pages the messages of a folder. Zero values select
// everything. Text matches words of the whole message (subject, sender,
// recipients, body, attachment names; each word as a prefix) or a
// case-insensitive substring of the subject or sender; From and Subject
// match case-insensitive substrings; Since and Until bound the received time
// (Since inclusive, Until exclusive). Label selects the messages carrying
// that label (ignoring case); Starred selects starred (or, false, unstarred)
// messages. Search is a query in the search language (ParseSearch); one
// that names folders (in:) searches the whole mailbox.
type Query struct {
	Limit, Offset       int
	Cursor              string
	Unread, Trusted     *bool
	Starred             *bool
	Label               string
	From, Subject, Text string
	ThreadID            string
	Since, Until        *time.Time
	Search              string
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
	// AllFolders is set when the search named folders (in:): the items
	// come from the folders it names, each with its own.
	AllFolders bool
}

// Listing limits.
const (
	DefaultLimit = 50
	MaxLimit     = 200
)

// ErrInvalidCursor is returned for a cursor the store did not hand out.
var ErrInvalidCursor = errors.New("invalid cursor")

// cursorAt is the position of a row in the order of a listing: newest
// first, then by id, then by folder.
type cursorAt struct {
	sortKey int64
	id      string
	fid     int64
}

func encodeCursor(c cursorAt) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.sortKey, 10) + "|" + strconv.FormatInt(c.fid, 10) + "|" + c.id))
}

// decodeCursor returns the row a cursor continues after.
func decodeCursor(s string) (cursorAt, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursorAt{}, ErrInvalidCursor
	}
	parts := strings.SplitN(string(b), "|", 3)
	if len(parts) != 3 {
		return cursorAt{}, ErrInvalidCursor
	}
	k, err1 := strconv.ParseInt(parts[0], 10, 64)
	f, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil || ValidID(parts[2]) != nil {
		return cursorAt{}, ErrInvalidCursor
	}
	return cursorAt{sortKey: k, fid: f, id: parts[2]}, nil
}

// listScope is what a listing searches: one folder, or (mid set) every
// folder of a mailbox.
type listScope struct {
	gen     uint64
	mid     int64 // the mailbox, when the listing spans its folders
	fid     int64 // the folder, otherwise
	folders map[string]int64
	names   map[int64]string
}

// token is the full-text term that selects the scope's rows
// (scopeTerms).
func (sc *listScope) token() string {
	if sc.mid != 0 {
		return fmt.Sprintf(`"%sm%d"`, scopeMark, sc.mid)
	}
	return fmt.Sprintf(`"%sf%d"`, scopeMark, sc.fid)
}

// filtered reports whether the query has filters besides its search.
func (q *Query) filtered() bool {
	return q.Unread != nil || q.Trusted != nil || q.Starred != nil || q.Label != "" || q.From != "" || q.Subject != "" ||
		q.Text != "" || q.ThreadID != "" || q.Since != nil || q.Until != nil
}

// driveMax is how many full-text matches may drive a query; past it the
// folder's order drives it.
const driveMax = 4000

// where compiles the query's filters into SQL over messages m. With
// drive, the rows the search's full text matches drive the query (looked
// up by rowid): the unary + keeps the engine from walking the whole
// folder's index instead, which it does otherwise (checking each row
// against the matches), the better plan when they are many.
func (q *Query) where(sc *listScope, search *searchNode, drive bool) (string, []any) {
	b := &sqlBuilder{folders: sc.folders, scope: sc.token()}
	var parts []string
	scope := "m."
	if drive {
		scope = "+m."
	}
	if sc.mid != 0 {
		parts = append(parts, scope+"mid = ?")
		b.args = append(b.args, sc.mid)
	} else {
		parts = append(parts, scope+"fid = ?")
		b.args = append(b.args, sc.fid)
	}
	flag := func(col string, v *bool) {
		if v != nil {
			parts = append(parts, col+" = ?")
			b.args = append(b.args, *v)
		}
	}
	if q.Unread != nil {
		parts = append(parts, "m.read = ?")
		b.args = append(b.args, !*q.Unread)
	}
	flag("m.trusted_ok", q.Trusted)
	flag("m.starred", q.Starred)
	if q.Label != "" {
		parts = append(parts, "instr(m.labels_fold, ?) > 0")
		b.args = append(b.args, labelFilter(q.Label))
	}
	if q.From != "" {
		col := "m.from_fold"
		if addressFilter(q.From) {
			col = fromAddressSQL
		}
		parts = append(parts, "instr("+col+", ?) > 0")
		b.args = append(b.args, fold(q.From))
	}
	if q.Subject != "" {
		parts = append(parts, "instr(m.subj_fold, ?) > 0")
		b.args = append(b.args, fold(q.Subject))
	}
	if q.ThreadID != "" {
		parts = append(parts, "m.thread_id = ?")
		b.args = append(b.args, q.ThreadID)
	}
	if q.Since != nil {
		parts = append(parts, "m.sort_key >= ?")
		b.args = append(b.args, UnixNano(*q.Since))
	}
	if q.Until != nil {
		parts = append(parts, "m.sort_key < ?")
		b.args = append(b.args, UnixNano(*q.Until))
	}
	if q.Text != "" {
		t := fold(q.Text)
		var words []string
		for _, w := range strings.Fields(q.Text) {
			if hasWord(w) {
				words = append(words, ftsQuote(w)+"*")
			}
		}
		alt := "instr(m.subj_fold, ?) > 0 OR instr(m.from_fold, ?) > 0"
		if len(words) > 0 {
			alt = b.match(strings.Join(words, " AND ")) + " OR " + alt
		}
		parts = append(parts, "("+alt+")")
		b.args = append(b.args, t, t)
	}
	if search != nil {
		parts = append(parts, b.expr(search))
	}
	return strings.Join(parts, " AND "), b.args
}

// addressFilter reports whether a from filter names an address or a domain
// (it holds an '@', or is one word with a dot): such a filter is looked for
// in the sender's address only, never in the display name the sender typed
// ("noreply@service.example" <attacker@evil.example> is not the service's
// mail). protocol.SenderMatches, which the waits use, keeps the same rule.
func addressFilter(f string) bool {
	return strings.Contains(f, "@") || !strings.ContainsAny(f, " \t") && strings.Contains(f, ".")
}

// fromAddressSQL is the address part of m.from_fold, the sender as the
// store writes it ("Name" <address>, or a bare address): what follows the
// last '<' of its last 320 characters when they end with '>' (rtrim strips
// every character but '<' from the end), or all of those when they hold no
// '<' and no space (a bare address). A sender the store could not parse,
// written as it came, has no address part: it matches no address filter,
// as it passes no wait's (protocol.SenderMatches). An address has at most
// 254 characters; the window keeps rtrim, whose cost grows with its input
// times its set of characters, cheap on a sender's 10 KB header written to
// be slow (70 ms a row without it).
const fromAddressSQL = "(CASE WHEN instr(" + fromTailSQL + ", '<') = 0 THEN (CASE WHEN instr(" + fromTailSQL + ", ' ') = 0 THEN " + fromTailSQL + " ELSE '' END)" +
	" WHEN substr(m.from_fold, -1) = '>' THEN substr(" + fromTailSQL + ", length(rtrim(" + fromTailSQL + ", replace(" + fromTailSQL + ", '<', ''))) + 1)" +
	" ELSE '' END)"

const fromTailSQL = "substr(m.from_fold, -320)"

// matchSQL selects the rows whose full text matches a parameter.
const matchSQL = "m.rid IN (SELECT rowid FROM fts WHERE fts MATCH ?)"

// sqlBuilder compiles a search tree.
type sqlBuilder struct {
	args    []any
	folders map[string]int64
	scope   string // the full-text term of the listing's folder or mailbox
}

// match selects the rows of the scope whose full text matches expr.
func (b *sqlBuilder) match(expr string) string {
	b.args = append(b.args, "("+expr+") AND "+b.scope)
	return matchSQL
}

func (b *sqlBuilder) expr(n *searchNode) string {
	if f, ok := ftsExpr(n); ok {
		return b.match(f)
	}
	switch n.op {
	case opNot:
		return "NOT " + b.expr(n.kids[0])
	case opOr:
		parts := make([]string, len(n.kids))
		for i, k := range n.kids {
			parts[i] = b.expr(k)
		}
		return "(" + strings.Join(parts, " OR ") + ")"
	case opAnd:
		// The full-text terms become one MATCH: the engine intersects
		// them far faster than SQL would.
		var pos, neg, parts []string
		for _, k := range n.kids {
			if f, ok := ftsExpr(k); ok {
				pos = append(pos, "("+f+")")
			} else if f, ok := notFTS(k); ok {
				neg = append(neg, "("+f+")")
			}
		}
		if len(pos) > 0 {
			parts = append(parts, b.match(joinFTS(pos, neg)))
		}
		for _, k := range n.kids {
			_, isPos := ftsExpr(k)
			_, isNeg := notFTS(k)
			if isPos || isNeg && len(pos) > 0 {
				continue
			}
			parts = append(parts, b.expr(k))
		}
		return "(" + strings.Join(parts, " AND ") + ")"
	}
	switch n.field {
	case "from":
		// An address or a domain: its words in the sender, and its text in
		// the sender's address, never only in the display name the sender
		// typed (addressFilter).
		m := b.match(ftsColumn["from"] + " : " + ftsQuote(n.value))
		b.args = append(b.args, fold(n.value))
		return "(" + m + " AND instr(" + fromAddressSQL + ", ?) > 0)"
	case "is":
		switch n.value {
		case "unread":
			return "m.read = 0"
		case "read":
			return "m.read = 1"
		}
		return "m.starred = 1"
	case "has":
		return "m.attachments > 0"
	case "in":
		if n.value == "anywhere" {
			return "1"
		}
		b.args = append(b.args, b.folders[n.value]) // 0, matching nothing, for a folder the mailbox lacks
		return "m.fid = ?"
	case "label":
		b.args = append(b.args, labelFilter(n.value))
		return "instr(m.labels_fold, ?) > 0"
	case "after", "newer_than":
		b.args = append(b.args, n.when)
		return "m.sort_key >= ?"
	case "before", "older_than":
		b.args = append(b.args, n.when)
		return "m.sort_key < ?"
	}
	panic("store: search term " + n.field + " not compiled")
}

// ftsColumn is the full-text column each text operator searches.
var ftsColumn = map[string]string{"from": "sender", "to": "recipients", "cc": "cc", "subject": "subject", "filename": "attachments"}

// ftsExpr compiles n into one full-text expression, when n is made of
// full-text terms only (a negation needs a positive term beside it).
func ftsExpr(n *searchNode) (string, bool) {
	switch n.op {
	case opTerm:
		if n.field == "" {
			return ftsQuote(n.value), true
		}
		if n.field == "from" && addressFilter(n.value) {
			return "", false // also in the address part: b.expr
		}
		if col, ok := ftsColumn[n.field]; ok {
			return col + " : " + ftsQuote(n.value), true
		}
		return "", false
	case opOr:
		parts := make([]string, len(n.kids))
		for i, k := range n.kids {
			f, ok := ftsExpr(k)
			if !ok {
				return "", false
			}
			parts[i] = "(" + f + ")"
		}
		return strings.Join(parts, " OR "), true
	case opAnd:
		var pos, neg []string
		for _, k := range n.kids {
			if f, ok := ftsExpr(k); ok {
				pos = append(pos, "("+f+")")
			} else if f, ok := notFTS(k); ok {
				neg = append(neg, "("+f+")")
			} else {
				return "", false
			}
		}
		if len(pos) == 0 {
			return "", false
		}
		return joinFTS(pos, neg), true
	}
	return "", false
}

// joinFTS is the full-text expression of terms that must all match and
// terms that must not.
func joinFTS(pos, neg []string) string {
	m := strings.Join(pos, " AND ")
	for _, f := range neg {
		m += " NOT " + f
	}
	return m
}

// topFTS is the full-text expression every row a search finds must match,
// if there is one: the search's own, or that of the full-text terms of its
// top conjunction.
func topFTS(n *searchNode) (string, bool) {
	if n == nil {
		return "", false
	}
	if f, ok := ftsExpr(n); ok {
		return f, true
	}
	if n.op != opAnd {
		return "", false
	}
	var pos, neg []string
	for _, k := range n.kids {
		if f, ok := ftsExpr(k); ok {
			pos = append(pos, "("+f+")")
		} else if f, ok := notFTS(k); ok {
			neg = append(neg, "("+f+")")
		}
	}
	if len(pos) == 0 {
		return "", false
	}
	return joinFTS(pos, neg), true
}

// notFTS compiles the inside of a negated full-text term.
func notFTS(n *searchNode) (string, bool) {
	if n.op != opNot {
		return "", false
	}
	return ftsExpr(n.kids[0])
}

// ftsQuote makes s one phrase of the full-text query language: the engine
// splits it into words as it split the text. Control characters (a NUL
// would end the engine's string) and scopeMark separate words, as they do
// in the text.
func ftsQuote(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || string(r) == scopeMark {
			return ' '
		}
		return r
	}, s)
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// rowCols are the columns a page reads, in the order scanRow expects.
const rowCols = `m.fid, m.id, m.sort_key, m.ino, m.size, m.mtime, m.ctime, m.racy, m.read, m.starred, m.message_id,
	m.thread_id, m.sender, m.recipients, m.subject, m.date, m.received, m.trusted, m.attachments, m.snippet, m.status, m.labels`

// pageRow is one row of a page as read from the database.
type pageRow struct {
	fid     int64
	sortKey int64
	stamp   fileStamp
	racy    bool
	sum     Summary
}

func scanRow(rows *sql.Rows) (pageRow, error) {
	var r pageRow
	var ino int64
	var to, date, received, labels string
	s := &r.sum
	err := rows.Scan(&r.fid, &s.ID, &r.sortKey, &ino, &r.stamp.size, &r.stamp.mtime, &r.stamp.ctime, &r.racy, &s.Read, &s.Starred,
		&s.MessageID, &s.ThreadID, &s.From, &to, &s.Subject, &date, &received, &s.Trusted, &s.Attachments, &s.Snippet,
		&s.DeliveryStatus, &labels)
	r.stamp.ino = uint64(ino)
	s.To, s.Labels = splitList(to), splitList(labels)
	s.Date, s.ReceivedAt = parseTimeText(date), parseTimeText(received)
	return r, err
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, listSep)
}

// page reads one page of the scope from the database.
func (s *Store) page(sc *listScope, q Query, search *searchNode) (Page, []pageRow, error) {
	limit := min(q.Limit, MaxLimit)
	if limit <= 0 {
		limit = DefaultLimit
	}
	db, gen := s.idx.handle()
	if gen != sc.gen {
		return Page{}, nil, errStaleGen
	}
	var p Page
	// Read before the rows: totals counted at this version of the scope's
	// folders are reused until a write changes them.
	version := s.idx.changes.version(sc.names)
	drive, counted := false, false
	if top, ok := topFTS(search); ok {
		// The engine counts a search's matches in the scope alone; when
		// the search is all there is, that is the total.
		n, err := s.count(db, version, "SELECT count(*) FROM fts WHERE fts MATCH ?", "("+top+") AND "+sc.token())
		if err != nil {
			return Page{}, nil, err
		}
		drive = n <= driveMax
		if _, pure := ftsExpr(search); pure && !q.filtered() {
			p.Total, counted = n, true
		}
	}
	where, args := q.where(sc, search, drive)
	if !counted {
		n, err := s.count(db, version, "SELECT count(*) FROM messages m WHERE "+where, args...)
		if err != nil {
			return Page{}, nil, err
		}
		p.Total = n
	}
	if q.Cursor != "" {
		c, err := decodeCursor(q.Cursor)
		if err != nil {
			return Page{}, nil, err
		}
		where += " AND (m.sort_key < ? OR m.sort_key = ? AND (m.id < ? OR m.id = ? AND m.fid < ?))"
		args = append(args, c.sortKey, c.sortKey, c.id, c.id, c.fid)
	}
	rows, err := db.Query("SELECT "+rowCols+" FROM messages m WHERE "+where+
		" ORDER BY m.sort_key DESC, m.id DESC, m.fid DESC LIMIT ? OFFSET ?", append(args, limit+1, max(q.Offset, 0))...)
	if err != nil {
		return Page{}, nil, err
	}
	defer rows.Close()
	var out []pageRow
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return Page{}, nil, err
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return Page{}, nil, err
	}
	if len(out) > limit {
		out, p.HasMore = out[:limit], true
	}
	p.Items = make([]Summary, len(out))
	for i, r := range out {
		p.Items[i] = r.sum
		p.Items[i].Folder = sc.names[r.fid]
	}
	if p.HasMore {
		last := out[len(out)-1]
		p.NextCursor = encodeCursor(cursorAt{sortKey: last.sortKey, id: last.sum.ID, fid: last.fid})
	}
	return p, out, nil
}

// countsRun counts the count queries listings ran, for tests that show
// what the kept totals spare.
var countsRun atomic.Int64

// count runs a count query, or returns what it counted at the same version
// of the rows.
func (s *Store) count(db *sql.DB, version uint64, query string, args ...any) (int, error) {
	if n, ok := s.idx.changes.count(version, query, args); ok {
		return n, nil
	}
	countsRun.Add(1)
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		return 0, err
	}
	s.idx.changes.keepCount(version, query, args, n)
	return n, nil
}

// List returns one page of the messages of a folder (or, for a search that
// names folders, of the mailbox), newest first.
func (s *Store) List(mailbox, folder string, q Query) (Page, error) {
	for _, f := range []struct{ name, v string }{{"from", q.From}, {"subject", q.Subject}, {"text", q.Text}, {"thread_id", q.ThreadID}, {"label", q.Label}} {
		if len(f.v) > MaxSearchLen {
			return Page{}, &SearchError{Reason: fmt.Sprintf("the %s filter is %d bytes long, the maximum is %d", f.name, len(f.v), MaxSearchLen)}
		}
	}
	var search *searchNode
	if strings.TrimSpace(q.Search) != "" {
		var err error
		if search, err = ParseSearch(q.Search, s.now()); err != nil {
			return Page{}, err
		}
	}
	if q.Cursor != "" {
		if _, err := decodeCursor(q.Cursor); err != nil {
			return Page{}, err
		}
	}
	folders := []string{folder}
	if search.usesFolders() {
		folders = Folders
	}
	for attempt := 0; ; attempt++ {
		sc, err := s.syncScope(mailbox, folders, len(folders) > 1)
		if err != nil {
			return Page{}, err
		}
		p, rows, err := s.page(sc, q, search)
		if (errors.Is(err, errStaleGen) || isDamage(err)) && attempt < 3 {
			s.idx.damaged(sc.gen, err)
			continue
		}
		if err != nil {
			return Page{}, err
		}
		p.AllFolders = len(folders) > 1
		changed, err := s.recheck(mailbox, sc, rows)
		if err != nil || !changed || attempt >= 3 {
			return p, err
		}
	}
}

// syncScope syncs the folders a listing reads and returns its scope.
func (s *Store) syncScope(mailbox string, folders []string, multi bool) (*listScope, error) {
	sc := &listScope{folders: map[string]int64{}, names: map[int64]string{}}
	for _, f := range folders {
		var row folderRow
		var gen uint64
		err := s.syncFolder(mailbox, f, func(fi *folderIndex) { row, gen = fi.row, fi.gen })
		if err == nil {
			if sc.gen != 0 && sc.gen != gen {
				err = errStaleGen
			}
			sc.gen, sc.mid = gen, row.mid
			sc.fid = row.fid
			sc.folders[f], sc.names[row.fid] = row.fid, f
		}
		if multi && errors.Is(err, ErrNotFound) && !errors.Is(err, errForeign) {
			continue
		}
		if err != nil {
			return nil, err
		}
	}
	if !multi {
		sc.mid = 0
	} else if sc.gen == 0 {
		return nil, ErrNotFound
	}
	return sc, nil
}

// syncFolder brings a folder's index up to date for a listing and calls got
// with it (its lock held). It syncs in a goroutine of its own, marked as
// building the folder: a sync that turns into a long scan (a first start,
// files changed by the thousand) goes on after the listing has waited
// buildWait and answered ErrIndexing, and later listings wait for it, not
// for the folder's lock.
func (s *Store) syncFolder(mailbox, folder string, got func(fi *folderIndex)) error {
	fi := s.index(mailbox, folder)
	for {
		built, mine := fi.claim()
		if !mine {
			if !fi.waitBuilt() {
				return fmt.Errorf("%s/%s: %w (%d read so far); retry in a few seconds", mailbox, folder, ErrIndexing, fi.read.Load())
			}
			continue
		}
		res := make(chan error, 1)
		go func() {
			defer fi.release(built)
			res <- s.inFolder(mailbox, folder, nil, func(of openedFolder) error {
				if err := of.fi.sync(of.d, of.mb); err != nil {
					return err
				}
				got(of.fi)
				return nil
			})
		}()
		t := time.NewTimer(buildWait)
		defer t.Stop()
		select {
		case err := <-res:
			return err
		case <-t.C:
			return fmt.Errorf("%s/%s: %w (%d read so far); retry in a few seconds", mailbox, folder, ErrIndexing, fi.read.Load())
		}
	}
}

// recheck compares the rows of a page with their files, and brings the
// index up to date with those that changed. It reports whether any did.
func (s *Store) recheck(mailbox string, sc *listScope, rows []pageRow) (bool, error) {
	changed := false
	byFolder := map[int64][]pageRow{}
	for _, r := range rows {
		byFolder[r.fid] = append(byFolder[r.fid], r)
	}
	names := make([]int64, 0, len(byFolder))
	for fid := range byFolder {
		names = append(names, fid)
	}
	slices.Sort(names)
	for _, fid := range names {
		err := s.inFolder(mailbox, sc.names[fid], nil, func(of openedFolder) error {
			if !of.fi.attached || of.fi.row.fid != fid {
				changed = true
				return nil
			}
			now := time.Now()
			queued := false
			for _, r := range byFolder[fid] {
				st, err := of.d.Lstat(r.sum.ID + ".md")
				if err == nil && st.Mode&0o170000 == 0o100000 && stampOf(&st) == r.stamp && !r.racy {
					continue
				}
				res := loadRow(of.d, r.sum.ID, of.mb.uid, now)
				if res.err != nil {
					of.fi.remove(r.sum.ID)
					changed, queued = true, true
					continue
				}
				n := res.row
				if n.sortKey != r.sortKey || !summaryEqual(&n.sum, &r.sum) {
					changed = true
				}
				if n.sortKey != r.sortKey || !summaryEqual(&n.sum, &r.sum) || n.stamp != r.stamp || n.racy != r.racy {
					of.fi.x.w.add(&indexOp{gen: of.fi.gen, fid: fid, mid: of.fi.row.mid, row: n, size: n.size()})
					queued = true
				}
			}
			if queued {
				return of.fi.x.w.flush()
			}
			return nil
		})
		if err != nil && !errors.Is(err, ErrNotFound) {
			return changed, err
		}
	}
	return changed, nil
}

func summaryEqual(a, b *Summary) bool {
	return a.ID == b.ID && a.MessageID == b.MessageID && a.ThreadID == b.ThreadID && a.From == b.From &&
		slices.Equal(a.To, b.To) && a.Subject == b.Subject && a.Date.Equal(b.Date) &&
		a.ReceivedAt.Equal(b.ReceivedAt) && a.Read == b.Read && a.Trusted == b.Trusted &&
		a.Attachments == b.Attachments && a.Snippet == b.Snippet &&
		a.DeliveryStatus == b.DeliveryStatus && slices.Equal(a.Labels, b.Labels) && a.Starred == b.Starred
}
