package daemon

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// newVerbRequests are the requests of the draft, label and purge verbs on
// mailbox, naming the given draft, inbox and trash message ids.
func newVerbRequests(mailbox, draft, msg, trashed string) []struct {
	verb string
	args any
} {
	future := time.Now().AddDate(1, 0, 0)
	return []struct {
		verb string
		args any
	}{
		{protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: mailbox, Subject: "x", To: []string{"a@remote.test"}}},
		{protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: mailbox, ReplyToID: msg}},
		{protocol.VerbDraftUpdate, protocol.DraftUpdateArgs{Mailbox: mailbox, ID: draft, Subject: ptrTo("pwned")}},
		{protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: mailbox, ID: draft}},
		{protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: mailbox, ID: draft, DryRun: true}},
		{protocol.VerbDraftDelete, protocol.DraftIDArgs{Mailbox: mailbox, ID: draft}},
		{protocol.VerbMessageLabel, protocol.MessageLabelArgs{Mailbox: mailbox, IDs: []string{msg}, Add: []string{"x"}}},
		{protocol.VerbMessageLabel, protocol.MessageLabelArgs{Mailbox: mailbox, Folder: "drafts", IDs: []string{draft}, Star: ptrTo(true)}},
		{protocol.VerbMessagePurge, protocol.MessagePurgeArgs{Mailbox: mailbox, IDs: []string{trashed}}},
		{protocol.VerbMessagePurge, protocol.MessagePurgeArgs{Mailbox: mailbox, Before: &future}},
		{protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: mailbox, Folder: "drafts"}},
		{protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: mailbox, Label: "secret-label"}},
	}
}

// TestNewVerbsAnswerOthersLikeAMissingMailbox: another uid calling the
// draft, label and purge verbs on a user's mailbox, naming its real draft
// and message ids, gets exactly the answer it gets for a mailbox that does
// not exist, and nothing it answers names an id, subject or label. Nothing
// changes in the owner's mailbox.
func TestNewVerbsAnswerOthersLikeAMissingMailbox(t *testing.T) {
	td, own, oth := twoUsers(t, "mcdo")
	own.must(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "privbox"})
	var d protocol.Draft
	json.Unmarshal(own.must(t, protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "privbox", Subject: "secret draft subject", To: []string{"pat@remote.test"}}), &d)
	msg, _, err := td.store.Deliver("privbox", "inbox", &store.Message{MessageID: "m1@remote.test", From: "a@remote.test",
		Subject: "secret inbox subject", ReceivedAt: time.Now()}, "hello", []byte("Subject: x\r\n\r\nhello\r\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	own.must(t, protocol.VerbMessageLabel, protocol.MessageLabelArgs{Mailbox: "privbox", IDs: []string{msg}, Add: []string{"secret-label"}})
	trashed, _, err := td.store.Deliver("privbox", "trash", &store.Message{MessageID: "m2@remote.test", From: "a@remote.test",
		Subject: "secret trash subject", ReceivedAt: time.Now().Add(-time.Hour)}, "bye", []byte("Subject: y\r\n\r\nbye\r\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	snapshot := func() string {
		var b strings.Builder
		for _, f := range []string{"inbox", "trash", "drafts", "sent"} {
			var l protocol.MessageList
			td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "privbox", Folder: f}, &l)
			out, _ := json.Marshal(l)
			b.Write(out)
		}
		return b.String()
	}
	before := snapshot()

	mine := newVerbRequests("privbox", d.ID, msg, trashed)
	missing := newVerbRequests("nosuchbox", d.ID, msg, trashed)
	for i, r := range mine {
		got := oth.do(t, r.verb, r.args)
		want := oth.do(t, missing[i].verb, missing[i].args)
		if got.Code != protocol.CodeNotFound || want.Code != got.Code || strings.ReplaceAll(got.Msg, "privbox", "nosuchbox") != want.Msg {
			t.Errorf("%s as another user: %q %q; for a missing mailbox: %q %q", r.verb, got.Code, got.Msg, want.Code, want.Msg)
		}
		for _, secret := range []string{d.ID, msg, trashed, "secret", "pat@remote"} {
			if strings.Contains(got.Msg, secret) || strings.Contains(string(got.Data), secret) {
				t.Errorf("%s as another user reveals %q: %s %s", r.verb, secret, got.Msg, got.Data)
			}
		}
	}
	if after := snapshot(); after != before {
		t.Errorf("another user's calls changed the mailbox:\nbefore %s\nafter  %s", before, after)
	}
}

