package queue

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/wal"
)

// TestSnapshotJournalThenRewrite: a snapshot of a live journal holds every
// item enqueued before it, with its message, and nothing appended after;
// RewriteJournal passes each item's state through its function, and a
// queue opened on the result has the items with what the function changed.
func TestSnapshotJournalThenRewrite(t *testing.T) {
	q := openTestQueue(t, t.TempDir())
	for _, id := range []string{"a", "b", "c"} {
		if err := q.Enqueue(heldItem(id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Approve("b"); err != nil { // a state record after the enqueue
		t.Fatal(err)
	}
	var snap bytes.Buffer
	if _, err := q.SnapshotJournal(&snap); err != nil {
		t.Fatal(err)
	}
	if err := q.Enqueue(heldItem("later")); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := RewriteJournal(bytes.NewReader(snap.Bytes()), &out, func(st []byte) ([]byte, error) {
		var doc map[string]json.RawMessage
		json.Unmarshal(st, &doc)
		doc["mailbox_id"], _ = json.Marshal("renumbered")
		return json.Marshal(doc)
	}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, JournalName), out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	q2 := openTestQueue(t, dir)
	if got := ids(q2); got != "a,b,c" {
		t.Fatalf("restored queue holds %q, want a,b,c (not the item enqueued after the snapshot)", got)
	}
	for _, it := range q2.List() {
		if it.MailboxID != "renumbered" {
			t.Errorf("item %s is bound to %q after the rewrite", it.ID, it.MailboxID)
		}
		if data, err := q2.j.read(it.ID); err != nil || len(data) == 0 {
			t.Errorf("item %s lost its message: %v", it.ID, err)
		}
	}
	if it, _ := q2.Get("b"); it == nil || it.Held {
		t.Errorf("item b's state record (approved) was lost: %+v", it)
	}
}

// TestRewriteJournalRefusesDamage: a journal cut short, failing a
// checksum or of another version is an error, never a shorter queue.
func TestRewriteJournalRefusesDamage(t *testing.T) {
	q := openTestQueue(t, t.TempDir())
	if err := q.Enqueue(heldItem("a")); err != nil {
		t.Fatal(err)
	}
	var snap bytes.Buffer
	q.SnapshotJournal(&snap)
	good := snap.Bytes()
	same := func(st []byte) ([]byte, error) { return st, nil }
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)-1] ^= 1
	for name, data := range map[string][]byte{
		"cut short":     good[:len(good)-3],
		"checksum":      flipped,
		"other version": append([]byte("mailctl queue journal 9\n"), good[len(journalMagic):]...),
	} {
		if _, err := RewriteJournal(bytes.NewReader(data), &bytes.Buffer{}, same); err == nil {
			t.Errorf("%s: rewritten", name)
		} else if !strings.Contains(err.Error(), "journal") {
			t.Errorf("%s: error %q does not name the journal", name, err)
		}
	}
}

// FuzzRewriteJournal: a journal from a backup archive is input; whatever
// it holds, the rewrite ends with an error or a journal, never a panic.
func FuzzRewriteJournal(f *testing.F) {
	f.Add([]byte(journalMagic))
	f.Add(append([]byte(journalMagic), wal.Record([]byte{'S'}, []byte(`{"id":"a","mailbox":"m","mailbox_id":"c1"}`))...))
	st := []byte(`{"id":"a","mailbox":"m","mailbox_id":"c1","size":3}`)
	payload, _ := enqueuePayload(st, []byte("abc"))
	rec := wal.Record(payload...)
	f.Add(append([]byte(journalMagic), rec...))
	// An item marked to be dropped once its attempt ends (Item.Dropping).
	marked := wal.Record([]byte{'S'}, []byte(`{"id":"a","mailbox":"m","mailbox_id":"c1","size":3,"dropping":true}`))
	f.Add(append(append([]byte(journalMagic), rec...), marked...))
	f.Fuzz(func(t *testing.T, data []byte) {
		var out bytes.Buffer
		_, err := RewriteJournal(bytes.NewReader(data), &out, func(st []byte) ([]byte, error) { return st, nil })
		if err == nil && !bytes.Equal(out.Bytes(), data) {
			t.Fatalf("an unchanged rewrite of a whole journal differs from it")
		}
	})
}
