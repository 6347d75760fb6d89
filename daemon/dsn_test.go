package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/emersion/go-smtp"

	"github.com/mailctl/mailctl/daemon/ingest"
	"github.com/mailctl/mailctl/daemon/outbound"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// A message the remote server deferred (4xx) and then refused (5xx on the
// retry) comes back to its sender as one RFC 3464 report in the inbox,
// trusted, linked to the sent copy, and on_receive hooks that opt in to
// Auto-Submitted mail run for it. A delivery, a failure the send's own
// answer carried, and an operator's drop make none.
func TestBounceToSenderAfterLaterFailure(t *testing.T) {
	td, mx := startWithRemoteMX(t)
	hooked := os.Geteuid() == 0 // hooks run as the owner: only root can switch to it
	if hooked {
		u := testusers.Create(t, "mcdsn")
		if err := td.EnsureMailbox("alice", u.UID, u.GID); err != nil {
			t.Fatal(err)
		}
		if err := td.call(t, protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "alice", Event: protocol.EventOnReceive, Name: "onbounce",
			Cmd: []string{"/bin/true"}, FireOnAuto: true}, nil); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Log("not root: the on_receive hook part is skipped (hooks run as the mailbox owner)")
		td.ensureMine(t, "alice")
	}
	inbox := func() []protocol.MessageSummary {
		t.Helper()
		var l protocol.MessageList
		if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "alice"}, &l); err != nil {
			t.Fatal(err)
		}
		return l.Messages
	}
	send := func(to ...string) protocol.SendResult {
		t.Helper()
		var res protocol.SendResult
		if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "alice", To: to, Subject: "Quarterly numbers", Body: "attached"}, &res); err != nil {
			t.Fatal(err)
		}
		return res
	}

	// Delivered, and refused at once (the answer says so): no report.
	mx.SetRcptErr("refused@remote.test", &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user"})
	if res := send("ok@remote.test", "refused@remote.test"); res.Status != "partial" {
		t.Fatalf("first send: %+v", res)
	}
	// Deferred, then dropped by the operator: no report.
	mx.SetRcptErr("slow@remote.test", &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "try later"})
	dropped := send("slow@remote.test")
	if err := td.call(t, protocol.VerbQueueDrop, protocol.QueueIDArgs{ID: outbound.QueueID("alice", dropped.ID)}, nil); err != nil {
		t.Fatal(err)
	}
	if got := inbox(); len(got) != 0 {
		t.Fatalf("reports for a delivery, an answered failure or a drop: %+v", got)
	}

	// Deferred, then refused on the retry: one report.
	mx.SetRcptErr("gone@remote.test", &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 2, 0}, Message: "mailbox busy"})
	res := send("gone@remote.test", "fine@remote.test")
	if res.Status != "deferred" {
		t.Fatalf("first attempt: %+v", res)
	}
	mx.SetRcptErr("gone@remote.test", &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user"})
	if err := td.call(t, protocol.VerbQueueRetry, protocol.QueueIDArgs{ID: outbound.QueueID("alice", res.ID)}, nil); err != nil {
		t.Fatal(err)
	}
	var msgs []protocol.MessageSummary
	testwait.For(t, "the bounce in alice's inbox", func() bool { msgs = inbox(); return len(msgs) > 0 })
	// The report names no subject: it is trusted and carries the daemon's
	// words only; In-Reply-To and dsn_for lead to the sent copy.
	if len(msgs) != 1 || msgs[0].Subject != "Undelivered mail returned to sender" {
		t.Fatalf("inbox: %+v", msgs)
	}
	var m protocol.Message
	if err := td.call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "alice", ID: msgs[0].ID}, &m); err != nil {
		t.Fatal(err)
	}
	if m.Trusted != protocol.Trusted || m.SubmittedBy != "mailer-daemon" || (m.SPF != nil && m.SPF.Result == "pass") {
		t.Errorf("bounce trust: trusted %q, submitted_by %q, spf %+v; want trusted, by the mail system, no invented pass", m.Trusted, m.SubmittedBy, m.SPF)
	}
	if m.InReplyTo != res.MessageID || m.AutoSubmitted != "auto-replied" || m.ThreadID == "" {
		t.Errorf("bounce links: in_reply_to %q (want %q), auto_submitted %q", m.InReplyTo, res.MessageID, m.AutoSubmitted)
	}
	var raw protocol.Message
	if err := td.call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "alice", ID: msgs[0].ID, Raw: true, MaxChars: 200000}, &raw); err != nil {
		t.Fatal(err)
	}
	p, err := ingest.Parse([]byte(raw.Body), ingest.Options{})
	if err != nil || p.DSN == nil {
		t.Fatalf("the bounce does not parse as a DSN: %v\n%s", err, raw.Body)
	}
	if p.DSN.OriginalMessageID != res.MessageID || len(p.DSN.Recipients) != 1 {
		t.Fatalf("DSN: %+v", p.DSN)
	}
	if r := p.DSN.Recipients[0]; r.Address != "gone@remote.test" || r.Action != "failed" || r.Status != "5.1.1" || r.Diagnostic != "550 5.1.1" {
		t.Errorf("DSN recipient: %+v", r)
	}
	for _, want := range []string{"Reporting-MTA: dns; mx.example.test", "text/rfc822-headers", "report-type=delivery-status"} {
		if !strings.Contains(raw.Body, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	var sent protocol.Message
	td.call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "alice", Folder: "sent", ID: res.ID}, &sent)
	if m.ThreadID != sent.ThreadID {
		t.Errorf("the bounce is in thread %q, the sent copy in %q", m.ThreadID, sent.ThreadID)
	}
	if hooked {
		testwait.For(t, "the on_receive hook run for the bounce", func() bool {
			var runs protocol.HookRuns
			td.call(t, protocol.VerbHookRuns, protocol.HookRunsArgs{Name: "onbounce"}, &runs)
			return len(runs.Runs) == 1 && runs.Runs[0].MessageID == msgs[0].ID && runs.Runs[0].ExitCode == 0
		})
	}

	// Announced again (a restart after a crash): still one report.
	res.Recipients, res.Status = sent.Recipients, sent.DeliveryStatus
	td.out.bounceToSender("alice", res.ID, res)
	if got := inbox(); len(got) != 1 {
		t.Fatalf("the same failure reported twice: %+v", got)
	}
}

