package store

import (
	"database/sql"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// The rows of the index database: what a message's row and full text hold,
// and how they are written.

// indexRow is what the index keeps of one message.
type indexRow struct {
	sum     Summary // Folder unset
	sortKey int64
	stamp   fileStamp
	racy    bool
	// The full text, by column of the fts table (subject and sender are
	// in sum).
	recipients, cc, attachments, body string
}

// newRow builds the index row of a message stored under id, in a file with
// stamp st. The id is the file name, whatever the frontmatter says.
func newRow(id string, m *Message, body string, st fileStamp, racy bool) *indexRow {
	t := m.ReceivedAt
	if t.IsZero() {
		t = m.Date
	}
	var names []string
	for _, a := range m.Attachments {
		names = append(names, a.Filename)
	}
	if len(body) > maxIndexedBody {
		body = strings.ToValidUTF8(body[:maxIndexedBody], "")
	}
	to := m.To
	if len(m.Bcc) > 0 {
		to = append(append([]string(nil), m.To...), m.Bcc...)
	}
	return &indexRow{
		sum: Summary{
			ID: id, MessageID: m.MessageID, ThreadID: m.ThreadID, From: m.From, To: m.To,
			Subject: m.Subject, Date: m.Date, ReceivedAt: m.ReceivedAt, Read: m.Read,
			Trusted: m.Trusted, Attachments: len(m.Attachments), Snippet: Snippet(body, snippetLen),
			DeliveryStatus: m.DeliveryStatus, Labels: m.Labels, Starred: m.Starred,
		},
		sortKey: UnixNano(t), stamp: st, racy: racy,
		recipients: strings.Join(to, ", "), cc: strings.Join(m.Cc, ", "), attachments: strings.Join(names, "\n"), body: body,
	}
}

// size is roughly the memory the row holds, for the writer's bound.
func (r *indexRow) size() int {
	return 512 + len(r.body) + len(r.sum.Subject) + len(r.sum.Snippet) + len(r.recipients) + len(r.cc) + len(r.attachments)
}

// listSep separates the elements of a list column.
const listSep = "\x1f"

// listElem is a list element as a list column holds it: a separator in it
// (a label or an address written by hand in the frontmatter, which is the
// owner's input) becomes U+FFFD, so that it is one element, never split
// into others a filter would find.
func listElem(s string) string { return strings.ReplaceAll(s, listSep, "\uFFFD") }

// joinList is elems as a list column holds them.
func joinList(elems []string) string {
	if !slices.ContainsFunc(elems, func(e string) bool { return strings.Contains(e, listSep) }) {
		return strings.Join(elems, listSep)
	}
	out := make([]string, len(elems))
	for i, e := range elems {
		out[i] = listElem(e)
	}
	return strings.Join(out, listSep)
}

// labelFilter is what a label filter looks for in the labels column.
func labelFilter(label string) string { return listSep + listElem(LabelKey(label)) + listSep }

// fold is the case-insensitive form the index compares structured filters
// in.
func fold(s string) string { return strings.ToLower(s) }

// labelsKey is the column label filters search: every label's LabelKey,
// each between separators.
func labelsKey(labels []string) string {
	if len(labels) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(listSep)
	for _, l := range labels {
		b.WriteString(listElem(LabelKey(l)))
		b.WriteString(listSep)
	}
	return b.String()
}

// textHash condenses a row's full text, so that a change of flags alone
// (read, labels) does not rewrite it: CRC-32C (which the CPU computes) in
// the high half and the text's length in the low one. Two different texts
// of one length share a hash once in 2^32; the cost of that is search
// text not rewritten for an edit of the file's words alone.
func (r *indexRow) textHash() int64 {
	var crc uint32
	var n int
	// Each text goes through buf a block at a time: []byte(s) would copy a
	// body of up to maxIndexedBody into a new array for every row.
	bp := hashBufs.Get().(*[4096]byte)
	defer hashBufs.Put(bp)
	buf := bp[:]
	for _, s := range []string{r.sum.Subject, r.sum.From, r.recipients, r.cc, r.body, r.attachments} {
		n += len(s) + 1
		for len(s) > 0 {
			k := copy(buf, s)
			crc = crc32.Update(crc, castagnoli, buf[:k])
			s = s[k:]
		}
		buf[0] = 0
		crc = crc32.Update(crc, castagnoli, buf[:1])
	}
	return int64(uint64(crc)<<32 | uint64(uint32(n)))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// hashBufs are textHash's blocks.
var hashBufs = sync.Pool{New: func() any { return new([4096]byte) }}

func timeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Format(time.RFC3339Nano)
}

func parseTimeText(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, _ := time.Parse(time.RFC3339Nano, s)
	if _, off := t.Zone(); off == 0 && strings.HasSuffix(s, "Z") {
		t = t.UTC()
	}
	return t
}

// rowWriter writes rows in one transaction through statements prepared
// once for it: preparing a statement costs as much as running it.
type rowWriter struct {
	x                                         *indexDB
	tx                                        *sql.Tx
	find, update, insert, ftsDel, ftsAdd, del *sql.Stmt
}

func newRowWriter(x *indexDB, tx *sql.Tx) (*rowWriter, error) {
	w := &rowWriter{x: x, tx: tx}
	for _, p := range []struct {
		st **sql.Stmt
		q  string
	}{
		{&w.find, "SELECT rid, text_hash FROM messages WHERE fid = ? AND id = ?"},
		{&w.update, `UPDATE messages SET sort_key=?, ino=?, size=?, mtime=?, ctime=?, racy=?, read=?, starred=?, trusted_ok=?,
			message_id=?, thread_id=?, sender=?, recipients=?, subject=?, date=?, received=?, trusted=?, attachments=?, snippet=?,
			status=?, labels=?, labels_fold=?, from_fold=?, subj_fold=?, text_hash=? WHERE rid=?`},
		{&w.insert, `INSERT OR IGNORE INTO messages(fid, mid, id, sort_key, ino, size, mtime, ctime, racy, read, starred, trusted_ok,
			message_id, thread_id, sender, recipients, subject, date, received, trusted, attachments, snippet,
			status, labels, labels_fold, from_fold, subj_fold, text_hash)
			VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`},
		{&w.ftsDel, "DELETE FROM fts WHERE rowid = ?"},
		{&w.ftsAdd, "INSERT INTO fts(rowid, subject, sender, recipients, cc, body, attachments, scope) VALUES(?, ?, ?, ?, ?, ?, ?, ?)"},
		{&w.del, "DELETE FROM messages WHERE rid = ?"},
	} {
		st, err := tx.Prepare(p.q)
		if err != nil {
			w.close()
			return nil, err
		}
		*p.st = st
	}
	return w, nil
}

func (w *rowWriter) close() {
	for _, st := range []*sql.Stmt{w.find, w.update, w.insert, w.ftsDel, w.ftsAdd, w.del} {
		if st != nil {
			st.Close()
		}
	}
}

// writeRows runs fn with a rowWriter on tx, a write transaction of x.
func writeRows(x *indexDB, tx *sql.Tx, fn func(w *rowWriter) error) error {
	w, err := newRowWriter(x, tx)
	if err != nil {
		return err
	}
	defer w.close()
	return fn(w)
}

// put writes (inserts or replaces) a message's row and its full text.
// With fresh (the row is most likely new: a message just delivered, a file
// a scan found no row for) it inserts without looking the row up first,
// and replaces the row only if the insert finds one there.
func (w *rowWriter) put(fid, mid int64, r *indexRow, fresh bool) error {
	w.x.changes.touch(fid)
	s := &r.sum
	hash := r.textHash()
	cols := []any{r.sortKey, int64(r.stamp.ino), r.stamp.size, r.stamp.mtime, r.stamp.ctime, r.racy, s.Read, s.Starred,
		s.Trusted == TrustedValue, s.MessageID, s.ThreadID, s.From, joinList(s.To), s.Subject,
		timeText(s.Date), timeText(s.ReceivedAt), s.Trusted, s.Attachments, s.Snippet, s.DeliveryStatus,
		joinList(s.Labels), labelsKey(s.Labels), fold(s.From), fold(s.Subject), hash}
	var rid, oldHash int64
	if fresh {
		var err error
		if rid, err = w.insertRow(fid, mid, s.ID, cols); err != nil || rid != 0 {
			return w.addText(err, rid, fid, mid, r)
		}
	}
	err := w.find.QueryRow(fid, s.ID).Scan(&rid, &oldHash)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if rid != 0 {
		if _, err := w.update.Exec(append(cols, rid)...); err != nil || oldHash == hash {
			return err
		}
		if _, err := w.ftsDel.Exec(rid); err != nil {
			return err
		}
	} else {
		if rid, err = w.insertRow(fid, mid, s.ID, cols); err != nil {
			return err
		}
		if rid == 0 {
			return fmt.Errorf("index: row %s of folder %d neither found nor inserted", s.ID, fid)
		}
	}
	return w.addText(nil, rid, fid, mid, r)
}

// insertRow inserts a message's row and returns its rowid, or 0 when the
// folder has a row of that id already.
func (w *rowWriter) insertRow(fid, mid int64, id string, cols []any) (int64, error) {
	res, err := w.insert.Exec(append([]any{fid, mid, id}, cols...)...)
	if err != nil {
		return 0, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return 0, err
	}
	return res.LastInsertId()
}

// addText indexes the full text of row rid, unless err.
func (w *rowWriter) addText(err error, rid, fid, mid int64, r *indexRow) error {
	if err != nil {
		return err
	}
	s := &r.sum
	// scope lets the engine select a folder's or a mailbox's rows itself.
	_, err = w.ftsAdd.Exec(rid, ftsText(s.Subject), ftsText(s.From), ftsText(r.recipients), ftsText(r.cc), bodyText(r.body),
		ftsText(r.attachments), scopeTerms(fid, mid))
	return err
}

// remove deletes a message's row, if there is one.
func (w *rowWriter) remove(fid int64, id string) error {
	w.x.changes.touch(fid)
	var rid, hash int64
	err := w.find.QueryRow(fid, id).Scan(&rid, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := w.ftsDel.Exec(rid); err != nil {
		return err
	}
	_, err = w.del.Exec(rid)
	return err
}

// scopeMark starts the full-text index's scope terms. The tokenizer keeps it
// in a word (tokenchars), and the store takes it out of every text it
// indexes or searches for (ftsText, ftsQuote; elsewhere it separates words,
// as it would anyway), so no search term can be or match a scope term.
const scopeMark = "§"

// scopeTerms are the words that put a row in its folder and its mailbox.
func scopeTerms(fid, mid int64) string {
	return fmt.Sprintf("%sf%d %sm%d", scopeMark, fid, scopeMark, mid)
}

// ftsText is text as the full-text index takes it. Bytes that are not
// UTF-8 become U+FFFD first: the engine's tokenizer reads them leniently
// (a stray 0xA7 byte, or § written in three or four bytes, it takes for
// §), so left in they would make a scope term of text.
func ftsText(s string) string {
	// ValidString reads ASCII eight bytes at a time; ToValidUTF8 decodes
	// every rune even of text it leaves as it is.
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return strings.ReplaceAll(s, scopeMark, " ")
}
