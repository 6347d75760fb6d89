package store

import (
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestDeliverOnceJournaled: the journal is told the id before any file of
// the message exists, with the message's defaults filled in; the files come
// after it, and not at all when the journal fails. A repeat of the same
// delivery is recognised as DeliverOnce recognises it, without the journal.
func TestDeliverOnceJournaled(t *testing.T) {
	s := newTestStore(t)
	folder := filepath.Join(s.Path("agent"), "inbox")
	key := sha256.Sum256([]byte("journaled"))
	m := testMessage(1)
	m.SizeBytes = 0
	var journaled, ident string
	id, dup, err := s.DeliverOnceJournaled(key, "agent", "inbox", m, "body", rawOf([]byte("raw bytes")), nil, func(id, mailbox string) error {
		journaled, ident = id, mailbox
		if _, err := os.Stat(filepath.Join(folder, id+".eml")); err == nil {
			t.Error("the raw copy was written before the journal had the message")
		}
		if m.SizeBytes != 9 || m.ReceivedAt.IsZero() {
			t.Errorf("the journal got a message without its defaults: %+v", m)
		}
		return nil
	})
	if err != nil || dup || id != journaled {
		t.Fatalf("DeliverOnceJournaled = %q %v %v, journal got %q", id, dup, err, journaled)
	}
	if now, err := s.MailboxIdentity("agent"); err != nil || ident == "" || ident != now {
		t.Fatalf("the journal got mailbox identity %q, the mailbox has %q (%v)", ident, now, err)
	}
	if raw, err := os.ReadFile(filepath.Join(folder, id+".eml")); err != nil || string(raw) != "raw bytes" {
		t.Fatalf("raw copy %q %v", raw, err)
	}
	if again, dup, _ := s.DeliverOnceJournaled(key, "agent", "inbox", testMessage(1), "body", rawOf([]byte("raw bytes")), nil, func(string, string) error {
		t.Error("a repeat went to the journal")
		return nil
	}); !dup || again != id {
		t.Errorf("repeat: %q dup %v", again, dup)
	}
	failed := errors.New("journal full")
	id2, _, err := s.DeliverOnceJournaled(sha256.Sum256([]byte("other")), "agent", "inbox", testMessage(2), "body", rawOf([]byte("x")), nil, func(string, string) error { return failed })
	if !errors.Is(err, failed) || id2 != "" {
		t.Fatalf("a failed journal: %q %v", id2, err)
	}
	if ids := listIDs(t, s, "inbox"); len(ids) != 1 {
		t.Errorf("inbox holds %v after a failed journal, want the first message only", ids)
	}
}

// TestReplaceUnsynced: what an interrupted write left of a message (a raw
// copy without its Markdown file, a half attachment folder, an empty
// Markdown file after a power loss) is replaced by the whole message, which
// the folder then lists once.
func TestReplaceUnsynced(t *testing.T) {
	s := newTestStore(t)
	folder := filepath.Join(s.Path("agent"), "inbox")
	id := "2025-04-15-143022-message-1"
	os.WriteFile(filepath.Join(folder, id+".eml"), []byte("half a raw"), 0o600)
	os.Mkdir(filepath.Join(folder, id+".attachments"), 0o700)
	os.WriteFile(filepath.Join(folder, id+".attachments", "junk.bin"), []byte("junk"), 0o600)
	atts := []AttachmentData{{Filename: "a.txt", ContentType: "text/plain", Data: []byte("attached")}}
	if err := s.ReplaceUnsynced("agent", "inbox", id, testMessage(1), "body", rawOf([]byte("whole raw")), atts); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(folder, id+".md"), nil, 0o600) // as a power loss may leave it
	if err := s.ReplaceUnsynced("agent", "inbox", id, testMessage(1), "body", rawOf([]byte("whole raw")), atts); err != nil {
		t.Fatal(err)
	}
	if raw, _ := os.ReadFile(filepath.Join(folder, id+".eml")); string(raw) != "whole raw" {
		t.Errorf("raw copy %q", raw)
	}
	if _, err := os.Stat(filepath.Join(folder, id+".attachments", "junk.bin")); err == nil {
		t.Error("a leftover attachment survived")
	}
	m, body, err := s.Get("agent", "inbox", id)
	if err != nil || body != "body" || len(m.Attachments) != 1 {
		t.Fatalf("the message: %+v %q %v", m, body, err)
	}
	if ids := listIDs(t, s, "inbox"); len(ids) != 1 || ids[0] != id {
		t.Errorf("inbox lists %v", ids)
	}
}

