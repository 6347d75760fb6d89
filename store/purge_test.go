package store

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func folderNames(t *testing.T, s *Store, folder string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(s.Path("agent"), folder))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func TestPurgeLeavesNoFileBehind(t *testing.T) {
	s := newTestStore(t)
	att := []AttachmentData{{Filename: "a.pdf", ContentType: "application/pdf", Data: []byte("%PDF")}}
	var trashed []string
	for i := range 4 {
		id, _, err := s.Deliver("agent", "inbox", testMessage(i), "body", []byte("raw"), att)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Move("agent", id, "inbox", "trash"); err != nil {
			t.Fatal(err)
		}
		trashed = append(trashed, id)
	}
	kept := deliver(t, s, "inbox", testMessage(9), "kept")
	if n := len(folderNames(t, s, "trash")); n != 12 {
		t.Fatalf("trash holds %d files, want 12: %v", n, folderNames(t, s, "trash"))
	}
	allRows(t, s, "trash", Query{})

	// One and many, with an id that is not there.
	purged, missing, err := s.Purge("agent", "trash", []string{trashed[0], trashed[1], "nope", trashed[0]})
	if err != nil || !slices.Equal(purged, trashed[:2]) || !slices.Equal(missing, []string{"nope"}) {
		t.Fatalf("Purge: %v %v %v", purged, missing, err)
	}
	// Older than a date: message 2 was received before message 3.
	purged, err = s.PurgeBefore("agent", "trash", testMessage(3).ReceivedAt)
	if err != nil || !slices.Equal(purged, trashed[2:3]) {
		t.Fatalf("PurgeBefore: %v %v", purged, err)
	}
	if got := summaryIDs(allRows(t, s, "trash", Query{})); !slices.Equal(got, trashed[3:]) {
		t.Errorf("trash lists %v", got)
	}
	for _, n := range folderNames(t, s, "trash") {
		if n != trashed[3]+".md" && n != trashed[3]+".eml" && n != trashed[3]+attSuffix {
			t.Errorf("left behind in trash: %s", n)
		}
	}
	if _, _, err := s.Get("agent", "inbox", kept); err != nil {
		t.Errorf("inbox message gone: %v", err)
	}
	// A fresh index agrees.
	if got := summaryIDs(truth(t, s, "trash", Query{})); !slices.Equal(got, trashed[3:]) {
		t.Errorf("fresh index lists %v", got)
	}
}

func TestPurgeOnlyFromTrash(t *testing.T) {
	s := newTestStore(t)
	id := deliver(t, s, "inbox", testMessage(1), "a")
	before := folderNames(t, s, "inbox")
	for _, folder := range []string{"inbox", "archive", "sent", "../inbox"} {
		if _, _, err := s.Purge("agent", folder, []string{id}); !errors.Is(err, ErrNotTrash) {
			t.Errorf("Purge from %s: %v", folder, err)
		}
		if _, err := s.PurgeBefore("agent", folder, t0.AddDate(1, 0, 0)); !errors.Is(err, ErrNotTrash) {
			t.Errorf("PurgeBefore from %s: %v", folder, err)
		}
	}
	// Named in trash, the inbox message is not found, and stays.
	if purged, missing, err := s.Purge("agent", "trash", []string{id, "../inbox/" + id}); err != nil || len(purged) != 0 || len(missing) != 2 {
		t.Errorf("Purge of an inbox id from trash: %v %v %v", purged, missing, err)
	}
	if got := folderNames(t, s, "inbox"); !slices.Equal(got, before) {
		t.Errorf("inbox changed: %v, was %v", got, before)
	}
}
