package daemon

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/mailctl/mailctl/daemon/backup"
	"github.com/mailctl/mailctl/protocol"
)

// TestRestoreKeepsIdempotencyKeysAndSendCounts: a send with an idempotency
// key, backed up and restored on another host for another user (so the
// operator-declared mailbox gets another identity), answers its retry with
// the message it made instead of sending a second one; and a mailbox at
// its per-day limit when the backup was taken is still at it after the
// restore, instead of starting with the whole day's quota.
func TestRestoreKeepsIdempotencyKeysAndSendCounts(t *testing.T) {
	rt := newBackupRoundTrip(t, "mcbs", "per_day = 2\n")
	send := func(td *testDaemon, from, key string) (protocol.SendResult, error) {
		var res protocol.SendResult
		err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: from, To: []string{"x@remote.test"}, Subject: "report " + key, Body: "b", IdempotencyKey: key}, &res)
		return res, err
	}
	first := map[string]protocol.SendResult{}
	for _, s := range []struct{ from, key string }{{"bk", "bk-1"}, {"bk", ""}, {"decl", "decl-1"}} {
		res, err := send(rt.a, s.from, s.key)
		if err != nil {
			t.Fatalf("send from %s: %v", s.from, err)
		}
		first[s.key] = res
	}
	if _, err := send(rt.a, "bk", ""); protocol.CodeOf(err) != protocol.CodeRateLimited {
		t.Fatalf("a third send from bk the same day: %v, want %s", err, protocol.CodeRateLimited)
	}
	archive, _ := rt.backUp(t, nil)
	opts := rt.hostB(t)
	opts.MapOwner = map[string]string{rt.ownerA.Name: rt.ownerB.Name}
	res, err := backup.Restore(bytes.NewReader(archive), opts)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if res.IdemRecords != 2 || res.RateSends != 3 {
		t.Errorf("restored %d idempotency records and %d sends, want 2 and 3", res.IdemRecords, res.RateSends)
	}
	tb := rt.startB(t)
	queued := len(tb.out.queue.List())
	for _, s := range []struct{ from, key string }{{"bk", "bk-1"}, {"decl", "decl-1"}} {
		got, err := send(tb, s.from, s.key)
		if err != nil {
			t.Fatalf("retry of %s's send with key %s after the restore: %v", s.from, s.key, err)
		}
		if want := first[s.key]; !got.Duplicate || got.ID != want.ID || got.MessageID != want.MessageID {
			t.Errorf("retry of %s's send with key %s: id %s, message %s, duplicate %v; want the first send's %s, %s, answered as a duplicate",
				s.from, s.key, got.ID, got.MessageID, got.Duplicate, want.ID, want.MessageID)
		}
	}
	if n := len(tb.out.queue.List()); n != queued {
		t.Errorf("the retries queued %d more messages, want none", n-queued)
	}
	if _, err := send(tb, "bk", ""); protocol.CodeOf(err) != protocol.CodeRateLimited {
		t.Errorf("a send from bk after the restore: %v, want %s: it was at its per-day limit", err, protocol.CodeRateLimited)
	}
	if _, err := send(tb, "decl", ""); err != nil {
		t.Errorf("a send from decl after the restore: %v, want it let through: it had sent one of its two", err)
	}
}

// TestRestoredDraftIsNotSentAgain: a draft queued and not yet taken out of
// drafts/ (the daemon stopped in between) when the backup was taken,
// restored on another host, whose files are new there (other inodes,
// other times), answers the retry of its draft.send with the first send:
// nothing more is queued, and the draft leaves drafts/. Its send used to
// be keyed by the version of its file, which the restore changes.
func TestRestoredDraftIsNotSentAgain(t *testing.T) {
	rt := newBackupRoundTrip(t, "mcbd", "")
	var dr protocol.Draft
	if err := rt.a.call(t, protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "bk", To: []string{"x@remote.test"}, Subject: "once",
		Body: "only once\n", Attachments: []protocol.SendAttachment{{Filename: "a.txt", Data: []byte("attached")}}}, &dr); err != nil {
		t.Fatal(err)
	}
	// What the files were, put back after the send: as if the daemon had
	// stopped after queueing the draft and before removing it.
	drafts := filepath.Dir(dr.Path)
	files := map[string][]byte{}
	for _, name := range []string{dr.ID + ".md", dr.ID + ".attachments/a.txt"} {
		data, err := os.ReadFile(filepath.Join(drafts, name))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = data
	}
	var first protocol.SendResult
	if err := rt.a.call(t, protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "bk", ID: dr.ID}, &first); err != nil {
		t.Fatal(err)
	}
	uid, gid := int(rt.ownerA.UID), int(rt.ownerA.GID)
	if err := os.Mkdir(filepath.Join(drafts, dr.ID+".attachments"), 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chown(filepath.Join(drafts, dr.ID+".attachments"), uid, gid)
	for _, name := range []string{dr.ID + ".attachments/a.txt", dr.ID + ".md"} {
		if err := os.WriteFile(filepath.Join(drafts, name), files[name], 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chown(filepath.Join(drafts, name), uid, gid)
	}
	archive, _ := rt.backUp(t, nil)
	opts := rt.hostB(t)
	opts.MapOwner = map[string]string{rt.ownerA.Name: rt.ownerB.Name}
	if _, err := backup.Restore(bytes.NewReader(archive), opts); err != nil {
		t.Fatalf("restore: %v", err)
	}
	tb := rt.startB(t)
	queued := len(tb.out.queue.List())
	if queued != 1 {
		t.Fatalf("the restored queue holds %d items, want the draft's", queued)
	}
	var again protocol.SendResult
	if err := tb.call(t, protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "bk", ID: dr.ID}, &again); err != nil {
		t.Fatalf("retry of the draft's send after the restore: %v", err)
	}
	if !again.Duplicate || again.ID != first.ID || again.MessageID != first.MessageID {
		t.Errorf("retry of the draft's send: id %s, message %s, duplicate %v; want the first send's %s, %s, answered as a duplicate",
			again.ID, again.MessageID, again.Duplicate, first.ID, first.MessageID)
	}
	if n := len(tb.out.queue.List()); n != queued {
		t.Errorf("the retry queued %d more messages, want none", n-queued)
	}
	if _, err := os.Stat(filepath.Join(tb.store.Path("bk"), protocol.FolderDrafts, dr.ID+".md")); !os.IsNotExist(err) {
		t.Errorf("the draft is still in drafts after the retry: %v", err)
	}
}
