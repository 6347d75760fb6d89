package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	nsmtp "net/smtp"
	"net/textproto"
	"strings"
	"sync"
	"testing"

	"github.com/emersion/go-msgauth/dkim"
	"github.com/emersion/go-smtp"

	dkimkeys "github.com/mailctl/mailctl/daemon/outbound/dkim"
	"github.com/mailctl/mailctl/protocol"
)

// fakeMX is a receiving SMTP server on loopback that keeps what it gets.
type fakeMX struct {
	mu   sync.Mutex
	msgs []fakeMsg
	addr string
}

type fakeMsg struct {
	from  string
	rcpts []string
	data  []byte
}

type fakeSession struct {
	mx  *fakeMX
	cur fakeMsg
}

func (s *fakeSession) AuthPlain(string, string) error { return nil }
func (s *fakeSession) Mail(from string, _ *smtp.MailOptions) error {
	s.cur = fakeMsg{from: from}
	return nil
}
func (s *fakeSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	if strings.HasPrefix(to, "reject") {
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user here"}
	}
	s.cur.rcpts = append(s.cur.rcpts, to)
	return nil
}
func (s *fakeSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.cur.data = b
	s.mx.mu.Lock()
	s.mx.msgs = append(s.mx.msgs, s.cur)
	s.mx.mu.Unlock()
	return nil
}
func (s *fakeSession) Reset()        {}
func (s *fakeSession) Logout() error { return nil }

func startFakeMX(t *testing.T) *fakeMX {
	mx := &fakeMX{}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &fakeSession{mx: mx}, nil }))
	srv.Domain = "mx.remote.test"
	srv.AllowInsecureAuth = true
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mx.addr = ln.Addr().String()
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return mx
}

func TestSendRemoteAndLocal(t *testing.T) {
	mx := startFakeMX(t)
	_, port, _ := net.SplitHostPort(mx.addr)
	td2, _, dns := startInbound(t, "[delivery]\nport = "+port+"\n")
	dns.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	dns.SetIP("mx.remote.test", "127.0.0.1")
	if err := EnsureDevKeys(td2.cfg.Paths.DKIMDir); err != nil {
		t.Fatal(err)
	}
	if err := td2.out.loadKeys(); err != nil {
		t.Fatal(err)
	}
	td2.ensureMine(t, "alice")
	td2.ensureMine(t, "bob")

	var res protocol.SendResult
	err := td2.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "alice", To: []string{"friend@remote.test", "reject@remote.test"},
		Cc: []string{"bob@example.test"}, Bcc: []string{"hidden@remote.test"}, Subject: "Hello", Body: "Hi **there**"}, &res)
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]string{}
	for _, r := range res.Recipients {
		status[r.Address] = r.Status
	}
	want := map[string]string{"friend@remote.test": "delivered", "reject@remote.test": "failed", "bob@example.test": "delivered", "hidden@remote.test": "delivered"}
	for a, s := range want {
		if status[a] != s {
			t.Errorf("%s: %q, want %q (all: %+v)", a, status[a], s, res.Recipients)
		}
	}
	mx.mu.Lock()
	if len(mx.msgs) != 1 {
		t.Fatalf("fake MX got %d messages", len(mx.msgs))
	}
	got := mx.msgs[0]
	mx.mu.Unlock()
	if !strings.HasPrefix(got.from, "alice+bounce-") || !strings.HasSuffix(got.from, "@example.test") || bytes.Contains(got.data, []byte("hidden@remote.test")) {
		t.Errorf("envelope from %q; Bcc in the data: %v", got.from, bytes.Contains(got.data, []byte("hidden@")))
	}
	if n := bytes.Count(got.data, []byte("DKIM-Signature:")); n != 2 {
		t.Errorf("%d DKIM signatures, want Ed25519 and RSA", n)
	}
	// The signatures verify against the daemon's own keys.
	keys, _ := dkimkeys.LoadKeys(td2.cfg.Paths.DKIMDir)
	txt := map[string]string{}
	for _, k := range keys {
		txt[k.Selector+"._domainkey.example.test"] = k.TXTValue()
	}
	verifs, err := dkim.VerifyWithOptions(bytes.NewReader(got.data), &dkim.VerifyOptions{LookupTXT: func(d string) ([]string, error) { return []string{txt[d]}, nil }})
	if err != nil || len(verifs) != 2 {
		t.Fatalf("verify: %v %d", err, len(verifs))
	}
	for _, v := range verifs {
		if v.Err != nil {
			t.Errorf("signature %s: %v", v.Domain, v.Err)
		}
	}
	// The sent copy records per-recipient status; bob got a trusted-by-uid local copy.
	var sent protocol.Message
	if err := td2.call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "alice", Folder: "sent", ID: res.ID}, &sent); err != nil {
		t.Fatal(err)
	}
	if !sent.Outbound || sent.DeliveryStatus == "" || len(sent.Recipients) != 4 {
		t.Errorf("sent copy: outbound=%v status=%q recipients=%+v", sent.Outbound, sent.DeliveryStatus, sent.Recipients)
	}
	var l protocol.MessageList
	td2.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "bob"}, &l)
	if len(l.Messages) != 1 || l.Messages[0].Subject != "Hello" {
		t.Fatalf("bob's inbox: %+v", l.Messages)
	}
	var bm protocol.Message
	td2.call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "bob", ID: l.Messages[0].ID}, &bm)
	// Local delivery is recorded as what it is: submitted by alice over the
	// socket, with SPF as checked (no client address: none), not a pass.
	if bm.SubmittedBy != "alice" || (bm.SPF != nil && bm.SPF.Result == "pass") {
		t.Errorf("local delivery: submitted_by %q, spf %+v; want alice and no invented SPF pass", bm.SubmittedBy, bm.SPF)
	}
	var raw protocol.Message
	if err := td2.call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "bob", ID: l.Messages[0].ID, Raw: true, MaxChars: 100000}, &raw); err != nil {
		t.Fatal(err)
	}
	unfolded := strings.NewReplacer("\r\n\t", " ", "\n\t", " ").Replace(raw.Body)
	if !strings.Contains(unfolded, "auth=pass smtp.auth=alice") || strings.Contains(unfolded, "spf=pass") {
		t.Errorf("Authentication-Results of a local submission:\n%s", raw.Body[:min(len(raw.Body), 600)])
	}
	// A reply threads to the parent.
	var reply protocol.SendResult
	if err := td2.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "bob", To: []string{"alice@example.test"}, Body: "thanks", ReplyToID: l.Messages[0].ID}, &reply); err != nil {
		t.Fatal(err)
	}
	var ri protocol.Message
	td2.call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "bob", Folder: "sent", ID: reply.ID}, &ri)
	if ri.InReplyTo != res.MessageID || ri.Subject != "Re: Hello" || ri.ThreadID != bm.ThreadID {
		t.Errorf("reply: in_reply_to %q (want %q), subject %q, thread %q vs %q", ri.InReplyTo, res.MessageID, ri.Subject, ri.ThreadID, bm.ThreadID)
	}
}

