package mcpshim

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/protocol"
)

// email_draft: a draft created by the agent and edited on disk by a person
// goes out as edited and leaves drafts; send_at schedules email_send and a
// draft alike.
func TestEmailDraftAndScheduledSend(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Tools = []string{"all"} })
	e.d.Mailbox(t, "agent")
	e.d.Mailbox(t, "boss")

	var dd DraftData
	e.ok("email_draft", map[string]any{"action": "create", "mailbox": "agent", "to": "boss@example.test", "subject": "Proposal", "body": "agent's wording"}, &dd)
	if dd.Draft == nil || dd.Draft.ID == "" {
		t.Fatalf("create: %+v", dd)
	}
	id, path := dd.Draft.ID, dd.Draft.Path
	var list EmailListData
	e.ok("email_list", map[string]any{"mailbox": "agent", "folder": "drafts"}, &list)
	if len(list.Messages) != 1 || list.Messages[0].ID != id {
		t.Fatalf("drafts listed: %+v", list.Messages)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), "agent's wording", "the person's wording", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	var read EmailReadData
	e.ok("email_read", map[string]any{"mailbox": "agent", "folder": "drafts", "id": id}, &read)
	if !strings.Contains(read.Body, "the person's wording") {
		t.Fatalf("the agent does not see the edit: %q", read.Body)
	}
	e.ok("email_draft", map[string]any{"action": "update", "mailbox": "agent", "id": id, "subject": "Proposal (reviewed)"}, &dd)
	e.ok("email_draft", map[string]any{"action": "send", "mailbox": "agent", "id": id}, &dd)
	if dd.Sent == nil || dd.Sent.Status != "delivered" {
		t.Fatalf("send: %+v", dd)
	}
	e.ok("email_list", map[string]any{"mailbox": "boss"}, &list)
	if len(list.Messages) != 1 || list.Messages[0].Subject != "Proposal (reviewed)" {
		t.Fatalf("boss got %+v", list.Messages)
	}
	e.ok("email_read", map[string]any{"mailbox": "boss", "id": list.Messages[0].ID}, &read)
	if !strings.Contains(read.Body, "the person's wording") || strings.Contains(read.Body, "agent's wording") {
		t.Fatalf("what arrived is not the edit: %q", read.Body)
	}
	e.ok("email_list", map[string]any{"mailbox": "agent", "folder": "drafts"}, &list)
	if len(list.Messages) != 0 {
		t.Fatalf("the sent draft is still in drafts: %+v", list.Messages)
	}

	// Scheduled: email_send and a draft with send_at wait in the queue.
	at := time.Now().Add(3 * time.Hour).UTC().Truncate(time.Second)
	var sent SendData
	e.ok("email_send", map[string]any{"from_mailbox": "agent", "to": "boss@example.test", "subject": "Later", "body": "b", "send_at": at.Format(time.RFC3339)}, &sent)
	if sent.Status != "scheduled" || sent.SendAt == nil || !sent.SendAt.Equal(at) {
		t.Fatalf("scheduled send: %+v", sent.SendResult)
	}
	e.ok("email_draft", map[string]any{"action": "create", "mailbox": "agent", "to": "boss@example.test", "subject": "Later too", "body": "b", "send_at": at.Format(time.RFC3339)}, &dd)
	e.ok("email_draft", map[string]any{"action": "send", "mailbox": "agent", "id": dd.Draft.ID}, &dd)
	if dd.Sent == nil || dd.Sent.Status != "scheduled" {
		t.Fatalf("scheduled draft: %+v", dd.Sent)
	}
	var q protocol.QueueList
	e.d.Call(t, protocol.VerbQueueList, nil, &q)
	if len(q.Items) != 2 || !q.Items[0].Scheduled || !q.Items[1].Scheduled {
		t.Fatalf("queue: %+v", q.Items)
	}
	for _, it := range q.Items {
		e.d.Call(t, protocol.VerbQueueDrop, protocol.QueueIDArgs{ID: it.ID}, nil)
	}

	e.fail("email_send", map[string]any{"from_mailbox": "agent", "to": "boss@example.test", "subject": "s", "body": "b", "send_at": "tomorrow"}, protocol.CodeInvalidInput)
	e.fail("email_send", map[string]any{"from_mailbox": "agent", "to": "boss@example.test", "subject": "s", "body": "b", "send_at": "2001-01-01T00:00:00Z"}, protocol.CodeInvalidInput)
	e.fail("email_draft", map[string]any{"action": "send", "mailbox": "agent"}, protocol.CodeInvalidInput)
	e.fail("email_draft", map[string]any{"action": "delete", "mailbox": "agent", "id": "2026-01-01-000000-ghost"}, protocol.CodeNotFound)
	e.fail("email_draft", map[string]any{"action": "create", "mailbox": "agent", "to": "not an address"}, protocol.CodeInvalidInput)
	e.ok("email_draft", map[string]any{"action": "create", "mailbox": "agent", "subject": "scrap"}, &dd)
	e.ok("email_draft", map[string]any{"action": "delete", "mailbox": "agent", "id": dd.Draft.ID}, &dd)
	if !dd.Deleted {
		t.Fatalf("delete: %+v", dd)
	}
}

// Regression: the mailbox's own draft was read with trust.why "this mailbox
// has no trusted senders configured, so no mail to it is trusted", which
// is not why: a draft was never mail to it. Its trusted is "none" and its
// text fenced (a person may have written it, and a reply's subject and
// recipients come from the message it answers), and why says so; a sent
// copy says it was sent by the mailbox and is not fenced.
func TestOwnDraftsAndSentCopiesSayWhatTrustedMeans(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Tools = []string{"all"} })
	e.d.Mailbox(t, "agent")
	e.d.Mailbox(t, "boss")
	var dd DraftData
	e.ok("email_draft", map[string]any{"action": "create", "mailbox": "agent", "to": "boss@example.test", "subject": "Plan", "body": "a draft"}, &dd)
	var list EmailListData
	e.ok("email_list", map[string]any{"mailbox": "agent", "folder": "drafts"}, &list)
	if len(list.Messages) != 1 || list.Messages[0].Trusted != "none" {
		t.Fatalf("drafts listed: %+v, want one with trusted none", list.Messages)
	}
	var read EmailReadData
	e.ok("email_read", map[string]any{"mailbox": "agent", "folder": "drafts", "id": dd.Draft.ID}, &read)
	if tr := read.Trust; tr == nil || tr.Trusted != "none" || !tr.Fenced || !strings.Contains(tr.Why, "a draft of this mailbox") {
		t.Fatalf("the draft's trust: %+v, want none, fenced, and why saying it is a draft", tr)
	}
	var sent SendData
	e.ok("email_send", map[string]any{"from_mailbox": "agent", "to": "boss@example.test", "subject": "Sent", "body": "sent"}, &sent)
	e.ok("email_read", map[string]any{"mailbox": "agent", "folder": "sent", "id": sent.ID}, &read)
	if tr := read.Trust; tr == nil || tr.Trusted != "none" || tr.Fenced || !strings.Contains(tr.Why, "sent by this mailbox") {
		t.Fatalf("the sent copy's trust: %+v, want none, not fenced, sent by this mailbox", tr)
	}
}
