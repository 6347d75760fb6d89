package control_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/control"
	"github.com/mailctl/mailctl/internal/fakemx"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/protocol"
)

// startSender is a daemon that delivers to a fake MX for remote.test, with
// the mailbox alice of the user running the test.
func startSender(t *testing.T) (*testdaemon.Daemon, *fakemx.Server) {
	t.Helper()
	mx := fakemx.New(t, "127.0.0.1", nil)
	_, port, _ := net.SplitHostPort(mx.Addr)
	td := testdaemon.Start(t, testdaemon.Options{Extra: "[delivery]\nport = " + port + "\n"})
	td.DNS.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	td.DNS.SetIP("mx.remote.test", "127.0.0.1")
	td.Mailbox(t, "alice")
	return td, mx
}

// The daemon stops after a draft is queued and before it leaves drafts/:
// sending the unchanged draft again answers with the first send and sends
// nothing more; an edited draft is a new message.
func TestDraftSentAgainAfterAStopIsNotSentTwice(t *testing.T) {
	td, mx := startSender(t)
	var dr protocol.Draft
	if err := td.TryCall(protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "alice", To: []string{"friend@remote.test"},
		Subject: "Once", Body: "only once\n"}, &dr); err != nil {
		t.Fatal(err)
	}
	keep := control.SwapRemoveDraft(func(*control.Server, string, string, string) (bool, error) {
		return false, errors.New("stopped before the draft was removed")
	})
	var first protocol.SendResult
	err := td.TryCall(protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "alice", ID: dr.ID}, &first)
	control.SwapRemoveDraft(keep)
	if err != nil || first.Status != "delivered" {
		t.Fatalf("first send: %+v %v", first, err)
	}
	if _, err := os.Stat(dr.Path); err != nil {
		t.Fatalf("the draft should still be there: %v", err)
	}
	var again protocol.SendResult
	if err := td.TryCall(protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "alice", ID: dr.ID}, &again); err != nil {
		t.Fatal(err)
	}
	if !again.Duplicate || again.MessageID != first.MessageID || again.ID != first.ID {
		t.Fatalf("sending the unchanged draft again: %+v, want the first send (%s)", again, first.MessageID)
	}
	if n := len(mx.Messages()); n != 1 {
		t.Fatalf("the MX got %d messages, want 1", n)
	}
	if _, err := os.Stat(dr.Path); !os.IsNotExist(err) {
		t.Fatalf("the draft is still in drafts after the second call: %v", err)
	}

	// The same id, edited: a new message.
	if err := td.TryCall(protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "alice", To: []string{"friend@remote.test"},
		Subject: "Once", Body: "only once\n"}, &dr); err != nil {
		t.Fatal(err)
	}
	var third protocol.SendResult
	if err := td.TryCall(protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "alice", ID: dr.ID}, &third); err != nil {
		t.Fatal(err)
	}
	if third.Duplicate || third.MessageID == first.MessageID {
		t.Fatalf("a new draft with the same content was answered as the first: %+v", third)
	}
	if n := len(mx.Messages()); n != 2 {
		t.Fatalf("the MX got %d messages, want 2", n)
	}
}

