package store

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// reopen closes s and opens its root again, as a restarted daemon does.
func reopen(t testing.TB, s *Store) *Store {
	t.Helper()
	root := s.Root()
	s.Close()
	s2, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	return s2
}

// settle waits out the window within which a file's stamp could hide a
// change, as a mailbox at rest has.
func settle() { time.Sleep(racyWindow + 50*time.Millisecond) }

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

// truth is what a store that never saw the folder before, with no index
// file, lists: the rows parsed from the message files themselves.
func truth(t testing.TB, s *Store, folder string, q Query) []Summary {
	t.Helper()
	os.Remove(filepath.Join(s.Path("agent"), indexFile(folder)))
	fresh, err := Open(s.Root())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		fresh.Close()
		os.Remove(filepath.Join(s.Path("agent"), indexFile(folder)))
	}()
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

func TestIndexFileSparesParsingAfterRestart(t *testing.T) {
	s := newTestStore(t)
	for i := range 50 {
		m := testMessage(i)
		m.ThreadID = fmt.Sprintf("t%d", i%5)
		m.Labels = []string{"l" + fmt.Sprint(i%3)}
		m.Date = m.Date.In(time.FixedZone("", 2*3600))
		deliver(t, s, "inbox", m, fmt.Sprintf("body %d with some words", i))
	}
	settle()
	before := allRows(t, s, "inbox", Query{})
	if len(before) != 50 {
		t.Fatalf("%d rows", len(before))
	}
	st, err := os.Lstat(filepath.Join(s.Path("agent"), indexFile("inbox")))
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o600 {
		t.Fatalf("index file: %v %v", st, err)
	}

	s = reopen(t, s)
	parsed := filesParsed.Load()
	after := allRows(t, s, "inbox", Query{})
	if n := filesParsed.Load() - parsed; n != 0 {
		t.Errorf("a restarted store parsed %d message files; the index file should spare them", n)
	}
	sameRows(t, "after restart", after, before)
	// Filters that read rows (one by one, and in one pass over the file),
	// and those that only need the entries.
	defer func(n int) { readAhead = n }(readAhead)
	for _, ahead := range []int{0, 1 << 20} {
		readAhead = ahead
		for _, q := range []Query{{Text: "body 1"}, {ThreadID: "t3"}, {Unread: ptr(true)}, {Subject: "message 4"}, {From: "s7@"}} {
			sameRows(t, fmt.Sprintf("read-ahead %d, query %+v", ahead, q), allRows(t, s, "inbox", q), truth(t, s, "inbox", q))
		}
	}
	if id, ok := s.FindByMessageID("agent", "inbox", "<m7@example.com>"); !ok || id == "" {
		t.Errorf("FindByMessageID after restart: %q %v", id, ok)
	}
}