func TestSendFromAnotherUsersMailboxIsRefused(t *testing.T) {
	td := startDaemon(t, "")
	td.ensureMine(t, "owned")
	// Root may act on any mailbox; an owner check happens per uid in the matrix test.
	// Here: a mailbox name that does not exist never becomes a From.
	err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "ghost", To: []string{"x@remote.test"}, Subject: "s", Body: "b"}, nil)
	if protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("send from a missing mailbox: %v", err)
	}
	err = td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "owned", To: []string{"x@remote.test"}, Subject: "bad\r\nBcc: evil@x", Body: "b"}, nil)
	if protocol.CodeOf(err) != protocol.CodeInvalidInput {
		t.Fatalf("header injection: %v", err)
	}
}

// TestBounceMarksSentRecipient: a delivery status notification marks the
// recipient of a sent message bounced only when it comes back to that
// message's return path. The same report forged to the mailbox's plain
// address, or to the return path of another message, is ordinary mail and
// changes nothing: anyone can send a DSN naming a Message-ID.
func TestBounceMarksSentRecipient(t *testing.T) {
	mx := startFakeMX(t)
	_, port, _ := net.SplitHostPort(mx.addr)
	td, addr, dns := startInbound(t, "[delivery]\nport = "+port+"\n")
	dns.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	dns.SetIP("mx.remote.test", "127.0.0.1")
	td.ensureMine(t, "alice")
	send := func(subject string) (protocol.SendResult, string) {
		t.Helper()
		var res protocol.SendResult
		if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "alice", To: []string{"gone@remote.test"}, Subject: subject, Body: "b"}, &res); err != nil {
			t.Fatal(err)
		}
		if res.Recipients[0].Status != "delivered" {
			t.Fatalf("first hop: %+v", res.Recipients)
		}
		mx.mu.Lock()
		defer mx.mu.Unlock()
		return res, mx.msgs[len(mx.msgs)-1].from
	}
	res, returnPath := send("hi")
	_, otherReturnPath := send("another")
	dsn := "From: MAILER-DAEMON@remote.test\r\nTo: alice@example.test\r\nSubject: Undelivered Mail Returned to Sender\r\n" +
		"Message-ID: <bounce1@remote.test>\r\nMIME-Version: 1.0\r\n" +
		"Content-Type: multipart/report; report-type=delivery-status; boundary=\"b1\"\r\n\r\n" +
		"--b1\r\nContent-Type: text/plain\r\n\r\nYour message could not be delivered.\r\n" +
		"--b1\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; mx.remote.test\r\n\r\n" +
		"Final-Recipient: rfc822; gone@remote.test\r\nAction: failed\r\nStatus: 5.1.1\r\nDiagnostic-Code: smtp; 550 5.1.1 user unknown\r\n" +
		"--b1\r\nContent-Type: text/rfc822-headers\r\n\r\nMessage-ID: <" + res.MessageID + ">\r\nSubject: hi\r\n" +
		"--b1--\r\n"
	status := func() protocol.RecipientStatus {
		t.Helper()
		var sent protocol.Message
		if err := td.call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "alice", Folder: "sent", ID: res.ID}, &sent); err != nil {
			t.Fatal(err)
		}
		return sent.Recipients[0]
	}
	forged := []string{"alice@example.test", "alice+bounce-aaaaaaaaaaaaaaaa@example.test", otherReturnPath}
	for _, to := range forged {
		if err := nsmtp.SendMail(addr, nil, "", []string{to}, []byte(dsn)); err != nil {
			t.Fatalf("forged DSN to %s: %v", to, err)
		}
		if st := status(); st.Status != "delivered" {
			t.Fatalf("a DSN sent to %s changed the sent copy: %+v", to, st)
		}
	}
	var inbox protocol.MessageList
	td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "alice", Subject: "Undelivered"}, &inbox)
	if len(inbox.Messages) != len(forged) {
		t.Errorf("the forged DSNs are not kept as ordinary mail: %d in the inbox", len(inbox.Messages))
	}
	if err := nsmtp.SendMail(addr, nil, "", []string{returnPath}, []byte(dsn)); err != nil {
		t.Fatal(err)
	}
	if st := status(); st.Status != "bounced" || !strings.Contains(st.Detail, "5.1.1") {
		t.Fatalf("sent copy after the bounce to its return path: %+v", st)
	}
}

