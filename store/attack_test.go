package store

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Attacks on drafts, labels and purge by the mailbox owner (planted links,
// FIFOs, foreign files, hand-edited frontmatter) and by careless arguments.

// TestPurgeBeforeEdgeDates: a date outside what Unix nanoseconds can hold
// (before 1678, after 2262) must not wrap around. "Before the year 1000"
// purges nothing; "before the year 3000" purges everything; the listing
// filters agree.
func TestPurgeBeforeEdgeDates(t *testing.T) {
	for _, tc := range []struct {
		before time.Time
		all    bool
	}{
		{time.Time{}, false},
		{time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC), false},
		{time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC), false},
		{time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC), false},
		{time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), true},
		{time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), true},
	} {
		s := newTestStore(t)
		for i := range 3 {
			id := deliver(t, s, "inbox", testMessage(i), "b")
			if err := s.Move("agent", id, "inbox", "trash"); err != nil {
				t.Fatal(err)
			}
		}
		if got := summaryIDs(allRows(t, s, "trash", Query{Until: &tc.before})); len(got) != map[bool]int{true: 3}[tc.all] {
			t.Errorf("until %v lists %v", tc.before, got)
		}
		if got := summaryIDs(allRows(t, s, "trash", Query{Since: &tc.before})); len(got) != map[bool]int{false: 3}[tc.all] {
			t.Errorf("since %v lists %v", tc.before, got)
		}
		purged, err := s.PurgeBefore("agent", "trash", tc.before)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{true: 3}[tc.all]; len(purged) != want {
			t.Errorf("PurgeBefore(%v) purged %d messages, want %d", tc.before, len(purged), want)
		}
	}
}

// TestIndexKeepsDatesOutsideNanoseconds: a hand-edited received_at of the
// year 1 or 9999 sorts where it belongs and is listed as written, also
// from a persisted index after a restart.
func TestIndexKeepsDatesOutsideNanoseconds(t *testing.T) {
	s := newTestStore(t)
	old, far := testMessage(1), testMessage(2)
	old.Date = time.Date(1, 2, 3, 4, 5, 6, 0, time.UTC)
	old.ReceivedAt = old.Date
	far.Date = time.Date(9999, 2, 3, 4, 5, 6, 0, time.UTC)
	far.ReceivedAt = far.Date
	a := deliver(t, s, "inbox", old, "old")
	m := deliver(t, s, "inbox", testMessage(3), "now")
	z := deliver(t, s, "inbox", far, "far")
	check := func(what string) {
		rows := allRows(t, s, "inbox", Query{})
		if got := summaryIDs(rows); !slices.Equal(got, []string{z, m, a}) {
			t.Errorf("%s: order %v, want newest first %v", what, got, []string{z, m, a})
		}
		for _, r := range rows {
			want := map[string]time.Time{a: old.Date, z: far.Date, m: testMessage(3).Date}[r.ID]
			if !r.Date.Equal(want) {
				t.Errorf("%s: %s listed with date %v, want %v", what, r.ID, r.Date, want)
			}
		}
	}
	check("fresh")
	s = reopen(t, s)
	check("after a restart")
}

