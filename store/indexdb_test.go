package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testwait"
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

// searchIDs lists the ids a query finds in the inbox.
func searchIDs(t testing.TB, s *Store, q string) []string {
	t.Helper()
	return summaryIDs(allRows(t, s, "inbox", Query{Search: q}))
}

func TestIndexSparesParsingAfterRestart(t *testing.T) {
	atRest(t)
	s := newTestStore(t)
	for i := range 50 {
		m := testMessage(i)
		m.ThreadID = fmt.Sprintf("t%d", i%5)
		m.Labels = []string{"l" + fmt.Sprint(i%3)}
		m.Date = m.Date.In(time.FixedZone("", 2*3600))
		deliver(t, s, "inbox", m, fmt.Sprintf("body %d with some words", i))
	}
	before := allRows(t, s, "inbox", Query{})
	if len(before) != 50 {
		t.Fatalf("%d rows", len(before))
	}
	s = reopen(t, s)
	parsed := filesParsed.Load()
	after := allRows(t, s, "inbox", Query{})
	if n := filesParsed.Load() - parsed; n != 0 {
		t.Errorf("a restarted store parsed %d message files; the index should spare them", n)
	}
	sameRows(t, "after restart", after, before)
	for _, q := range []Query{{Text: "body 1"}, {ThreadID: "t3"}, {Unread: ptr(true)}, {Subject: "message 4"}, {From: "s7@"}, {Label: "L2"}, {Search: "words -label:l1"}} {
		sameRows(t, fmt.Sprintf("query %+v", q), allRows(t, s, "inbox", q), truth(t, s, "inbox", q))
	}
	if id, ok := s.FindByMessageID("agent", "inbox", "<m7@example.com>"); !ok || id == "" {
		t.Errorf("FindByMessageID after restart: %q %v", id, ok)
	}
}

