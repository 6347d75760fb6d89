package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// One bad file fails only itself. Next to good messages, the owner plants a
// 50 GB sparse Markdown file and one whose frontmatter is gone: message.mark
// and message.label change the good ones and answer each bad one by id,
// with a code and a message naming its file; message.purge removes the good
// and the huge one (it reads neither). A request naming only a bad message
// is that message's error, naming the file, never the folder's.
func TestOneBadFileFailsOnlyItself(t *testing.T) {
	td := startDaemon(t, "")
	td.ensureMine(t, "alice")
	good := func(subject string) string {
		t.Helper()
		id, _, err := td.store.Deliver("alice", "inbox", &store.Message{MessageID: subject + "@example.test", Subject: subject, ReceivedAt: time.Now()},
			"hello", []byte("Subject: "+subject+"\r\n\r\nhello\r\n"), nil)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	a, b := good("first"), good("second")
	inbox := filepath.Join(td.store.Path("alice"), "inbox")
	const huge, damaged = "2026-01-01-000000-huge", "2026-01-01-000001-damaged"
	f, err := os.Create(filepath.Join(inbox, huge+".md"))
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("+++\nid = \"x\"\n+++\n\n")
	if err := f.Truncate(50 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.WriteFile(filepath.Join(inbox, damaged+".md"), []byte("no frontmatter here\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantFailed := func(verb string, failed []protocol.ItemFailure) {
		t.Helper()
		want := map[string]string{huge: protocol.CodeTooLarge, damaged: protocol.CodeConflict}
		if len(failed) != len(want) {
			t.Fatalf("%s: failed %+v, want %v", verb, failed, want)
		}
		for _, f := range failed {
			if want[f.ID] != f.Code || !strings.Contains(f.Message, filepath.Join(inbox, f.ID+".md")) {
				t.Errorf("%s: %+v, want code %s and the file named", verb, f, want[f.ID])
			}
		}
	}

	var marked protocol.MessageMarked
	if err := td.call(t, protocol.VerbMessageMark, protocol.MessageMarkArgs{Mailbox: "alice", IDs: []string{huge, a, damaged, b}, Read: true}, &marked); err != nil {
		t.Fatalf("mark: %v", err)
	}
	if !slices.Equal(marked.Changed, []string{a, b}) {
		t.Errorf("mark changed %v, want %v", marked.Changed, []string{a, b})
	}
	wantFailed("mark", marked.Failed)
	var labeled protocol.MessageLabeled
	if err := td.call(t, protocol.VerbMessageLabel, protocol.MessageLabelArgs{Mailbox: "alice", IDs: []string{a, huge, damaged}, Add: []string{"x"}}, &labeled); err != nil {
		t.Fatalf("label: %v", err)
	}
	if !slices.Equal(labeled.Changed, []string{a}) {
		t.Errorf("label changed %v, want %v", labeled.Changed, []string{a})
	}
	wantFailed("label", labeled.Failed)
	for _, id := range []string{a, b} {
		m, _, err := td.store.Get("alice", "inbox", id)
		if err != nil || !m.Read {
			t.Errorf("%s after the batch: read %v (%v)", id, m != nil && m.Read, err)
		}
	}

	// Alone, a bad message is the request's error, naming its file.
	for _, c := range []struct{ id, code string }{{huge, protocol.CodeTooLarge}, {damaged, protocol.CodeConflict}} {
		err := td.call(t, protocol.VerbMessageMark, protocol.MessageMarkArgs{Mailbox: "alice", IDs: []string{c.id}, Read: true}, nil)
		if protocol.CodeOf(err) != c.code || !strings.Contains(err.Error(), filepath.Join(inbox, c.id+".md")) || strings.Contains(err.Error(), "folder inbox") {
			t.Errorf("mark %s alone: %v, want %s naming the file", c.id, err, c.code)
		}
	}

	// Purge reads neither file: the huge one goes with the good one.
	trash := filepath.Join(td.store.Path("alice"), "trash")
	if err := td.call(t, protocol.VerbMessageMove, protocol.MessageMoveArgs{Mailbox: "alice", ID: b, To: "trash"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(inbox, huge+".md"), filepath.Join(trash, huge+".md")); err != nil {
		t.Fatal(err)
	}
	var purged protocol.MessagePurged
	if err := td.call(t, protocol.VerbMessagePurge, protocol.MessagePurgeArgs{Mailbox: "alice", IDs: []string{b, huge}}, &purged); err != nil {
		t.Fatalf("purge: %v", err)
	}
	if !slices.Equal(purged.Purged, []string{b, huge}) || len(purged.Failed) != 0 {
		t.Errorf("purge: %+v", purged)
	}
}

// What draft.send reads of the owner's files is charged to the caller's
// memory budget before it is read: an attachment within the send limits
// but whose read and composition would pass control.request_memory is
// refused rate_limited, and a small one goes through.
func TestDraftSendIsChargedToTheMemoryBudget(t *testing.T) {
	td := startDaemon(t, fmt.Sprintf("[control]\nrequest_memory = %d\nrequest_memory_per_uid = %d\n", 32<<20, 16<<20))
	td.ensureMine(t, "alice")
	for _, c := range []struct {
		size int64
		code string
	}{{9 << 20, protocol.CodeRateLimited}, {1 << 20, ""}} {
		var d protocol.Draft
		if err := td.call(t, protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "alice", To: []string{"x@remote.test"}, Subject: "s", Body: "b"}, &d); err != nil {
			t.Fatal(err)
		}
		drafts := filepath.Join(td.store.Path("alice"), "drafts")
		m, _, err := td.store.Get("alice", "drafts", d.ID)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(drafts, d.ID+".attachments"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(drafts, d.ID+".attachments", "a.bin"), make([]byte, c.size), 0o600); err != nil {
			t.Fatal(err)
		}
		m.Attachments = []store.Attachment{{Filename: "a.bin", ContentType: "application/octet-stream", Size: c.size, Path: d.ID + ".attachments/a.bin"}}
		if err := os.WriteFile(filepath.Join(drafts, d.ID+".md"), store.Render(m, "b"), 0o600); err != nil {
			t.Fatal(err)
		}
		err = td.call(t, protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "alice", ID: d.ID, DryRun: true}, nil)
		if protocol.CodeOf(err) != c.code || (c.code != "" && !strings.Contains(err.Error(), "control.request_memory")) {
			t.Errorf("draft.send with a %d MiB attachment: %v, want %q", c.size>>20, err, orOK(c.code))
		}
	}
}
