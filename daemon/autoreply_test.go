package daemon_test

import (
	"fmt"
	"net/smtp"
	"slices"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/protocol"
)

// deliverFrom hands raw to the daemon over SMTP with envelope sender from
// ("" sends MAIL FROM:<>) and returns the stored message.
func deliverFrom(t *testing.T, td *testdaemon.Daemon, from, subject, extraHeaders string) protocol.Message {
	t.Helper()
	mid := fmt.Sprintf("%s-%d@remote.test", strings.ReplaceAll(subject, " ", "-"), len(extraHeaders))
	raw := extraHeaders + "From: Bob <bob@remote.test>\r\nTo: agent@" + testdaemon.Domain + "\r\nSubject: " + subject +
		"\r\nMessage-ID: <" + mid + ">\r\nDate: Sun, 22 Nov 2026 00:00:00 +0000\r\n\r\nhello\r\n"
	if err := smtp.SendMail(td.SMTPAddr, nil, from, []string{"agent@" + testdaemon.Domain}, []byte(raw)); err != nil {
		t.Fatal(err)
	}
	var m protocol.Message
	td.Call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "agent", ID: td.Find(t, "agent", protocol.FolderInbox, mid)}, &m)
	return m
}

// Regression: email_reply with auto_reply sent to every address of the
// parent's Reply-To, so one message naming many strangers made an agent's
// responder (a hook answering each mail) write to all of them. An
// automatic reply now goes to the envelope sender the daemon recorded,
// which no header of the message can set; a reply a person asks for still
// goes to the Reply-To.
func TestAutoReplyGoesToTheEnvelopeSender(t *testing.T) {
	td := testdaemon.Start(t)
	td.Mailbox(t, "agent")
	var strangers []string
	for i := range 40 {
		strangers = append(strangers, fmt.Sprintf("stranger%d@victims.test", i))
	}
	const envelope = "bounces-42@lists.remote.test"
	m := deliverFrom(t, td, envelope, "many strangers",
		"Return-Path: <forged@evil.test>\r\nReply-To: "+strings.Join(strangers, ", ")+"\r\n")
	if m.ReturnPath != "<"+envelope+">" {
		t.Fatalf("return_path %q, want the envelope's <%s> (not the Return-Path header's)", m.ReturnPath, envelope)
	}
	send := func(a protocol.SendArgs) (protocol.SendResult, error) {
		a.FromMailbox, a.ReplyToID, a.Body, a.DryRun = "agent", m.ID, "I am away", true
		var res protocol.SendResult
		err := td.TryCall(protocol.VerbSend, a, &res)
		return res, err
	}
	res, err := send(protocol.SendArgs{AutoReply: true})
	if err != nil || !slices.Equal(res.Envelope.RcptTo, []string{envelope}) {
		t.Fatalf("auto-reply went to %v (%v), want %s only", res.Envelope.RcptTo, err, envelope)
	}
	res, err = send(protocol.SendArgs{})
	if err != nil || !slices.Equal(res.Envelope.RcptTo, strangers) {
		t.Fatalf("a reply (not automatic) went to %d addresses (%v), want the %d of the Reply-To", len(res.Envelope.RcptTo), err, len(strangers))
	}
	if _, err := send(protocol.SendArgs{AutoReply: true, ReplyAll: true}); protocol.CodeOf(err) != protocol.CodeInvalidInput {
		t.Errorf("auto_reply with reply_all: %v, want invalid_input", err)
	}

	// RFC 3834 section 2: no automatic reply to a bounce or to a message
	// that is itself automatic.
	for _, c := range []struct {
		name, from, headers, want string
	}{
		{"a null envelope sender", "", "", "null sender"},
		{"Auto-Submitted: auto-replied", "bob@remote.test", "Auto-Submitted: auto-replied\r\n", "itself automatic"},
	} {
		p := deliverFrom(t, td, c.from, c.name, c.headers)
		var res protocol.SendResult
		err := td.TryCall(protocol.VerbSend, protocol.SendArgs{FromMailbox: "agent", ReplyToID: p.ID, Body: "I am away", AutoReply: true, DryRun: true}, &res)
		if protocol.CodeOf(err) != protocol.CodeInvalidInput || !strings.Contains(err.Error(), c.want) {
			t.Errorf("auto-reply to %s: %v (to %v), want invalid_input saying %q", c.name, err, res.Envelope.RcptTo, c.want)
		}
	}
}