// isReport is the loop protection of bounces: a report is never answered
// with another, whatever the line endings, folding or header case.
func TestIsReport(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want bool
	}{
		{"Content-Type: multipart/report; report-type=delivery-status; boundary=x\r\n\r\nbody", true},
		{"From: a@b\nContent-Type: multipart/report;\n\treport-type=\"Delivery-Status\";\n boundary=x\n\nbody", true},
		{"content-type: multipart/report; report-type=delivery-status", true},
		{"Content-Type: multipart/report; report-type=disposition-notification\r\n\r\n", false},
		{"Content-Type: text/plain\r\n\r\nContent-Type: multipart/report; report-type=delivery-status\r\n", false},
		{"Subject: hi\r\nTo: x@y\r\n", false},
		{"", false},
	} {
		if got := isReport([]byte(c.raw)); got != c.want {
			t.Errorf("isReport(%q) = %v, want %v", c.raw, got, c.want)
		}
	}
}

// The sent copy is its owner's file: one the owner replaced with something
// the store will not read (here a sparse file past the store's bound, with
// no frontmatter) still lets the bounce through, naming the message by the
// Message-ID the queue knows; the daemon reads no body for it.
func TestBounceWhenTheSentCopyWasReplaced(t *testing.T) {
	td, mx := startWithRemoteMX(t)
	td.ensureMine(t, "alice")
	mx.SetRcptErr("gone@remote.test", &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 2, 0}, Message: "mailbox busy"})
	var res protocol.SendResult
	if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "alice", To: []string{"gone@remote.test"}, Subject: "Numbers", Body: "attached"}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Status != "deferred" {
		t.Fatalf("first attempt: %+v", res)
	}
	sent := filepath.Join(td.store.Path("alice"), protocol.FolderSent, res.ID+".md")
	testwait.For(t, "the sent copy on disk", func() bool { _, err := os.Stat(sent); return err == nil })
	if err := os.Truncate(sent, store.MaxMessageFile+1); err != nil {
		t.Fatal(err)
	}
	mx.SetRcptErr("gone@remote.test", &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user"})
	if err := td.call(t, protocol.VerbQueueRetry, protocol.QueueIDArgs{ID: outbound.QueueID("alice", res.ID)}, nil); err != nil {
		t.Fatal(err)
	}
	var l protocol.MessageList
	testwait.For(t, "the bounce in alice's inbox", func() bool {
		if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "alice"}, &l); err != nil {
			t.Fatal(err)
		}
		return len(l.Messages) > 0
	})
	var m protocol.Message
	if err := td.call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "alice", ID: l.Messages[0].ID}, &m); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(m.Body, "gone@remote.test") || m.InReplyTo != res.MessageID {
		t.Fatalf("bounce: want the recipient, in reply to %s; got in_reply_to %q, %q", res.MessageID, m.InReplyTo, m.Body)
	}
}