// TestReturnPathOfADeletedMailboxIsRefused: what comes back to a message's
// return path (a bounce, an auto-reply, quoting the message) after its
// mailbox was deleted and the name made again, by anyone, is refused at
// RCPT: the new mailbox never sees the first one's messages. The new
// mailbox's own return paths, and those of a mailbox the config declares,
// work as ever.
func TestReturnPathOfADeletedMailboxIsRefused(t *testing.T) {
	mx := startFakeMX(t)
	_, port, _ := net.SplitHostPort(mx.addr)
	td, addr, dns := startInbound(t, fmt.Sprintf("[delivery]\nport = %s\n[[mailboxes]]\nname = \"support\"\nowner = %q\naliases = [\"help\"]\n", port, myName(t)))
	dns.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	dns.SetIP("mx.remote.test", "127.0.0.1")
	send := func(from string) (protocol.SendResult, string) {
		t.Helper()
		var res protocol.SendResult
		if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: from, To: []string{"gone@remote.test"}, Subject: "hi from " + from, Body: "the first owner's words"}, &res); err != nil {
			t.Fatal(err)
		}
		mx.mu.Lock()
		defer mx.mu.Unlock()
		return res, mx.msgs[len(mx.msgs)-1].from
	}
	dsn := func(about string) []byte {
		return []byte("From: MAILER-DAEMON@remote.test\r\nSubject: Undelivered Mail Returned to Sender\r\n" +
			"Message-ID: <" + about + "-dsn@remote.test>\r\nMIME-Version: 1.0\r\n" +
			"Content-Type: multipart/report; report-type=delivery-status; boundary=\"b1\"\r\n\r\n" +
			"--b1\r\nContent-Type: text/plain\r\n\r\nthe first owner's words\r\n" +
			"--b1\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; mx.remote.test\r\n\r\n" +
			"Final-Recipient: rfc822; gone@remote.test\r\nAction: failed\r\nStatus: 5.1.1\r\n" +
			"--b1\r\nContent-Type: text/rfc822-headers\r\n\r\nMessage-ID: <" + about + ">\r\n" +
			"--b1--\r\n")
	}
	bounced := func(mailbox string, res protocol.SendResult) bool {
		t.Helper()
		var sent protocol.Message
		if err := td.call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: mailbox, Folder: "sent", ID: res.ID}, &sent); err != nil {
			t.Fatal(err)
		}
		return sent.Recipients[0].Status == "bounced"
	}

	td.ensureMine(t, "alice")
	first, firstPath := send("alice")
	res, supportPath := send("support")
	if err := nsmtp.SendMail(addr, nil, "", []string{supportPath}, dsn(res.MessageID)); err != nil || !bounced("support", res) {
		t.Fatalf("a bounce to the declared mailbox's return path %s: %v, not applied", supportPath, err)
	}
	if err := td.call(t, protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "alice", Force: true}, nil); err != nil {
		t.Fatal(err)
	}
	td.ensureMine(t, "alice")
	err := nsmtp.SendMail(addr, nil, "", []string{firstPath}, dsn(first.MessageID))
	var se *textproto.Error
	if !errors.As(err, &se) || se.Code != 550 {
		t.Fatalf("a bounce to the deleted mailbox's return path %s: %v, want 550 at RCPT", firstPath, err)
	}
	var inbox protocol.MessageList
	if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "alice"}, &inbox); err != nil || len(inbox.Messages) != 0 {
		t.Fatalf("the new alice's inbox: %+v, %v; want it empty", inbox.Messages, err)
	}
	again, againPath := send("alice")
	if err := nsmtp.SendMail(addr, nil, "", []string{againPath}, dsn(again.MessageID)); err != nil || !bounced("alice", again) {
		t.Fatalf("a bounce to the new mailbox's own return path %s: %v, not applied", againPath, err)
	}
	// Plain tags, and the mailbox's address, are the new owner's as before.
	if err := nsmtp.SendMail(addr, nil, "sender@remote.test", []string{"alice+news@example.test", "alice@example.test"}, []byte("Subject: plain\r\n\r\nx\r\n")); err != nil {
		t.Fatal(err)
	}
}