// TestDraftAttachmentsPlanted: the owner replaces a draft's attachments
// folder or files by symlinks, FIFOs, hard links to root's files, a huge
// file, or points the frontmatter elsewhere. Reading them for a send
// refuses each, at once, and nothing outside the mailbox is read or changed;
// rewriting and removing the draft removes only the mailbox's own entries.
func TestDraftAttachmentsPlanted(t *testing.T) {
	requireRoot(t)
	v := newVictim(t)
	s := newOwnedStore(t)
	drafts := filepath.Join(s.Path("agent"), "drafts")
	att := []AttachmentData{{Filename: "a.txt", ContentType: "text/plain", Data: []byte("mine")}}
	newDraft := func() (string, *Message) {
		id, _, err := s.Deliver("agent", "drafts", testMessage(1), "draft", nil, att)
		if err != nil {
			t.Fatal(err)
		}
		m, _, err := s.Get("agent", "drafts", id)
		if err != nil {
			t.Fatal(err)
		}
		return id, m
	}
	// A world-writable directory of another user, to see that nothing is
	// ever chowned or removed there either.
	if err := os.Link(v.file, filepath.Join(v.dir, "extra")); err != nil {
		t.Fatal(err)
	}
	before := v.snapshot(t)

	plant := map[string]func(dir, file string) error{
		"symlinked folder": func(dir, _ string) error { os.RemoveAll(dir); return os.Symlink(v.dir, dir) },
		"symlinked file":   func(_, file string) error { os.Remove(file); return os.Symlink(v.file, file) },
		"hard link":        func(_, file string) error { os.Remove(file); return os.Link(v.file, file) },
		"fifo": func(_, file string) error {
			os.Remove(file)
			if err := syscall.Mkfifo(file, 0o600); err != nil {
				return err
			}
			return os.Chown(file, ownerUID, ownerGID)
		},
		"directory": func(_, file string) error {
			os.Remove(file)
			if err := os.Mkdir(file, 0o700); err != nil {
				return err
			}
			return os.Chown(file, ownerUID, ownerGID)
		},
		"huge file": func(_, file string) error {
			os.Remove(file)
			f, err := os.Create(file)
			if err != nil {
				return err
			}
			defer f.Close()
			f.Chown(ownerUID, ownerGID)
			return f.Truncate(MaxDraftAttachmentBytes + 1)
		},
	}
	for name, fn := range plant {
		t.Run(name, func(t *testing.T) {
			id, m := newDraft()
			dir := filepath.Join(drafts, id+attSuffix)
			if err := fn(dir, filepath.Join(dir, "a.txt")); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { _, err := s.ReadAttachments("agent", "drafts", id, m); done <- err }()
			select {
			case err := <-done:
				if err == nil {
					t.Errorf("ReadAttachments read a planted %s", name)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("ReadAttachments hangs on a planted %s", name)
			}
			if err := s.Rewrite("agent", "drafts", id, func(m *Message) (*string, error) { b := "rewritten!"; return &b, nil }, []AttachmentData{}); err != nil {
				t.Errorf("Rewrite over a planted %s: %v", name, err)
			}
			if err := s.RemoveMessage("agent", "drafts", id); err != nil {
				t.Errorf("RemoveMessage: %v", err)
			}
			v.check(t, before, name)
		})
	}

	// Frontmatter paths that leave the attachments folder.
	for _, p := range []string{"../../../../" + v.file, v.file, "../inbox/x.md", "ID.attachments/../../x", "ID.attachments/.hidden", "ID.attachments/", "ID.attachments/a\x00b"} {
		id, m := newDraft()
		m.Attachments[0].Path = strings.ReplaceAll(p, "ID", id)
		if _, err := s.ReadAttachments("agent", "drafts", id, m); err == nil {
			t.Errorf("ReadAttachments followed path %q", p)
		}
	}
	v.check(t, before, "frontmatter paths")
}

// TestPurgeAndLabelPlanted: trash entries that are symlinks, hard links to
// root's files, FIFOs and directories are never followed, read or changed
// through, and never hang; a purge removes the mailbox's own entries only.
func TestPurgeAndLabelPlanted(t *testing.T) {
	requireRoot(t)
	v := newVictim(t)
	s := newOwnedStore(t)
	trash := filepath.Join(s.Path("agent"), "trash")
	id := deliver(t, s, "inbox", testMessage(1), "b")
	if err := s.Move("agent", id, "inbox", "trash"); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(trash, id+".md"))
	os.Remove(filepath.Join(trash, id+".eml"))
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(v.file, filepath.Join(trash, id+".md")))
	must(os.Symlink(v.dir, filepath.Join(trash, id+".eml")))
	must(os.Symlink(v.dir, filepath.Join(trash, id+attSuffix)))
	hard, fifo, dir := "2025-04-15-143122-hard", "2025-04-15-143122-fifo", "2025-04-15-143122-dir"
	must(os.Link(v.file, filepath.Join(trash, hard+".md")))
	must(syscall.Mkfifo(filepath.Join(trash, fifo+".md"), 0o600))
	must(os.Chown(filepath.Join(trash, fifo+".md"), ownerUID, ownerGID))
	must(os.Mkdir(filepath.Join(trash, dir+".md"), 0o700))
	must(os.WriteFile(filepath.Join(trash, dir+".md", "keep"), []byte("x"), 0o600))
	must(os.Chown(filepath.Join(trash, dir+".md"), ownerUID, ownerGID))
	before := v.snapshot(t)

	done := make(chan struct{})
	go func() {
		defer close(done)
		ids := []string{id, hard, fifo, dir}
		changed, nf, err := s.Relabel("agent", "trash", ids, []string{"x"}, nil, ptr(true))
		if err != nil || len(changed) != 0 || len(nf) != len(ids) {
			t.Errorf("Relabel of planted entries = %v %v %v, want all not found", changed, nf, err)
		}
		if _, err := s.PurgeBefore("agent", "trash", time.Now().AddDate(1, 0, 0)); err != nil {
			t.Errorf("PurgeBefore: %v", err)
		}
		purged, nf, err := s.Purge("agent", "trash", ids)
		if err != nil || len(purged) != 0 || len(nf) != len(ids) {
			t.Errorf("Purge of planted entries = %v %v %v, want all not found", purged, nf, err)
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("relabel or purge hangs on planted entries")
	}
	v.check(t, before, "relabel and purge")
	if _, err := os.Stat(v.file); err != nil {
		t.Errorf("victim gone: %v", err)
	}
}

// TestPurgeRacesMove: purging and moving the same messages at once leaves
// each message whole in exactly one place (or purged), never split between
// folders, and the indexes agree with the disk.
func TestPurgeRacesMove(t *testing.T) {
	s := newTestStore(t)
	att := []AttachmentData{{Filename: "a.txt", Data: []byte("a")}}
	var ids []string
	for i := range 40 {
		id, _, err := s.Deliver("agent", "inbox", testMessage(i), "b", []byte("raw"), att)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Move("agent", id, "inbox", "trash"); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for _, id := range ids {
			s.Purge("agent", "trash", []string{id})
		}
	}()
	go func() {
		defer wg.Done()
		for i := len(ids) - 1; i >= 0; i-- {
			s.Move("agent", ids[i], "trash", "inbox")
		}
	}()
	wg.Wait()
	for _, id := range ids {
		var where []string
		for _, f := range []string{"inbox", "trash"} {
			n := 0
			for _, suf := range []string{".md", ".eml", attSuffix} {
				if _, err := os.Lstat(filepath.Join(s.Path("agent"), f, id+suf)); err == nil {
					n++
				}
			}
			if n == 3 {
				where = append(where, f)
			} else if n != 0 {
				t.Errorf("%s: %d of its 3 files in %s", id, n, f)
			}
		}
		if len(where) > 1 {
			t.Errorf("%s is in %v", id, where)
		}
	}
	for _, f := range []string{"inbox", "trash"} {
		if got, want := summaryIDs(allRows(t, s, f, Query{})), summaryIDs(truth(t, s, f, Query{})); !slices.Equal(got, want) {
			t.Errorf("%s index %v, disk %v", f, got, want)
		}
	}
}