// Regression: the version of a draft is its send's idempotency key, and a
// key is remembered for delivery.idempotency_window (30 days). A draft
// left in drafts/ after it was queued (the daemon stopped before removing
// it) and sent again after the window went out a second time. The record
// of a draft's send is kept as long as the draft is still there as it was
// sent, so a retry answers the first send, whenever it comes.
func TestDraftSentAgainAfterTheWindowIsNotSentTwice(t *testing.T) {
	clk := testclock.New()
	mx := fakemx.New(t, "127.0.0.1", nil)
	_, port, _ := net.SplitHostPort(mx.Addr)
	td := testdaemon.Start(t, testdaemon.Options{Extra: "[delivery]\nport = " + port + "\n", Clock: clk.Now})
	td.DNS.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	td.DNS.SetIP("mx.remote.test", "127.0.0.1")
	td.Mailbox(t, "alice")
	var dr protocol.Draft
	if err := td.TryCall(protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "alice", To: []string{"friend@remote.test"},
		Subject: "Once", Body: "only once, ever\n"}, &dr); err != nil {
		t.Fatal(err)
	}
	keep := control.SwapRemoveDraft(func(*control.Server, string, string, string) (bool, error) {
		return false, errors.New("stopped before the draft was removed")
	})
	var first protocol.SendResult
	err := td.TryCall(protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "alice", ID: dr.ID}, &first)
	control.SwapRemoveDraft(keep)
	if err != nil || first.Status != "delivered" {
		t.Fatalf("first send: %+v %v", first, err)
	}
	clk.Advance(31 * 24 * time.Hour) // past delivery.idempotency_window
	var again protocol.SendResult
	if err := td.TryCall(protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "alice", ID: dr.ID}, &again); err != nil {
		t.Fatal(err)
	}
	if !again.Duplicate || again.MessageID != first.MessageID || again.ID != first.ID {
		t.Fatalf("the unchanged draft sent again 31 days later: %+v, want the first send (%s)", again, first.MessageID)
	}
	if n := len(mx.Messages()); n != 1 {
		t.Fatalf("the MX got %d messages, want 1", n)
	}
	if _, err := os.Stat(dr.Path); !os.IsNotExist(err) {
		t.Fatalf("the draft is still in drafts after the second call: %v", err)
	}
	// Gone now: a third call says so, and sends nothing.
	err = td.TryCall(protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "alice", ID: dr.ID}, &again)
	if pe, ok := err.(*protocol.Error); !ok || pe.Code != protocol.CodeNotFound {
		t.Fatalf("sending the sent draft a third time: %v, want not_found", err)
	}
	if n := len(mx.Messages()); n != 1 {
		t.Fatalf("the MX got %d messages, want 1", n)
	}
}

// restoredDraft is a draft with an attachment that was queued and not
// taken out of drafts/ (the daemon stopped in between), then written again
// as a restore on another host writes it: its files made anew, the same
// bytes or edit's, with later times. first is the first send's answer.
type restoredDraft struct {
	td    *testdaemon.Daemon
	mx    *fakemx.Server
	clk   *testclock.Clock
	dr    protocol.Draft
	first protocol.SendResult
}

func sendDraftNotRemoved(t *testing.T, body string) *restoredDraft {
	t.Helper()
	rd := &restoredDraft{clk: testclock.New(), mx: fakemx.New(t, "127.0.0.1", nil)}
	_, port, _ := net.SplitHostPort(rd.mx.Addr)
	rd.td = testdaemon.Start(t, testdaemon.Options{Extra: "[delivery]\nport = " + port + "\n", Clock: rd.clk.Now})
	rd.td.DNS.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	rd.td.DNS.SetIP("mx.remote.test", "127.0.0.1")
	rd.td.Mailbox(t, "alice")
	if err := rd.td.TryCall(protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "alice", To: []string{"friend@remote.test"},
		Subject: "Restored", Body: body, Attachments: []protocol.SendAttachment{{Filename: "plan.txt", ContentType: "text/plain", Data: []byte("the plan")}}}, &rd.dr); err != nil {
		t.Fatal(err)
	}
	keep := control.SwapRemoveDraft(func(*control.Server, string, string, string) (bool, error) {
		return false, errors.New("stopped before the draft was removed")
	})
	err := rd.td.TryCall(protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "alice", ID: rd.dr.ID}, &rd.first)
	control.SwapRemoveDraft(keep)
	if err != nil || rd.first.Status != "delivered" {
		t.Fatalf("first send: %+v %v", rd.first, err)
	}
	return rd
}

// rewrite writes every file of the draft (its Markdown and its
// attachments) anew, with edit applied to the Markdown's bytes and editAtt
// to each attachment's, and times a day later: a new inode and new times,
// as a restore makes them.
func (rd *restoredDraft) rewrite(t *testing.T, edit func(string) string, editAtt func([]byte) []byte) {
	t.Helper()
	later := time.Now().Add(24 * time.Hour)
	again := func(path string, data []byte) {
		t.Helper()
		if err := os.WriteFile(path+".restoring", data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path+".restoring", later, later); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".restoring", path); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(rd.dr.Path)
	if err != nil {
		t.Fatal(err)
	}
	var before, after syscall.Stat_t
	syscall.Stat(rd.dr.Path, &before)
	again(rd.dr.Path, []byte(edit(string(data))))
	syscall.Stat(rd.dr.Path, &after)
	if after.Ino == before.Ino {
		t.Fatalf("the rewritten draft has its old inode")
	}
	atts := strings.TrimSuffix(rd.dr.Path, ".md") + ".attachments"
	ents, err := os.ReadDir(atts)
	if err != nil || len(ents) != 1 {
		t.Fatalf("the draft's attachments: %v %v", ents, err)
	}
	for _, e := range ents {
		p := atts + "/" + e.Name()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		again(p, editAtt(b))
	}
}

