package store

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func mkfifo(path string) error { return unix.Mkfifo(path, 0o600) }

func listIDs(t *testing.T, s *Store, folder string) []string {
	t.Helper()
	p, err := s.List("agent", folder, Query{Limit: MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, it := range p.Items {
		ids = append(ids, it.ID)
	}
	if p.Total != len(ids) {
		t.Errorf("Total %d but %d items", p.Total, len(ids))
	}
	return ids
}

func TestIndexNoticesChangesBehindItsBack(t *testing.T) {
	s := newTestStore(t)
	inbox := filepath.Join(s.Path("agent"), "inbox")
	a := deliver(t, s, "inbox", testMessage(1), "a")
	b := deliver(t, s, "inbox", testMessage(2), "b")
	c := deliver(t, s, "inbox", testMessage(3), "c")
	if got := listIDs(t, s, "inbox"); !slices.Equal(got, []string{c, b, a}) {
		t.Fatalf("initial list %v", got)
	}

	// Removed by hand.
	if err := os.Remove(filepath.Join(inbox, b+".md")); err != nil {
		t.Fatal(err)
	}
	if got := listIDs(t, s, "inbox"); !slices.Equal(got, []string{c, a}) {
		t.Errorf("after removal: %v", got)
	}

	// Added by hand, plus files that are not messages.
	hand := testMessage(9)
	os.WriteFile(filepath.Join(inbox, "by-hand.md"), Render(hand, "typed"), 0o600)
	os.WriteFile(filepath.Join(inbox, "garbage.md"), []byte("not a message"), 0o600)
	os.WriteFile(filepath.Join(inbox, ".tmp-123"), Render(hand, "temp"), 0o600)
	os.WriteFile(filepath.Join(inbox, ".hidden.md"), Render(hand, "hidden"), 0o600)
	os.WriteFile(filepath.Join(inbox, "notes.txt"), Render(hand, "txt"), 0o600)
	if got := listIDs(t, s, "inbox"); !slices.Equal(got, []string{"by-hand", c, a}) {
		t.Errorf("after adding by hand: %v", got)
	}

	// Edited in place (same inode): the read flag flipped.
	path := filepath.Join(inbox, a+".md")
	data, _ := os.ReadFile(path)
	edited := bytes.Replace(data, []byte("read = false"), []byte("read = true"), 1)
	if bytes.Equal(edited, data) {
		t.Fatal("no read flag in file")
	}
	if err := os.WriteFile(path, edited, 0o600); err != nil {
		t.Fatal(err)
	}
	p, _ := s.List("agent", "inbox", Query{Limit: MaxLimit})
	if it := p.Items[2]; it.ID != a || !it.Read {
		t.Errorf("after in-place edit: %+v", it)
	}
	if cnt, _ := s.Counts("agent"); cnt.Unread != 2 || cnt.Total != 3 {
		t.Errorf("Counts after edits: %+v", cnt)
	}
}

// The same checks once the index has settled (no racy timestamps), so that
// the fstat comparisons themselves are what notices the change, including an
// in-place edit that keeps size and mtime (only ctime tells).
func TestIndexNoticesChangesWhenSettled(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for timestamps to settle")
	}
	s := newTestStore(t)
	inbox := filepath.Join(s.Path("agent"), "inbox")
	var ids []string
	for i := range 3 {
		ids = append(ids, deliver(t, s, "inbox", testMessage(i), "body"))
	}
	time.Sleep(racyWindow + 100*time.Millisecond)
	listIDs(t, s, "inbox")
	db, _ := s.idx.handle()
	var racy int
	if err := db.QueryRow("SELECT count(*) FROM messages WHERE racy").Scan(&racy); err != nil || racy != 0 {
		t.Errorf("%d rows still racy (%v)", racy, err)
	}
	if err := db.QueryRow("SELECT count(*) FROM folders WHERE racy AND name = 'inbox'").Scan(&racy); err != nil || racy != 0 {
		t.Errorf("directory still racy (%v)", err)
	}

	path := filepath.Join(inbox, ids[0]+".md")
	st, _ := os.Stat(path)
	data, _ := os.ReadFile(path)
	edited := bytes.Replace(data, []byte("Message 0"), []byte("Massage 0"), 1)
	os.WriteFile(path, edited, 0o600)
	os.Chtimes(path, st.ModTime(), st.ModTime())
	p, _ := s.List("agent", "inbox", Query{Limit: MaxLimit})
	if it := p.Items[2]; it.Subject != "Massage 0" {
		t.Errorf("same-size, same-mtime edit not noticed: %+v", it)
	}

	time.Sleep(racyWindow + 100*time.Millisecond)
	listIDs(t, s, "inbox")
	os.Remove(filepath.Join(inbox, ids[1]+".md"))
	if got := listIDs(t, s, "inbox"); !slices.Equal(got, []string{ids[2], ids[0]}) {
		t.Errorf("after settled removal: %v", got)
	}
}

func TestIndexSkipsForeignAndSpecialFiles(t *testing.T) {
	s := newTestStore(t)
	inbox := filepath.Join(s.Path("agent"), "inbox")
	a := deliver(t, s, "inbox", testMessage(1), "a")
	if err := mkfifo(filepath.Join(inbox, "fifo.md")); err != nil {
		t.Fatal(err)
	}
	os.Symlink(a+".md", filepath.Join(inbox, "link.md"))
	os.Mkdir(filepath.Join(inbox, "dir.md"), 0o700)
	done := make(chan []string, 1)
	go func() { done <- listIDs(t, s, "inbox") }()
	select {
	case got := <-done:
		if !slices.Equal(got, []string{a}) {
			t.Errorf("list = %v, want only %s", got, a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("List hung on a FIFO")
	}
}

func TestIndexLargeFiles(t *testing.T) {
	s := newTestStore(t)
	big := deliver(t, s, "inbox", testMessage(1), "start "+strings.Repeat("x", 10<<20))
	m := testMessage(2)
	m.Subject = strings.Repeat("s", 200<<10) // frontmatter larger than the head read
	long := deliver(t, s, "inbox", m, "tail body")
	p, err := s.List("agent", "inbox", Query{})
	if err != nil || p.Total != 2 {
		t.Fatalf("List = %+v %v", p.Total, err)
	}
	for _, it := range p.Items {
		switch it.ID {
		case big:
			if it.Snippet != "start "+strings.Repeat("x", snippetLen-6) {
				t.Errorf("snippet of big body: %q", trunc(it.Snippet))
			}
		case long:
			if it.Snippet != "tail body" || len(it.Subject) != 200<<10 {
				t.Errorf("long frontmatter: snippet %q subject %d bytes", it.Snippet, len(it.Subject))
			}
		}
	}
}

func TestListCursorWithFilter(t *testing.T) {
	s := newTestStore(t)
	for i := range 30 {
		m := testMessage(i)
		m.Read = i%2 == 0
		deliver(t, s, "inbox", m, "b")
	}
	unread := true
	q := Query{Limit: 4, Unread: &unread}
	var got []string
	for range 10 {
		p, err := s.List("agent", "inbox", q)
		if err != nil {
			t.Fatal(err)
		}
		if p.Total != 15 {
			t.Fatalf("Total = %d, want 15", p.Total)
		}
		for _, it := range p.Items {
			if it.Read {
				t.Errorf("read message %s in unread listing", it.ID)
			}
			got = append(got, it.Subject)
		}
		if !p.HasMore {
			break
		}
		q.Cursor = p.NextCursor
	}
	if len(got) != 15 || got[0] != "Message 29" || got[14] != "Message 1" {
		t.Errorf("paged unread: %v", got)
	}
}