// TestDryRunReportsTheReturnPath: a dry run, of a send or of a draft,
// reports the envelope sender the send goes out with: the mailbox's return
// path, whose tag is made from the sent id, which a message gets only when
// it is stored; the dry run writes the tag as <tag>. The send then goes
// from that return path with its tag.
func TestDryRunReportsTheReturnPath(t *testing.T) {
	td, mx := startSender(t, Options{})
	const pending = "alice+bounce-<tag>@example.test"
	args := protocol.SendArgs{FromMailbox: "alice", To: []string{"friend@remote.test"}, Subject: "s", Body: "b", DryRun: true}
	var dry protocol.SendResult
	if err := td.call(t, protocol.VerbSend, args, &dry); err != nil || dry.Status != "dry_run" {
		t.Fatalf("dry run: %+v %v", dry, err)
	}
	if dry.Envelope.MailFrom != pending {
		t.Errorf("dry run's MAIL FROM %q, want %q", dry.Envelope.MailFrom, pending)
	}
	var dr protocol.Draft
	if err := td.call(t, protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "alice", To: []string{"friend@remote.test"}, Subject: "d", Body: "b"}, &dr); err != nil {
		t.Fatal(err)
	}
	if err := td.call(t, protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "alice", ID: dr.ID, DryRun: true}, &dry); err != nil {
		t.Fatal(err)
	}
	if dry.Envelope.MailFrom != pending {
		t.Errorf("draft dry run's MAIL FROM %q, want %q", dry.Envelope.MailFrom, pending)
	}

	args.DryRun = false
	var res protocol.SendResult
	if err := td.call(t, protocol.VerbSend, args, &res); err != nil || res.Status != "delivered" {
		t.Fatalf("send: %+v %v", res, err)
	}
	mx.mu.Lock()
	defer mx.mu.Unlock()
	if len(mx.msgs) != 1 || mx.msgs[0].from != res.Envelope.MailFrom {
		t.Fatalf("the MX got %d messages; want one from the answer's %q", len(mx.msgs), res.Envelope.MailFrom)
	}
	tag, ok := strings.CutPrefix(res.Envelope.MailFrom, "alice+")
	tag, _, _ = strings.Cut(tag, "@")
	box, _ := td.reg.Mailbox("alice")
	if !ok || !strings.HasSuffix(res.Envelope.MailFrom, "@example.test") || !td.out.bounceKey.Valid(tag, box.ID, res.ID) {
		t.Errorf("the send's MAIL FROM %q is not alice's return path for %s", res.Envelope.MailFrom, res.ID)
	}
}