// Regression: the idempotency key of a draft's send was made from the
// version of its file (inode, size and times). A draft queued but not
// taken out of drafts/ (the daemon stopped in between), then restored on
// another host or copied unchanged, had another version, so another key,
// and a retry of its draft.send sent it a second time. The key is the
// draft's content now: the retry answers the first send, at once or past
// delivery.idempotency_window, and the draft leaves drafts/.
func TestDraftRestoredUnchangedIsNotSentAgain(t *testing.T) {
	for _, c := range []struct {
		name  string
		after time.Duration
	}{{"at once", 0}, {"past the window", 31 * 24 * time.Hour}} {
		t.Run(c.name, func(t *testing.T) {
			rd := sendDraftNotRemoved(t, "only once, wherever it is\n")
			rd.rewrite(t, func(s string) string { return s }, func(b []byte) []byte { return b })
			rd.clk.Advance(c.after)
			var again protocol.SendResult
			if err := rd.td.TryCall(protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "alice", ID: rd.dr.ID}, &again); err != nil {
				t.Fatal(err)
			}
			if !again.Duplicate || again.MessageID != rd.first.MessageID || again.ID != rd.first.ID {
				t.Fatalf("the restored, unchanged draft sent again: %+v, want the first send (%s)", again, rd.first.MessageID)
			}
			if n := len(rd.mx.Messages()); n != 1 {
				t.Fatalf("the MX got %d messages, want 1", n)
			}
			var sent protocol.MessageList
			if err := rd.td.TryCall(protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "alice", Folder: protocol.FolderSent}, &sent); err != nil || len(sent.Messages) != 1 {
				t.Fatalf("sent copies: %+v %v, want 1", sent.Messages, err)
			}
			if _, err := os.Stat(rd.dr.Path); !os.IsNotExist(err) {
				t.Fatalf("the draft is still in drafts after the retry: %v", err)
			}
		})
	}
}

// The same situation with the draft edited before it is restored, its
// text or only the bytes of its attachment (the same size, so the
// Markdown file is the same): its content is new, and so is its message.
func TestDraftRestoredEditedIsANewMessage(t *testing.T) {
	same := func(s string) string { return s }
	for _, c := range []struct {
		name    string
		edit    func(string) string
		editAtt func([]byte) []byte
		want    string
	}{
		{"text", func(s string) string { return strings.Replace(s, "first words", "second thoughts", 1) }, func(b []byte) []byte { return b }, "second thoughts"},
		{"attachment", same, func(b []byte) []byte { return bytes.ToUpper(b) }, base64.StdEncoding.EncodeToString([]byte("THE PLAN"))},
	} {
		t.Run(c.name, func(t *testing.T) {
			rd := sendDraftNotRemoved(t, "first words\n")
			rd.rewrite(t, c.edit, c.editAtt)
			var again protocol.SendResult
			if err := rd.td.TryCall(protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "alice", ID: rd.dr.ID}, &again); err != nil {
				t.Fatal(err)
			}
			if again.Duplicate || again.MessageID == rd.first.MessageID || again.Status != "delivered" {
				t.Fatalf("the edited draft: %+v, want a new message", again)
			}
			got := rd.mx.Messages()
			if len(got) != 2 || !strings.Contains(string(got[1].Data), c.want) {
				t.Fatalf("the MX got %d messages, want the edit second", len(got))
			}
			if _, err := os.Stat(rd.dr.Path); !os.IsNotExist(err) {
				t.Fatalf("the sent edit is still in drafts: %v", err)
			}
		})
	}
}

