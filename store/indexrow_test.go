package store

import (
	"database/sql"
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
