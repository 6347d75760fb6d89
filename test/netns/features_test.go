package netns

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// TestExchangeDraftScheduledBounce runs the features of a day's mail
// between two hosts: a draft edited on disk and then sent, a scheduled send,
// and a send that bounces later and comes back to its sender as a
// delivery-status notification. It checks what each side stores.
func TestExchangeDraftScheduledBounce(t *testing.T) {
	l := newLab(t)
	a := l.newMailHost("a", "a.test", hostOptions{Mailboxes: []string{"boss"}, TrustedSenders: []string{"*@b.test"}})
	b := l.newMailHost("b", "b.test", hostOptions{Mailboxes: []string{"agent"}, TrustedSenders: []string{"boss@a.test"}})

	// A draft, edited by a person on disk, then sent: b receives the edit,
	// authenticated; a keeps it in sent and no longer in drafts.
	var dr protocol.Draft
	if err := a.call(protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "boss", To: []string{"agent@b.test"},
		Subject: "Draft as the agent wrote it", Body: "first version"}, &dr); err != nil {
		t.Fatalf("draft.create: %v", err)
	}
	path := filepath.Join(a.State, "mailboxes", "boss", "drafts", dr.ID+".md")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := store.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	m.Subject = "Draft as the person left it"
	edited := store.Render(m, "second version, reviewed by a person")
	if err := os.WriteFile(path, edited, 0o600); err != nil {
		t.Fatal(err)
	}
	var sent protocol.SendResult
	if err := a.call(protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "boss", ID: dr.ID, WaitMS: 20000}, &sent); err != nil {
		t.Fatalf("draft.send: %v", err)
	}
	got := b.byMessageID("agent", "inbox", sent.MessageID, 30*time.Second)
	checkAuth(t, got.Meta, "a.test", "pass", "true")
	if got.Meta.Subject != "Draft as the person left it" || !strings.Contains(got.Body, "reviewed by a person") {
		t.Errorf("b stored subject %q body %q, want the edited draft", got.Meta.Subject, got.Body)
	}
	if left := a.folder("boss", "drafts"); len(left) != 0 {
		t.Errorf("drafts after sending: %d left", len(left))
	}
	a.sentCopy("boss", sent.ID, "delivered", 30*time.Second)

	// A scheduled send: answered "scheduled", stored by b no earlier than
	// its time.
	at := time.Now().Add(3 * time.Second).UTC().Truncate(time.Second)
	sched := a.send(protocol.SendArgs{FromMailbox: "boss", To: []string{"agent@b.test"}, Subject: "Later", Body: "at its time", SendAt: &at})
	if sched.Status != "scheduled" {
		t.Fatalf("scheduled send answered %q, want scheduled: %+v", sched.Status, sched)
	}
	later := b.byMessageID("agent", "inbox", sched.MessageID, 60*time.Second)
	if later.Meta.ReceivedAt.Before(at) {
		t.Errorf("scheduled message received at %v, before its time %v", later.Meta.ReceivedAt, at)
	}
	checkAuth(t, later.Meta, "a.test", "pass", "true")

	// A send whose failure comes after the answer (a scheduled send to a
	// mailbox b does not have): b refuses it with 550 at its time, and a
	// puts a delivery-status notification in the sender's inbox, trusted,
	// linked to the sent message.
	soon := time.Now().Add(time.Second).UTC()
	bounced := a.send(protocol.SendArgs{FromMailbox: "boss", To: []string{"nobody@b.test"}, Subject: "To no one", Body: "will bounce", SendAt: &soon})
	if bounced.Status != "scheduled" {
		t.Fatalf("send to nobody answered %q, want scheduled", bounced.Status)
	}
	var dsn *stored
	waitFor(60*time.Second, func() bool {
		for _, m := range a.folder("boss", "inbox") {
			if m.Meta.IsDSN && strings.Trim(m.Meta.DSNFor, "<>") == strings.Trim(bounced.MessageID, "<>") {
				dsn = &m
				return true
			}
		}
		return false
	})
	if dsn == nil {
		t.Fatalf("no delivery-status notification for %s in boss's inbox; log:\n%s", bounced.MessageID, tail(a.Logs.String(), 6000))
	}
	if dsn.Meta.Trusted != "true" || !strings.Contains(dsn.Body, "nobody@b.test") {
		t.Errorf("DSN trusted=%q body %q", dsn.Meta.Trusted, dsn.Body)
	}
	a.sentCopy("boss", bounced.ID, "failed", 10*time.Second)
	for _, m := range b.folder("agent", "inbox") {
		if strings.Trim(m.Meta.MessageID, "<>") == strings.Trim(bounced.MessageID, "<>") {
			t.Errorf("b stored the refused message in agent's inbox")
		}
	}
	summary(t, "7-features", "draft edited on disk arrived as edited (dkim %s, trusted=%s); scheduled send arrived at %s (due %s); send to nobody@b.test bounced back as a DSN in boss's inbox (trusted=%s)",
		dkimSummary(got.Meta), got.Meta.Trusted, later.Meta.ReceivedAt.Format(time.TimeOnly), at.Format(time.TimeOnly), dsn.Meta.Trusted)
}
