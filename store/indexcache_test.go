package store

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestListTotalsFollowEveryChange: the totals a listing keeps between calls
// are counted again after every kind of change, through the store and
// behind its back, and not while the folder is at rest.
func TestListTotalsFollowEveryChange(t *testing.T) {
	atRest(t)
	s := newTestStore(t)
	inbox := filepath.Join(s.Path("agent"), "inbox")
	var ids []string
	for i := range 4 {
		ids = append(ids, deliver(t, s, "inbox", testMessage(i), "a kestrel flew by"))
	}
	unread := true
	total := func(q Query) int {
		t.Helper()
		p, err := s.List("agent", "inbox", q)
		if err != nil {
			t.Fatal(err)
		}
		return p.Total
	}
	check := func(what string, all, unreadN, word, wordUnread int) {
		t.Helper()
		if got := total(Query{}); got != all {
			t.Errorf("%s: total %d, want %d", what, got, all)
		}
		if got := total(Query{Unread: &unread}); got != unreadN {
			t.Errorf("%s: unread %d, want %d", what, got, unreadN)
		}
		if got := total(Query{Search: "kestrel"}); got != word {
			t.Errorf("%s: kestrel %d, want %d", what, got, word)
		}
		if got := total(Query{Search: "kestrel is:unread"}); got != wordUnread {
			t.Errorf("%s: kestrel is:unread %d, want %d", what, got, wordUnread)
		}
	}
	check("delivered", 4, 4, 4, 4)

	before := countsRun.Load()
	check("at rest", 4, 4, 4, 4)
	if n := countsRun.Load() - before; n != 0 {
		t.Errorf("%d totals counted again while nothing changed", n)
	}

	if _, _, err := s.SetRead("agent", "inbox", ids[:1], true, time.Now()); err != nil {
		t.Fatal(err)
	}
	check("one read", 4, 3, 4, 3)
	deliver(t, s, "inbox", testMessage(9), "other words")
	check("one more", 5, 4, 4, 3)
	if err := s.RemoveMessage("agent", "inbox", ids[1]); err != nil {
		t.Fatal(err)
	}
	check("one removed", 4, 3, 3, 2)

	// Behind the store's back: a file removed, then one edited in place
	// (the directory unchanged).
	if err := os.Remove(filepath.Join(inbox, ids[2]+".md")); err != nil {
		t.Fatal(err)
	}
	check("removed on disk", 3, 2, 2, 1)
	path := filepath.Join(inbox, ids[3]+".md")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	edited := bytes.Replace(data, []byte("kestrel"), []byte("sparrow"), 1)
	if bytes.Equal(edited, data) {
		t.Fatal("fixture: no word to edit")
	}
	if err := os.WriteFile(path, edited, 0o600); err != nil {
		t.Fatal(err)
	}
	check("edited on disk", 3, 2, 1, 0)

	// A rebuild starts over.
	if err := s.Reindex(); err != nil {
		t.Fatal(err)
	}
	before = countsRun.Load()
	check("rebuilt", 3, 2, 1, 0)
	if countsRun.Load() == before {
		t.Error("totals of the replaced database were reused")
	}
}
