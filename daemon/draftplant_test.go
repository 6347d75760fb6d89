package daemon

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// TestDraftVerbsOverPlantedFiles: the mailbox owner (a real uid) plants, as
// a draft's attachment, a hard link to a root-only file, a FIFO, a symlink,
// or a frontmatter path outside the draft; it replaces a draft by a symlink
// to a root file, and its attachments folder by a symlink to a root
// directory. draft.send refuses each with an answer that says why, at once,
// and nothing root's is read into the queue, changed or removed.
func TestDraftVerbsOverPlantedFiles(t *testing.T) {
	testusers.RequireRoot(t)
	owner := testusers.Create(t, "mcdp")
	td := startDaemonWith(t, "[send]\nhold = true\n", Options{Resolver: &resolver.Map{}})
	own := startClient(t, testusers.Executable(t), td.socket, principal{"owner", owner.UID, owner.GID})
	if o := own.do(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "plant"}); o.Code != "" {
		t.Fatal(o)
	}
	rootDir := t.TempDir()
	secret := filepath.Join(rootDir, "shadow")
	if err := os.WriteFile(secret, []byte("ROOT-SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	drafts := filepath.Join(td.store.Path("plant"), "drafts")
	newDraft := func() protocol.Draft {
		t.Helper()
		var d protocol.Draft
		o := own.do(t, protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "plant", Subject: "s", To: []string{"x@remote.test"},
			Attachments: []protocol.SendAttachment{{Filename: "a.txt", ContentType: "text/plain", Data: []byte("mine")}}})
		if o.Code != "" {
			t.Fatal(o)
		}
		json.Unmarshal(o.Data, &d)
		return d
	}
	asOwner := func(p string) {
		if err := os.Lchown(p, int(owner.UID), int(owner.GID)); err != nil {
			t.Fatal(err)
		}
	}
	plants := map[string]func(d protocol.Draft) error{
		"hard link to a root file": func(d protocol.Draft) error {
			f := filepath.Join(drafts, d.ID+".attachments", "a.txt")
			os.Remove(f)
			return os.Link(secret, f)
		},
		"fifo": func(d protocol.Draft) error {
			f := filepath.Join(drafts, d.ID+".attachments", "a.txt")
			os.Remove(f)
			err := syscall.Mkfifo(f, 0o600)
			asOwner(f)
			return err
		},
		"symlinked attachment": func(d protocol.Draft) error {
			f := filepath.Join(drafts, d.ID+".attachments", "a.txt")
			os.Remove(f)
			err := os.Symlink(secret, f)
			asOwner(f)
			return err
		},
		"symlinked attachments folder": func(d protocol.Draft) error {
			f := filepath.Join(drafts, d.ID+".attachments")
			os.RemoveAll(f)
			os.Link(secret, filepath.Join(rootDir, "a.txt"))
			err := os.Symlink(rootDir, f)
			asOwner(f)
			return err
		},
		"absolute frontmatter path": func(d protocol.Draft) error { return editDraft(d.Path, secret, asOwner) },
		"relative frontmatter path": func(d protocol.Draft) error {
			return editDraft(d.Path, d.ID+".attachments/../../../../../../../.."+secret, asOwner)
		},
	}
	for name, plant := range plants {
		d := newDraft()
		if err := plant(d); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		start := time.Now()
		o := own.do(t, protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "plant", ID: d.ID})
		if o.Code != protocol.CodeInvalidInput || !strings.Contains(o.Msg, "attachment") || time.Since(start) > 10*time.Second {
			t.Errorf("draft.send over a %s: %q %q after %v, want invalid_input about the attachment at once", name, o.Code, o.Msg, time.Since(start))
		}
		// Replacing the attachments and deleting the draft touch only the mailbox.
		if o := own.do(t, protocol.VerbDraftUpdate, protocol.DraftUpdateArgs{Mailbox: "plant", ID: d.ID, Attachments: &[]protocol.SendAttachment{}}); o.Code != "" {
			t.Errorf("draft.update over a %s: %q %q", name, o.Code, o.Msg)
		}
		if o := own.do(t, protocol.VerbDraftDelete, protocol.DraftIDArgs{Mailbox: "plant", ID: d.ID}); o.Code != "" {
			t.Errorf("draft.delete over a %s: %q %q", name, o.Code, o.Msg)
		}
	}
	// A draft that is a symlink to, or a hard link of, a root file is no draft.
	for _, link := range []func(string, string) error{os.Symlink, os.Link} {
		d := newDraft()
		os.Remove(d.Path)
		if err := link(secret, d.Path); err != nil {
			t.Fatal(err)
		}
		for _, r := range []struct {
			verb string
			args any
		}{
			{protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "plant", ID: d.ID}},
			{protocol.VerbDraftUpdate, protocol.DraftUpdateArgs{Mailbox: "plant", ID: d.ID, Subject: ptrTo("x")}},
			{protocol.VerbMessageLabel, protocol.MessageLabelArgs{Mailbox: "plant", Folder: "drafts", IDs: []string{d.ID}, Add: []string{"x"}}},
			{protocol.VerbDraftDelete, protocol.DraftIDArgs{Mailbox: "plant", ID: d.ID}},
		} {
			if o := own.do(t, r.verb, r.args); o.Code != protocol.CodeNotFound {
				t.Errorf("%s of a linked draft: %q %q, want not_found", r.verb, o.Code, o.Msg)
			}
		}
	}
	var q protocol.QueueList
	td.call(t, protocol.VerbQueueList, nil, &q)
	if len(q.Items) != 0 {
		t.Errorf("queued: %+v", q.Items)
	}
	if data, err := os.ReadFile(secret); err != nil || string(data) != "ROOT-SECRET" {
		t.Errorf("root's file: %q %v", data, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(secret, &st); err != nil || st.Uid != 0 || st.Mode&0o777 != 0o600 {
		t.Errorf("root's file changed owner or mode: %+v %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(rootDir, "a.txt")); err != nil {
		t.Errorf("root's directory lost a file: %v", err)
	}
}

// editDraft points the draft's first attachment at path, as a hand edit.
func editDraft(file, path string, asOwner func(string)) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	i := strings.Index(string(data), "path = \"")
	if i < 0 {
		return os.ErrNotExist
	}
	j := strings.Index(string(data[i+8:]), "\"")
	out := string(data[:i+8]) + path + string(data[i+8+j:])
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(out), 0o600); err != nil {
		return err
	}
	asOwner(tmp)
	return os.Rename(tmp, file)
}