// The owner edits, adds and removes files while the daemon is down: the
// restarted index shows the folder as it is, in listings and in search.
func TestIndexAcrossRestartWithChangesBehindItsBack(t *testing.T) {
	atRest(t)
	s := newTestStore(t)
	inbox := filepath.Join(s.Path("agent"), "inbox")
	var ids []string
	for i := range 5 {
		ids = append(ids, deliver(t, s, "inbox", testMessage(i), fmt.Sprintf("original body %d", i)))
	}
	if got := searchIDs(t, s, "original"); len(got) != 5 {
		t.Fatalf("before: %v", got)
	}
	root, idx := s.Root(), s.idx.path
	s.Close()

	// Edited in place (same name), replaced (new inode), removed, added.
	path := filepath.Join(inbox, ids[0]+".md")
	data, _ := os.ReadFile(path)
	os.WriteFile(path, bytes.Replace(data, []byte("original body 0"), []byte("rewritten quokka"), 1), 0o600)
	data, _ = os.ReadFile(filepath.Join(inbox, ids[1]+".md"))
	os.WriteFile(filepath.Join(inbox, ".swap"), bytes.Replace(data, []byte("Message 1"), []byte("Renamed wombat"), 1), 0o600)
	os.Rename(filepath.Join(inbox, ".swap"), filepath.Join(inbox, ids[1]+".md"))
	os.Remove(filepath.Join(inbox, ids[2]+".md"))
	hand := testMessage(9)
	os.WriteFile(filepath.Join(inbox, "by-hand.md"), Render(hand, "typed by hand: platypus"), 0o600)

	s, err := OpenIndexed(root, idx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	sameRows(t, "after restart", allRows(t, s, "inbox", Query{}), truth(t, s, "inbox", Query{}))
	for q, want := range map[string][]string{
		"quokka":            {ids[0]},
		"original":          {ids[4], ids[3], ids[1]},
		"subject:wombat":    {ids[1]},
		"platypus":          {"by-hand"},
		`"original body 2"`: nil,
	} {
		if got := searchIDs(t, s, q); !slices.Equal(got, want) {
			t.Errorf("%q: %v, want %v", q, got, want)
		}
	}
}

// A damaged or deleted index is rebuilt from the files, at start or when
// damage shows in use.
func TestIndexDamagedOrDeletedIsRebuilt(t *testing.T) {
	atRest(t)
	for _, damage := range []string{"deleted", "garbage", "pages overwritten", "truncated"} {
		t.Run(damage, func(t *testing.T) {
			s := newTestStore(t)
			for i := range 30 {
				deliver(t, s, "inbox", testMessage(i), fmt.Sprintf("body %d kangaroo", i))
			}
			want := allRows(t, s, "inbox", Query{})
			root, idx := s.Root(), s.idx.path
			s.Close()
			switch damage {
			case "deleted":
				removeDB(idx)
			case "garbage":
				os.WriteFile(idx, bytes.Repeat([]byte("not a database "), 1000), 0o600)
			case "pages overwritten":
				f, _ := os.OpenFile(idx, os.O_WRONLY, 0)
				st, _ := f.Stat()
				f.WriteAt(bytes.Repeat([]byte{0xff}, int(st.Size())-4096), 4096)
				f.Close()
			case "truncated":
				os.Truncate(idx, 8192)
			}
			s2, err := OpenIndexed(root, idx)
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			sameRows(t, damage, allRows(t, s2, "inbox", Query{}), want)
			db, _ := s2.idx.handle()
			var check string
			if err := db.QueryRow("PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
				t.Errorf("the index in use is not whole: %q %v", check, err)
			}
			if got := searchIDs(t, s2, "kangaroo"); len(got) != 30 {
				t.Errorf("search after repair: %d rows", len(got))
			}
		})
	}
}

// An index written by a newer mailctl is refused, naming both versions; an
// older layout is rebuilt.
func TestIndexVersions(t *testing.T) {
	s := newTestStore(t)
	a := deliver(t, s, "inbox", testMessage(1), "a")
	root, idx := s.Root(), s.idx.path
	s.Close()
	setVersion := func(v int) {
		t.Helper()
		db, err := sql.Open("sqlite", idx)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Exec(fmt.Sprintf("PRAGMA user_version = %d", v)); err != nil {
			t.Fatal(err)
		}
	}
	setVersion(IndexVersion + 1)
	_, err := OpenIndexed(root, idx)
	if !errors.Is(err, ErrIndexVersion) || !strings.Contains(err.Error(), fmt.Sprintf("format version %d", IndexVersion+1)) ||
		!strings.Contains(err.Error(), fmt.Sprintf("reads versions up to %d", IndexVersion)) ||
		!strings.Contains(err.Error(), "remove it (the index is rebuilt from the mail)") {
		t.Fatalf("newer index: %v", err)
	}
	if v, err := DatabaseVersion(idx); err != nil || v != IndexVersion+1 {
		t.Fatalf("DatabaseVersion of the newer index: %d, %v", v, err)
	}
	if _, err := os.Stat(idx); err != nil {
		t.Fatalf("the newer index was removed: %v", err)
	}
	setVersion(IndexVersion - 1)
	s, err = OpenIndexed(root, idx)
	if err != nil {
		t.Fatalf("older index: %v", err)
	}
	defer s.Close()
	if got := summaryIDs(allRows(t, s, "inbox", Query{})); !slices.Equal(got, []string{a}) {
		t.Errorf("after an older index: %v", got)
	}
}

// The index is out of the owner's reach: root-only directory, root-only
// file, nothing in the mailbox.
func TestIndexOutsideTheMailbox(t *testing.T) {
	s := newTestStore(t)
	deliver(t, s, "inbox", testMessage(1), "a")
	allRows(t, s, "inbox", Query{})
	dir, err := os.Lstat(filepath.Dir(s.idx.path))
	if err != nil || !dir.IsDir() || dir.Mode().Perm() != 0o700 {
		t.Errorf("index directory: %v %v", dir, err)
	}
	f, err := os.Lstat(s.idx.path)
	if err != nil || !f.Mode().IsRegular() || f.Mode().Perm() != 0o600 {
		t.Errorf("index file: %v %v", f, err)
	}
	filepath.Walk(s.Root(), func(p string, fi os.FileInfo, err error) error {
		if err == nil && strings.Contains(filepath.Base(p), "index") {
			t.Errorf("index data inside the store: %s", p)
		}
		return nil
	})
	// A directory that is a symlink, or someone else's, is refused.
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(t.TempDir(), link)
	if _, err := OpenIndexed(filepath.Join(t.TempDir(), "m"), filepath.Join(link, IndexFile)); err == nil {
		t.Error("an index directory that is a symlink was used")
	}
}

// The index files of the earlier format that the daemon left in mailboxes
// are removed: regular files of the owner only, nothing through a link.
func TestLegacyIndexFilesRemoved(t *testing.T) {
	s := newTestStore(t)
	mb := s.Path("agent")
	legacy := legacyIndexName("inbox")
	os.WriteFile(filepath.Join(mb, legacy), []byte("MCTLIDX3old"), 0o600)
	target := filepath.Join(t.TempDir(), "keep")
	os.WriteFile(target, []byte("keep"), 0o600)
	os.Symlink(target, filepath.Join(mb, legacyIndexName("sent")))
	os.WriteFile(filepath.Join(mb, "notes"+legacy), []byte("mine"), 0o600)
	allRows(t, s, "inbox", Query{})
	if _, err := os.Lstat(filepath.Join(mb, legacy)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("legacy index file left: %v", err)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "keep" {
		t.Errorf("the link's target: %q %v", b, err)
	}
	for _, n := range []string{legacyIndexName("sent"), "notes" + legacy} {
		if _, err := os.Lstat(filepath.Join(mb, n)); err != nil {
			t.Errorf("%s removed: %v", n, err)
		}
	}
}

// A mailbox deleted and made again (here behind the store's back, while it
// was stopped, with its folders' stamps planted in the index as if they
// matched) shows nothing of the earlier mailbox's index.
func TestIndexForgetsAnEarlierMailboxOfTheSameName(t *testing.T) {
	atRest(t)
	s := newTestStore(t)
	deliver(t, s, "inbox", testMessage(1), "the earlier owner's secret: narwhal")
	if got := searchIDs(t, s, "narwhal"); len(got) != 1 {
		t.Fatalf("before: %v", got)
	}
	root, idx := s.Root(), s.idx.path
	s.Close()
	if err := os.RemoveAll(filepath.Join(root, "agent")); err != nil {
		t.Fatal(err)
	}
	s, err := OpenIndexed(root, idx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Create("agent", os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(root, "agent", "inbox"))
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	db, _ := s.idx.handle()
	if _, err := db.Exec("UPDATE folders SET dir_ino = ?, dir_size = ?, dir_mtime = ?, dir_ctime = ?, racy = 0, scanned = 1",
		int64(sys.Ino), sys.Size, sys.Mtim.Nano(), sys.Ctim.Nano()); err != nil {
		t.Fatal(err)
	}
	if got := searchIDs(t, s, "narwhal"); len(got) != 0 {
		t.Errorf("the new mailbox shows the earlier one's messages: %v", got)
	}
	var n int
	db.QueryRow("SELECT count(*) FROM messages").Scan(&n)
	if n != 0 {
		t.Errorf("%d rows of the earlier mailbox kept", n)
	}
}

// While IndexAll reads a folder's files (a first start, a reindex), a
// listing of that folder waits for it a while, then says so: ErrIndexing,
// with how many files were read, never a partial listing.
func TestListingWhileTheIndexIsBuilt(t *testing.T) {
	atRest(t)
	s := newTestStore(t)
	for i := range 40 {
		deliver(t, s, "inbox", testMessage(i), "body")
	}
	s.Close()
	removeDB(s.idx.path)
	s = reopen(t, s)
	reading, release := make(chan struct{}), make(chan struct{})
	testHookBuilding = func(folder string) {
		if folder == "inbox" {
			close(reading)
			<-release
		}
	}
	t.Cleanup(func() { testHookBuilding = nil })
	indexed := make(chan int, 1)
	go func() {
		n, err := s.IndexAll(context.Background())
		if err != nil {
			t.Error(err)
		}
		indexed <- n
	}()
	testwait.Recv(t, "IndexAll to begin reading inbox", reading)
	old := buildWait
	buildWait = 0
	_, err := s.List("agent", "inbox", Query{})
	if !errors.Is(err, ErrIndexing) || !strings.Contains(err.Error(), "agent/inbox") {
		t.Errorf("listing while the folder is read: %v", err)
	}
	buildWait = time.Minute
	t.Cleanup(func() { buildWait = old })
	listed := make(chan Page, 1)
	go func() {
		p, err := s.List("agent", "inbox", Query{Limit: MaxLimit})
		if err != nil {
			t.Error(err)
		}
		listed <- p
	}()
	close(release)
	if n := testwait.Recv(t, "IndexAll to return", indexed); n != 40 {
		t.Errorf("IndexAll indexed %d", n)
	}
	if p := testwait.Recv(t, "the listing to be answered once the build ended", listed); p.Total != 40 || len(p.Items) != 40 {
		t.Errorf("listing after the build: %d of %d", len(p.Items), p.Total)
	}
}
