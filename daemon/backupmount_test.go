package daemon

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/daemon/backup"
	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/testmount"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// TestBackupAndDraftSendOverMountsInsideMailboxes: a running daemon whose
// mailboxes hold mounts (a disk on a folder, a disk on a draft's
// attachment folder, an owner's FUSE file system whose daemon never
// answers on another draft's) still backs up every mailbox, naming what it
// left out, and draft.send refuses each draft whose attachments are on a
// mount, at once, naming the folder; nothing is queued.
func TestBackupAndDraftSendOverMountsInsideMailboxes(t *testing.T) {
	if !testmount.InNamespace(t) {
		return
	}
	td := startDaemonWith(t, "[send]\nhold = true\n", Options{Resolver: &resolver.Map{}})
	for _, name := range []string{"one", "two"} {
		if err := td.call(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: name}, nil); err != nil {
			t.Fatal(err)
		}
		for _, subj := range []string{"a", "b"} {
			raw := "Subject: " + subj + "\r\nMessage-ID: <" + name + subj + "@remote.test>\r\n\r\nbody\r\n"
			if _, _, err := td.store.Deliver(name, "inbox", &store.Message{Subject: subj, MessageID: "<" + name + subj + "@remote.test>"}, "body", []byte(raw), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	archived, _, err := td.store.Deliver("one", "archive", &store.Message{Subject: "old", MessageID: "<old@remote.test>"}, "body", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	newDraft := func() protocol.Draft {
		t.Helper()
		var d protocol.Draft
		if err := td.call(t, protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "one", Subject: "s", To: []string{"x@remote.test"},
			Attachments: []protocol.SendAttachment{{Filename: "a.txt", ContentType: "text/plain", Data: []byte("mine")}}}, &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	onDisk, onFUSE := newDraft(), newDraft()
	mb := td.store.Path("one")
	testmount.Tmpfs(t, filepath.Join(mb, "archive"))
	diskAtts := filepath.Join(mb, "drafts", onDisk.ID+".attachments")
	testmount.Tmpfs(t, diskAtts)
	if err := os.WriteFile(filepath.Join(diskAtts, "a.txt"), []byte("not the draft's"), 0o600); err != nil {
		t.Fatal(err)
	}
	fuseAtts := filepath.Join(mb, "drafts", onFUSE.ID+".attachments")
	testmount.DeadFUSE(t, fuseAtts, false)

	for _, c := range []struct {
		d    protocol.Draft
		atts string
	}{{onDisk, diskAtts}, {onFUSE, fuseAtts}} {
		err := testwait.Returns(t, "draft.send of a draft whose attachments are on a mount", func() error {
			return td.call(t, protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "one", ID: c.d.ID}, nil)
		})
		if err == nil || !strings.Contains(err.Error(), c.atts) || !strings.Contains(err.Error(), "another file system") {
			t.Errorf("draft.send with attachments on a mount: %v; want it refused, naming %s", err, c.atts)
		}
	}
	var q protocol.QueueList
	td.call(t, protocol.VerbQueueList, nil, &q)
	if len(q.Items) != 0 {
		t.Errorf("queued: %+v", q.Items)
	}

	type result struct {
		snap protocol.BackupSnapshot
		err  error
	}
	r := testwait.Returns(t, "the snapshot of every mailbox", func() result {
		snap, err := td.backupSnapshot(context.Background())
		return result{snap, err}
	})
	if r.err != nil {
		t.Fatalf("mounts in one mailbox ended the backup of all: %v", r.err)
	}
	defer os.RemoveAll(r.snap.Dir)
	got := map[string]protocol.BackupMailbox{}
	for _, m := range r.snap.Mailboxes {
		got[m.Name] = m
	}
	if got["two"].Messages != 2 || len(got["two"].Warnings) != 0 {
		t.Errorf("mailbox two: %+v; want its 2 messages, no warnings", got["two"])
	}
	if got["one"].Messages != 4 { // its inbox's two and the two drafts
		t.Errorf("mailbox one: %d messages, want 4 (the archive left out)", got["one"].Messages)
	}
	var buf bytes.Buffer
	st, err := backup.Write(&buf, backup.Source{Snapshot: r.snap, ConfigFile: td.cfg.File, DKIMDir: td.cfg.Paths.DKIMDir,
		UserName: func(uid uint32) string { return registry.UserName(uid) }})
	if err != nil {
		t.Fatal(err)
	}
	for _, left := range []string{"one/archive", "one/drafts/" + onDisk.ID + ".attachments", "one/drafts/" + onFUSE.ID + ".attachments"} {
		if !slices.ContainsFunc(st.Warnings, func(w string) bool { return strings.HasPrefix(w, left+": on another file system") }) {
			t.Errorf("the backup's warnings %q do not name %s", st.Warnings, left)
		}
	}
	if st.Messages != 6 {
		t.Errorf("archive holds %d messages, want 6 (archive's %s left out)", st.Messages, archived)
	}
}