// The owner edits, adds and removes files while the daemon is down: the
// restarted index shows the folder as it is.
func TestIndexFileAcrossRestartWithChangesBehindItsBack(t *testing.T) {
	s := newTestStore(t)
	inbox := filepath.Join(s.Path("agent"), "inbox")
	var ids []string
	for i := range 6 {
		ids = append(ids, deliver(t, s, "inbox", testMessage(i), "body"))
	}
	settle()
	allRows(t, s, "inbox", Query{})
	s.Close()

	os.Remove(filepath.Join(inbox, ids[1]+".md"))
	edited := testMessage(2)
	edited.Subject = "edited by hand"
	if err := os.WriteFile(filepath.Join(inbox, ids[2]+".md"), Render(edited, "new body"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(inbox, "by-hand.md"), Render(testMessage(40), "typed"), 0o600); err != nil {
		t.Fatal(err)
	}
	// An in-place edit that keeps the inode.
	f, err := os.OpenFile(filepath.Join(inbox, ids[3]+".md"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	m3 := testMessage(3)
	m3.Read = true
	f.Write(Render(m3, "read now"))
	f.Close()

	s2, err := Open(s.Root())
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	got := allRows(t, s2, "inbox", Query{})
	sameRows(t, "after changes", got, truth(t, s2, "inbox", Query{}))
	var subjects []string
	for _, r := range got {
		subjects = append(subjects, r.Subject)
	}
	if !slices.Contains(subjects, "edited by hand") || !slices.Contains(subjects, "Message 40") || slices.Contains(subjects, "Message 1") {
		t.Errorf("subjects %v", subjects)
	}
}

// Whatever sits under the index file's name, the listing is the folder's.
func TestIndexFileHostile(t *testing.T) {
	cases := map[string]func(path string) error{
		"garbage":   func(p string) error { return os.WriteFile(p, bytes.Repeat([]byte{0xA5}, 4096), 0o600) },
		"truncated": func(p string) error { return os.Truncate(p, 20) },
		"fifo":      func(p string) error { os.Remove(p); return mkfifo(p) },
		"symlink":   func(p string) error { os.Remove(p); return os.Symlink("/etc/passwd", p) },
		"directory": func(p string) error { os.Remove(p); return os.Mkdir(p, 0o700) },
		"empty":     func(p string) error { return os.WriteFile(p, nil, 0o600) },
		"flipped": func(p string) error {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b[len(b)/2] ^= 0xFF
			return os.WriteFile(p, b, 0o600)
		},
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range cases {
			if !yield(k) {
				return
			}
		}
	}) {
		t.Run(name, func(t *testing.T) {
			s := newTestStore(t)
			for i := range 8 {
				deliver(t, s, "inbox", testMessage(i), fmt.Sprintf("body %d", i))
			}
			settle()
			want := allRows(t, s, "inbox", Query{})
			s.Close()
			if err := cases[name](filepath.Join(s.Path("agent"), indexFile("inbox"))); err != nil {
				t.Fatal(err)
			}
			s2, err := Open(s.Root())
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			sameRows(t, name, allRows(t, s2, "inbox", Query{}), want)
			sameRows(t, name+", second listing", allRows(t, s2, "inbox", Query{Text: "body"}), want)
		})
	}
}

// The owner overwrites the index file while the daemon has it open: the
// rows no longer read back as written, and the index is rebuilt.
func TestIndexFileOverwrittenWhileOpen(t *testing.T) {
	s := newTestStore(t)
	for i := range 8 {
		deliver(t, s, "inbox", testMessage(i), fmt.Sprintf("body %d", i))
	}
	settle()
	want := allRows(t, s, "inbox", Query{})
	p := filepath.Join(s.Path("agent"), indexFile("inbox"))
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(bytes.Repeat([]byte{'x'}, 200), 8)
	f.Close()
	defer func(n int) { readAhead = n }(readAhead)
	readAhead = 0
	sameRows(t, "after overwrite, read ahead", allRows(t, s, "inbox", Query{Text: "body"}), want)
	f, err = os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(bytes.Repeat([]byte{'y'}, 200), 8)
	f.Close()
	sameRows(t, "after overwrite", allRows(t, s, "inbox", Query{}), want)
	if _, ok := s.FindByMessageID("agent", "inbox", "<m3@example.com>"); !ok {
		t.Error("FindByMessageID after overwrite")
	}
}

// Superseded rows are compacted away; the rows survive compaction.
func TestIndexFileCompaction(t *testing.T) {
	s := newTestStore(t)
	var ids []string
	for i := range 20 {
		ids = append(ids, deliver(t, s, "inbox", testMessage(i), "body"))
	}
	p := filepath.Join(s.Path("agent"), indexFile("inbox"))
	for round := range 120 {
		if _, _, err := s.SetRead("agent", "inbox", ids, round%2 == 0, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	// 20 rows rewritten 120 times would be 2400 records without compaction.
	fi := s.index("agent", "inbox")
	fi.mu.Lock()
	records := fi.log.records
	fi.mu.Unlock()
	if records > 2*20+1024+1 {
		t.Errorf("%d records in the index file (%d bytes): not compacted", records, st.Size())
	}
	settle()
	s = reopen(t, s)
	got := allRows(t, s, "inbox", Query{})
	sameRows(t, "after compaction", got, truth(t, s, "inbox", Query{}))
	for _, r := range got {
		if r.Read { // the last round marked everything unread
			t.Fatalf("row %s is read", r.ID)
		}
	}
}

// Past IndexCacheMessages, folders leave memory and come back from their
// index files.
func TestIndexCacheBound(t *testing.T) {
	old := IndexCacheMessages
	IndexCacheMessages = 30
	defer func() { IndexCacheMessages = old }()
	s := newTestStore(t)
	folders := []string{"inbox", "archive", "work", "later"}
	for _, f := range folders {
		for i := range 20 {
			deliver(t, s, f, testMessage(i), "body of "+f)
		}
	}
	settle()
	want := map[string][]Summary{}
	for _, f := range folders {
		want[f] = truth(t, s, f, Query{})
	}
	for range 3 {
		for _, f := range folders {
			sameRows(t, f, allRows(t, s, f, Query{}), want[f])
			// The folder just used is held (20); of the others at most
			// what fits the bound besides it.
			if n := s.indexed.Load(); n > IndexCacheMessages+20 {
				t.Fatalf("%d entries held with a bound of %d", n, IndexCacheMessages)
			}
		}
	}
}

// FuzzIndexFile puts arbitrary bytes where a folder's index file goes:
// whatever they are, the listing is exactly the folder's messages.
func FuzzIndexFile(f *testing.F) {
	s := newTestStore(f)
	for i := range 4 {
		deliver(f, s, "inbox", testMessage(i), fmt.Sprintf("body %d", i))
	}
	settle()
	want := allRows(f, s, "inbox", Query{})
	p := filepath.Join(s.Path("agent"), indexFile("inbox"))
	good, err := os.ReadFile(p)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(append(indexMagic[:], 0, 0, 0, 0, 0, 0, 0, 0))
	f.Add([]byte{})
	root := s.Root()
	s.Close()
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(root)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		sameRows(t, "fuzzed index file", allRows(t, s, "inbox", Query{}), want)
	})
}
