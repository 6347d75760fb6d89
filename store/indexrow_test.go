package store

import (
	"database/sql"
	"hash/crc32"
	"strings"
	"testing"
)

// TestFreshRowReplacesAStaleOne: a row written as fresh (inserted without a
// lookup) whose id the folder still has a row of (its file was removed
// behind the store's back, and an id was handed out again) replaces that
// row and its full text, never leaving two or failing the batch.
func TestFreshRowReplacesAStaleOne(t *testing.T) {
	s := newTestStore(t)
	if _, err := s.List("agent", "inbox", Query{}); err != nil {
		t.Fatal(err)
	}
	fi := s.index("agent", "inbox")
	fi.mu.Lock()
	gen, fid, mid := fi.gen, fi.row.fid, fi.row.mid
	fi.mu.Unlock()
	m := testMessage(1)
	id := NewID(m.ReceivedAt, m.Subject)
	for i, body := range []string{"alpha words", "beta words", "beta words"} {
		r := newRow(id, m, body, fileStamp{ino: uint64(i + 1)}, true)
		s.idx.w.add(&indexOp{gen: gen, fid: fid, mid: mid, row: r, fresh: true, size: r.size()})
		if err := s.idx.w.flush(); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	db, _ := s.idx.handle()
	count := func(q string, args ...any) int {
		t.Helper()
		var n int
		if err := db.QueryRow(q, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count("SELECT count(*) FROM messages WHERE fid = ? AND id = ?", fid, id); n != 1 {
		t.Errorf("%d rows of %s", n, id)
	}
	var ino int64
	if err := db.QueryRow("SELECT ino FROM messages WHERE fid = ? AND id = ?", fid, id).Scan(&ino); err != nil && err != sql.ErrNoRows {
		t.Fatal(err)
	} else if ino != 3 {
		t.Errorf("row holds the stamp of write %d, want the last", ino)
	}
	scope := (&listScope{fid: fid}).token()
	if n := count("SELECT count(*) FROM fts WHERE fts MATCH ?", "alpha AND "+scope); n != 0 {
		t.Errorf("the replaced text still matches (%d)", n)
	}
	if n := count("SELECT count(*) FROM fts WHERE fts MATCH ?", "beta AND "+scope); n != 1 {
		t.Errorf("the new text matches %d rows, want 1", n)
	}
}

// TestTextHashUnchanged pins the text hash the index stores: CRC-32C of the
// texts each followed by a NUL, and their length. A large body is hashed
// without being copied into a new array.
func TestTextHashUnchanged(t *testing.T) {
	r := &indexRow{sum: Summary{Subject: "Sübject", From: "a@example.com"}, recipients: "b@example.com, c@example.com",
		attachments: "a.pdf\nb.png", body: strings.Repeat("A line of the body, with ünïcode.\n", 3000)}
	var all []byte
	for _, s := range []string{r.sum.Subject, r.sum.From, r.recipients, r.cc, r.body, r.attachments} {
		all = append(append(all, s...), 0)
	}
	want := int64(uint64(crc32.Checksum(all, crc32.MakeTable(crc32.Castagnoli)))<<32 | uint64(len(all)))
	if got := r.textHash(); got != want {
		t.Fatalf("textHash = %#x, want %#x", got, want)
	}
	if allocs := testing.AllocsPerRun(10, func() { r.textHash() }); allocs != 0 {
		t.Fatalf("textHash allocates %v times, want 0", allocs)
	}
}

// BenchmarkTextHash hashes the full text of a row with a 100 KiB body.
func BenchmarkTextHash(b *testing.B) {
	r := &indexRow{sum: Summary{Subject: "a subject", From: "a@example.com"}, body: strings.Repeat("A line of a typical message body.\n", 3000)}
	b.SetBytes(int64(len(r.body)))
	b.ReportAllocs()
	for b.Loop() {
		r.textHash()
	}
}

// TestTextCannotForgeAScopeTerm: bytes that are not UTF-8, which the
// engine's tokenizer reads leniently (a stray 0xA7, or § written in three
// or four bytes, it takes for §), never make a message's text hold another
// folder's or mailbox's scope term.
func TestTextCannotForgeAScopeTerm(t *testing.T) {
	s := newTestStore(t)
	if _, err := s.List("agent", "inbox", Query{}); err != nil {
		t.Fatal(err)
	}
	fi := s.index("agent", "inbox")
	fi.mu.Lock()
	gen, fid, mid := fi.gen, fi.row.fid, fi.row.mid
	fi.mu.Unlock()
	m := testMessage(1)
	m.Subject = "subject \xe0\x82\xa7f99997"
	m.To = []string{"x \xf0\x80\x82\xa7f99998"}
	id := NewID(m.ReceivedAt, m.Subject)
	body := "body \xa7f99999 \xc0\x82\xa7m99999 " + strings.Repeat("filler words ", 2000) + "\xa7m99998 tail"
	r := newRow(id, m, body, fileStamp{ino: 1}, true)
	s.idx.w.add(&indexOp{gen: gen, fid: fid, mid: mid, row: r, fresh: true, size: r.size()})
	if err := s.idx.w.flush(); err != nil {
		t.Fatal(err)
	}
	db, _ := s.idx.handle()
	for _, term := range []string{"f99997", "f99998", "f99999", "m99999", "m99998"} {
		var n int
		if err := db.QueryRow("SELECT count(*) FROM fts WHERE fts MATCH ?", `"`+scopeMark+term+`"`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("the text made the scope term %s%s", scopeMark, term)
		}
	}
	var n int
	if err := db.QueryRow("SELECT count(*) FROM fts WHERE fts MATCH ?", "tail AND "+(&listScope{fid: fid}).token()).Scan(&n); err != nil || n != 1 {
		t.Errorf("the row's own text and scope: %d matches (%v), want 1", n, err)
	}
}