// TestDraftsAndLabelsCarryNoHistory: a user with drafts, labels, a sent
// draft (queued, with its idempotency record) and trash deletes its
// mailbox; another user creates one of the same name. The newcomer sees
// none of it: no draft, no label, no queue item, no earlier send answer,
// and acting on the old ids finds nothing.
func TestDraftsAndLabelsCarryNoHistory(t *testing.T) {
	td, c1, c2 := twoUsers(t, "mcdh")

	// u2's history under "reused".
	c2.must(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "reused"})
	var sentDraft, keptDraft protocol.Draft
	json.Unmarshal(c2.must(t, protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "reused", Subject: "u2 sent draft", To: []string{"x@remote.test"}}), &sentDraft)
	json.Unmarshal(c2.must(t, protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "reused", Subject: "u2 kept draft", To: []string{"x@remote.test"}}), &keptDraft)
	var oldSend protocol.SendResult
	json.Unmarshal(c2.must(t, protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "reused", ID: sentDraft.ID}), &oldSend)
	msg, _, err := td.store.Deliver("reused", "inbox", &store.Message{MessageID: "m1@remote.test", From: "a@remote.test",
		Subject: "u2 inbox", ReceivedAt: time.Now()}, "hello", []byte("Subject: x\r\n\r\nhello\r\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	c2.must(t, protocol.VerbMessageLabel, protocol.MessageLabelArgs{Mailbox: "reused", IDs: []string{msg}, Add: []string{"secret-label"}, Star: ptrTo(true)})
	c2.must(t, protocol.VerbMessageMove, protocol.MessageMoveArgs{Mailbox: "reused", ID: msg, To: "trash"})
	// The indexes of every folder are loaded when the mailbox goes.
	for _, f := range []string{"inbox", "trash", "drafts", "sent"} {
		c2.must(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "reused", Folder: f})
	}
	c2.must(t, protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "reused", Force: true})

	// u1 takes the name.
	c1.must(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "reused"})
	for _, f := range []string{"inbox", "trash", "drafts", "sent", "archive"} {
		for _, args := range []protocol.MessageListArgs{{Mailbox: "reused", Folder: f}, {Mailbox: "reused", Folder: f, Label: "secret-label"}, {Mailbox: "reused", Folder: f, Starred: ptrTo(true)}} {
			var l protocol.MessageList
			json.Unmarshal(c1.must(t, protocol.VerbMessageList, args), &l)
			if len(l.Messages) != 0 || l.Total != 0 {
				t.Errorf("u1 lists u2's %s: %+v", f, l)
			}
		}
	}
	for _, r := range newVerbRequests("reused", keptDraft.ID, msg, msg) {
		switch r.verb {
		case protocol.VerbDraftCreate, protocol.VerbMessageList:
			continue
		}
		if _, ok := r.args.(protocol.MessagePurgeArgs); ok && r.args.(protocol.MessagePurgeArgs).Before != nil {
			var p protocol.MessagePurged
			json.Unmarshal(c1.must(t, r.verb, r.args), &p)
			if len(p.Purged) != 0 {
				t.Errorf("u1's purge found u2's trash: %+v", p)
			}
			continue
		}
		if o := c1.do(t, r.verb, r.args); o.Code != protocol.CodeNotFound {
			t.Errorf("%s of u2's ids as u1: %q %s %s, want not_found", r.verb, o.Code, o.Msg, o.Data)
		}
	}
	if data := string(c1.must(t, protocol.VerbQueueList, nil)); strings.Contains(data, oldSend.ID) || strings.Contains(data, "u2 ") {
		t.Errorf("u1's queue shows u2's draft send: %s", data)
	}
	// u1's own draft under u2's old draft's id, sent: a new message, not
	// u2's earlier answer.
	var d protocol.Draft
	json.Unmarshal(c1.must(t, protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "reused", Subject: "u2 sent draft", To: []string{"x@remote.test"}}), &d)
	var res protocol.SendResult
	json.Unmarshal(c1.must(t, protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "reused", ID: d.ID}), &res)
	if res.Duplicate || res.MessageID == oldSend.MessageID || res.ID == "" {
		t.Errorf("u1's draft send answered with u2's: %+v (u2's %+v)", res, oldSend)
	}
}

// TestMessagePurgeBeforeEdgeDates: message.purge before a far-past date
// purges nothing, before a far-future date purges all of trash (and
// nothing else), and a malformed date is refused as invalid input.
func TestMessagePurgeBeforeEdgeDates(t *testing.T) {
	td := startDaemon(t, "")
	td.ensureMine(t, "alice")
	now := time.Now().UTC()
	kept := deliverTo(t, td, "alice", "kept", now.Add(-time.Hour), nil)
	var trashed []string
	for _, s := range []string{"a", "b"} {
		id := deliverTo(t, td, "alice", s, now.Add(-48*time.Hour), nil)
		if err := td.call(t, protocol.VerbMessageMove, protocol.MessageMoveArgs{Mailbox: "alice", ID: id, To: "trash"}, nil); err != nil {
			t.Fatal(err)
		}
		trashed = append(trashed, id)
	}
	for _, bad := range []string{"yesterday", "2026-13-45T00:00:00Z", "", "99999-01-01T00:00:00Z"} {
		err := td.call(t, protocol.VerbMessagePurge, map[string]any{"mailbox": "alice", "before": bad}, nil)
		if protocol.CodeOf(err) != protocol.CodeInvalidInput {
			t.Errorf("before %q: %v, want invalid_input", bad, err)
		}
	}
	for _, past := range []time.Time{{}, time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1600, 6, 1, 0, 0, 0, 0, time.UTC)} {
		var out protocol.MessagePurged
		if err := td.call(t, protocol.VerbMessagePurge, protocol.MessagePurgeArgs{Mailbox: "alice", Before: &past}, &out); err != nil || len(out.Purged) != 0 {
			t.Errorf("purge before %v: %v %+v, want nothing purged", past, err, out)
		}
	}
	future := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	var out protocol.MessagePurged
	if err := td.call(t, protocol.VerbMessagePurge, protocol.MessagePurgeArgs{Mailbox: "alice", Before: &future}, &out); err != nil || len(out.Purged) != len(trashed) {
		t.Errorf("purge before %v: %v %+v, want %v", future, err, out, trashed)
	}
	var m protocol.Message
	if err := td.call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "alice", ID: kept}, &m); err != nil {
		t.Errorf("the inbox message: %v", err)
	}
}
