package daemon

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/daemon/intake"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// TestJournaledCopyStaysWithItsMailbox: a copy the inbound journal still
// holds when the daemon starts (it was killed before the copy was marked
// written, or the machine lost power before the checkpoint) is written again
// only into the mailbox it was delivered to. Its owner deleted that mailbox
// and another user made one of the same name before the restart: the
// newcomer gets none of it, while a copy of a mailbox that is still the same
// comes back.
func TestJournaledCopyStaysWithItsMailbox(t *testing.T) {
	testusers.RequireRoot(t)
	u1 := testusers.Create(t, "mcj1")
	u2 := testusers.Create(t, "mcj2")
	td := startDaemon(t, "")
	for _, name := range []string{"jx", "kept"} {
		if err := td.EnsureMailbox(name, u1.UID, u1.GID); err != nil {
			t.Fatal(err)
		}
	}
	ident := map[string]string{}
	for _, name := range []string{"jx", "kept"} {
		id, err := td.store.MailboxIdentity(name)
		if err != nil {
			t.Fatal(err)
		}
		ident[name] = id
	}
	// u1 deletes jx; u2 takes the name.
	if err := td.call(t, protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "jx", Force: true}, nil); err != nil {
		t.Fatal(err)
	}
	if err := td.EnsureMailbox("jx", u2.UID, u2.GID); err != nil {
		t.Fatal(err)
	}
	if now, _ := td.store.MailboxIdentity("jx"); now == ident["jx"] {
		t.Fatalf("the new jx has the old one's identity %s", now)
	}
	td.stop()

	// The records the delivery to each of u1's mailboxes left, not marked
	// written (as storeCopy makes them).
	j, _, err := intake.Open(td.cfg.Paths.InboundDir(), intake.Options{Sync: func() error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"jx", "kept"} {
		e := &intake.Entry{Mailbox: name, Folder: "inbox", ID: "2026-01-02-030405-u1-private-" + name,
			Msg:    store.Message{From: "a@remote.test", Subject: "u1 private " + name, Trusted: "none"},
			Prefix: "Authentication-Results: mx.example.test; none\r\n", Identity: ident[name]}
		if _, err := j.Add(e, []byte("From: a@remote.test\r\nSubject: u1 private "+name+"\r\n\r\nu1 secret body\r\n"), nil); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()

	td = runTestDaemon(t, td.cfg, td.dir, Options{})
	list := func(name string) string {
		var l protocol.MessageList
		if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: name, Query: "in:anywhere"}, &l); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(l.Messages)
		return string(b)
	}
	if got := list("jx"); strings.Contains(got, "u1 private") {
		t.Errorf("u2's new jx holds u1's journaled copy: %s", got)
	}
	if got := list("kept"); !strings.Contains(got, "u1 private kept") {
		t.Errorf("the copy of u1's kept was not written again: %s", got)
	}
}
