package store

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// reopen closes s and opens its root and index again, as a restarted
// daemon does.
func reopen(t testing.TB, s *Store) *Store {
	t.Helper()
	root, idx := s.Root(), s.idx.path
	s.Close()
	s2, err := OpenIndexed(root, idx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	return s2
}

// settle waits out the window within which a file's stamp could hide a
// change, as a mailbox at rest has.
func settle() { time.Sleep(racyWindow + 50*time.Millisecond) }

// atRest makes every file count as settled at once (no racy window) for
// the rest of the test.
func atRest(t testing.TB) {
	old := racyWindow
	racyWindow = 0
	t.Cleanup(func() { racyWindow = old })
}

// allRows lists a folder whole, with every row's fields.
func allRows(t testing.TB, s *Store, folder string, q Query) []Summary {
	t.Helper()
	q.Limit = MaxLimit
	var out []Summary
	for {
		p, err := s.List("agent", folder, q)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Items...)
		if !p.HasMore {
			return out
		}
		q.Cursor = p.NextCursor
	}
}

// truth is what a store with an empty index lists: the rows parsed from
// the message files themselves.
func truth(t testing.TB, s *Store, folder string, q Query) []Summary {
	t.Helper()
	fresh, err := Open(s.Root())
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	return allRows(t, fresh, folder, q)
}

func sameRows(t testing.TB, what string, got, want []Summary) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, want %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Folder != w.Folder || !summaryEqual(&g, &w) {
			t.Fatalf("%s: row %d\n got %+v\nwant %+v", what, i, g, w)
		}
	}
}

var _ = filepath.Join
var _ = os.Remove