// A person edits the draft while the agent's draft.send is under way:
// what was read goes out, and the edit is not deleted with the draft but
// stays in drafts/, and the answer says so.
func TestDraftEditedDuringSendIsKept(t *testing.T) {
	td, mx := startSender(t)
	var dr protocol.Draft
	if err := td.TryCall(protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "alice", To: []string{"friend@remote.test"},
		Subject: "Plan", Body: "first version\n"}, &dr); err != nil {
		t.Fatal(err)
	}
	var keep control.RemoveDraftFunc
	keep = control.SwapRemoveDraft(func(s *control.Server, mailbox, id, version string) (bool, error) {
		data, err := os.ReadFile(dr.Path)
		if err != nil {
			return false, err
		}
		edited := strings.Replace(string(data), "first version", "second version, edited by hand", 1)
		if err := os.WriteFile(dr.Path, []byte(edited), 0o600); err != nil {
			return false, err
		}
		return keep(s, mailbox, id, version)
	})
	var res protocol.SendResult
	err := td.TryCall(protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "alice", ID: dr.ID}, &res)
	control.SwapRemoveDraft(keep)
	if err != nil || res.Status != "delivered" || !res.DraftKept {
		t.Fatalf("send: %+v %v (want delivered, draft_kept)", res, err)
	}
	got := mx.Messages()
	if len(got) != 1 || !strings.Contains(string(got[0].Data), "first version") || strings.Contains(string(got[0].Data), "second version") {
		t.Fatalf("the MX got %d messages; want the version that was read", len(got))
	}
	data, err := os.ReadFile(dr.Path)
	if err != nil || !strings.Contains(string(data), "second version, edited by hand") {
		t.Fatalf("the edit is gone from drafts: %v", err)
	}
	// Without an edit, the draft leaves drafts/ as before.
	var again protocol.SendResult
	if err := td.TryCall(protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "alice", ID: dr.ID}, &again); err != nil || again.DraftKept {
		t.Fatalf("sending the edit: %+v %v", again, err)
	}
	if _, err := os.Stat(dr.Path); !os.IsNotExist(err) {
		t.Fatalf("the sent edit is still in drafts: %v", err)
	}
	if got := mx.Messages(); len(got) != 2 || !strings.Contains(string(got[1].Data), "second version") {
		t.Fatalf("the MX got %d messages; want the edit second", len(got))
	}
}

// A reply draft takes the headers of the message it answers, which its
// sender wrote: an id that is no msg-id and a word too long for a header
// line are left out or cut, as a reply sent at once has them, instead of
// refusing the draft.
func TestReplyDraftToHostileHeaders(t *testing.T) {
	td, _ := startSender(t)
	long := strings.Repeat("A", 600)
	id := td.Deliver(t, "alice", testdaemon.Message{From: "Bob <bob@remote.test>", Subject: "Hi " + long, MessageID: "noatsign", Body: "x"})
	var dr protocol.Draft
	if err := td.TryCall(protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "alice", ReplyToID: id, Body: "thanks"}, &dr); err != nil {
		t.Fatal(err)
	}
	if want := "Re: Hi " + long[:400]; dr.Subject != want || strings.Join(dr.To, ",") != "Bob <bob@remote.test>" {
		t.Errorf("draft subject %q to %q, want %q to Bob", dr.Subject, dr.To, want)
	}
	var res protocol.SendResult
	if err := td.TryCall(protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "alice", ID: dr.ID, DryRun: true}, &res); err != nil {
		t.Fatalf("sending the draft: %v", err)
	}
}

// A draft's fields are kept in its frontmatter, which the store reads back
// only up to a bound: a draft of a quarter of a million recipients was
// written and then never listed or sent. Each field is refused past what a
// header may hold, on create and on update.
func TestDraftFieldsAreBounded(t *testing.T) {
	td, _ := startSender(t)
	var many []string
	for i := range 3000 {
		many = append(many, fmt.Sprintf("Recipient Number %d <rcpt%d@remote.test>", i, i))
	}
	for name, a := range map[string]protocol.DraftArgs{
		"to":  {Mailbox: "alice", To: many, Subject: "s"},
		"bcc": {Mailbox: "alice", Bcc: many, Subject: "s"},
	} {
		if err := td.TryCall(protocol.VerbDraftCreate, a, nil); protocol.CodeOf(err) != protocol.CodeInvalidInput || !strings.Contains(err.Error(), name) {
			t.Errorf("a draft with %d addresses in %s: %v", len(many), name, err)
		}
	}
	var dr protocol.Draft
	if err := td.TryCall(protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "alice", To: []string{"friend@remote.test"}, Subject: "s"}, &dr); err != nil {
		t.Fatal(err)
	}
	if err := td.TryCall(protocol.VerbDraftUpdate, protocol.DraftUpdateArgs{Mailbox: "alice", ID: dr.ID, Cc: &many}, nil); protocol.CodeOf(err) != protocol.CodeInvalidInput {
		t.Errorf("an update to %d Cc addresses: %v", len(many), err)
	}
	var l protocol.MessageList
	td.Call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "alice", Folder: protocol.FolderDrafts}, &l)
	if len(l.Messages) != 1 || l.Messages[0].ID != dr.ID || len(l.Messages[0].To) != 1 {
		t.Errorf("%d drafts, want the one draft, unchanged", len(l.Messages))
	}
}