// TestReplacedCopyIsRememberedAcrossRestart: a message a journal writes
// again after a crash (ReplaceUnsynced) and remembers (RememberDelivery) is
// recognised as the same delivery when its sender retries, also after the
// store is reopened: the retry is not stored a second time, and the folder
// lists the message once. Without the remember, the retry would be a new
// message; a bad id is refused.
func TestReplacedCopyIsRememberedAcrossRestart(t *testing.T) {
	s := newTestStore(t)
	key := sha256.Sum256([]byte("journaled before the crash"))
	id := "2025-04-15-143022-message-1"
	if err := s.ReplaceUnsynced("agent", "inbox", id, testMessage(1), "body", rawOf([]byte("raw")), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.RememberDelivery(key, "agent", "inbox", id); err != nil {
		t.Fatal(err)
	}
	if err := s.RememberDelivery(key, "agent", "inbox", "../x"); err == nil {
		t.Error("RememberDelivery took an id that is not one")
	}
	s = reopen(t, s)
	again, dup, err := s.DeliverOnce(key, "agent", "inbox", testMessage(1), "body", []byte("raw"), nil)
	if err != nil || !dup || again != id {
		t.Fatalf("the retry = %q dup %v %v, want the replayed %q as a repeat", again, dup, err, id)
	}
	if ids := listIDs(t, s, "inbox"); len(ids) != 1 || ids[0] != id {
		t.Errorf("inbox lists %v, want [%s]", ids, id)
	}
	other := sha256.Sum256([]byte("never remembered"))
	if _, dup, err := s.DeliverOnce(other, "agent", "inbox", testMessage(1), "body", []byte("raw"), nil); err != nil || dup {
		t.Errorf("a delivery never remembered: dup %v %v, want it stored", dup, err)
	}
}

// TestJournaledDeliveryIsRememberedAtSync: a journaled delivery is
// remembered in memory at once (a repeat is recognised before any Sync)
// and committed to deliveries.db by the next Sync, all of them in one
// transaction, so that a restart recognises it too; past maxLater waiting,
// a delivery is committed before DeliverOnceJournaled returns.
func TestJournaledDeliveryIsRememberedAtSync(t *testing.T) {
	s := newTestStore(t)
	rows := func(s *Store) int {
		t.Helper()
		var n int
		if err := s.dedup.db.QueryRow("SELECT count(*) FROM deliveries").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	deliver := func(s *Store, i int) (string, bool) {
		t.Helper()
		id, dup, err := s.DeliverOnceJournaled(sha256.Sum256([]byte{byte(i)}), "agent", "inbox", testMessage(i), "body", rawOf([]byte("raw")), nil, func(string, string) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		return id, dup
	}
	first, _ := deliver(s, 1)
	deliver(s, 2)
	if n := rows(s); n != 0 {
		t.Fatalf("%d deliveries committed before a Sync, want them in memory", n)
	}
	if again, dup := deliver(s, 1); !dup || again != first {
		t.Fatalf("a repeat before the Sync: %q dup %v, want %q", again, dup, first)
	}
	// Until the commit is done, a repeat is still known from memory.
	hooked := 0
	testHookDedupCommit = func(batch []*dedupRec) {
		hooked += len(batch)
		if id, ok := s.dedup.lookup("agent", "inbox", batch[0].identity, sha256.Sum256([]byte{1}), time.Now()); !ok || id != first {
			t.Errorf("during the commit the delivery is %q %v, want %q held", id, ok, first)
		}
	}
	err := s.Sync()
	testHookDedupCommit = nil
	if err != nil || hooked != 2 {
		t.Fatalf("Sync: %v, %d deliveries committed", err, hooked)
	}
	if n := rows(s); n != 2 {
		t.Fatalf("%d deliveries committed by the Sync, want 2", n)
	}
	if _, held := s.dedup.heldLater(recentKey{mailbox: "agent", folder: "inbox", key: sha256.Sum256([]byte{1})}); held {
		t.Error("a committed delivery is still held in memory")
	}
	s = reopen(t, s)
	if again, dup := deliver(s, 1); !dup || again != first {
		t.Fatalf("a repeat after a restart: %q dup %v, want %q", again, dup, first)
	}

	old := maxLater
	maxLater = 1
	t.Cleanup(func() { maxLater = old })
	deliver(s, 3)
	deliver(s, 4)
	if n := rows(s); n != 3 {
		t.Errorf("%d deliveries committed with one held and maxLater 1, want 3", n)
	}
}

// TestJournaledRepeatsRaceTheSync: journaled deliveries of a few keys,
// each sent many times from many goroutines, race Syncs that commit what
// is held: each key is stored exactly once, every repeat answers with its
// id, and once the last Sync is done every key is in deliveries.db and
// none is held in memory.
func TestJournaledRepeatsRaceTheSync(t *testing.T) {
	s := newTestStore(t)
	const keys, senders, rounds = 4, 8, 10
	var mu sync.Mutex
	ids := map[byte]map[string]bool{}
	var wg sync.WaitGroup
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				k := byte((g + r) % keys)
				m := testMessage(int(k))
				id, _, err := s.DeliverOnceJournaled(sha256.Sum256([]byte{k}), "agent", "inbox", m, "body", rawOf([]byte("raw")), nil, func(string, string) error { return nil })
				if err != nil {
					t.Error(err)
					return
				}
				if r%3 == g%3 {
					// Syncs interleave with the deliveries of the others.
					if err := s.Sync(); err != nil {
						t.Error(err)
					}
				}
				mu.Lock()
				if ids[k] == nil {
					ids[k] = map[string]bool{}
				}
				ids[k][id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := len(listIDs(t, s, "inbox")); n != keys {
		t.Errorf("the inbox holds %d messages, want %d (one a key)", n, keys)
	}
	for k := range byte(keys) {
		if len(ids[k]) != 1 {
			t.Errorf("key %d answered with ids %v, want one", k, ids[k])
		}
		if _, held := s.dedup.heldLater(recentKey{mailbox: "agent", folder: "inbox", key: sha256.Sum256([]byte{k})}); held {
			t.Errorf("key %d is still held after the last Sync", k)
		}
	}
	var n int
	if err := s.dedup.db.QueryRow("SELECT count(*) FROM deliveries").Scan(&n); err != nil || n != keys {
		t.Errorf("deliveries.db holds %d deliveries (%v), want %d", n, err, keys)
	}
}
