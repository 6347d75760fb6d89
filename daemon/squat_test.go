package daemon

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"net/smtp"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/emersion/go-msgauth/dkim"

	"github.com/mailctl/mailctl/protocol"
)

// TestMessageIDSquatting is the squatting attack over SMTP: an unsigned
// message from x@evil.test, then a mailing-list copy, then the DKIM-aligned
// message from a trusted sender, all with the same Message-ID, all answered
// 250. Every one must be stored and the trusted one's hook must fire; only an
// exact repeat of a delivery (a client retrying) is stored once.
func TestMessageIDSquatting(t *testing.T) {
	td, addr, dns := startInbound(t, `[trust]
trusted_senders = ["boss@trusted.test"]
`)
	uid, gid, outDir := hookOwner(t, "mcsq")
	out := filepath.Join(outDir, "fired")
	td.EnsureMailbox("agent", uid, gid)
	if err := td.call(t, protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "agent", Event: "on_receive",
		Cmd: []string{"/bin/sh", "-c", "cat >> " + out}}, nil); err != nil {
		t.Fatal(err)
	}
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	dns.SetTXT("sel._domainkey.trusted.test", "v=DKIM1; k=ed25519; p="+base64.StdEncoding.EncodeToString(pub))
	const mid = "Message-ID: <target@trusted.test>\r\n"
	squat := "From: x@evil.test\r\nTo: agent@example.test\r\nSubject: squat\r\n" + mid + "\r\npay me\r\n"
	list := "From: boss@trusted.test\r\nTo: list@lists.test\r\nList-Id: <l.lists.test>\r\nSubject: listcopy\r\n" + mid + "\r\nbody\r\n"
	var signed bytes.Buffer
	if err := dkim.Sign(&signed, strings.NewReader("From: boss@trusted.test\r\nTo: agent@example.test\r\nSubject: real\r\n"+mid+"\r\nbody\r\n"),
		&dkim.SignOptions{Domain: "trusted.test", Selector: "sel", Signer: priv}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct{ from, data string }{
		{"x@evil.test", squat},
		{"owner-l@lists.test", list},
		{"bounce@trusted.test", signed.String()},
		{"bounce@trusted.test", signed.String()}, // the sender retrying: the same delivery
	} {
		if err := smtp.SendMail(addr, nil, m.from, []string{"agent@example.test"}, []byte(m.data)); err != nil {
			t.Fatalf("sending %.40q: %v", m.data, err)
		}
	}
	var l protocol.MessageList
	if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "agent"}, &l); err != nil {
		t.Fatal(err)
	}
	trust := map[string]string{}
	for _, m := range l.Messages {
		trust[m.Subject] = string(m.Trusted)
	}
	if len(l.Messages) != 3 || trust["squat"] != "false" || trust["listcopy"] == "" || trust["real"] != "true" {
		t.Fatalf("inbox holds %d messages %v; want squat (untrusted), listcopy and real (trusted), each once", len(l.Messages), trust)
	}
	td.runner.Wait()
	got, _ := os.ReadFile(out)
	if strings.Count(string(got), `subject = "real"`) != 1 {
		t.Fatalf("hook input %q: want the trusted message exactly once", got)
	}
}

// TestSameBytesWithoutMessageIDAreBothKept: a script that mails the same
// alert twice, with no Message-ID (and no Date) for the two to differ by,
// gets both stored: without a Message-ID a second delivery of the same
// bytes cannot be told from a retry, and a duplicate is the lesser harm. With
// a Message-ID, the same bytes again are the sender's retry, stored once.
func TestSameBytesWithoutMessageIDAreBothKept(t *testing.T) {
	td, addr, _ := startInbound(t, "")
	td.ensureMine(t, "agent")
	alert := "From: cron@host.test\r\nTo: agent@example.test\r\nSubject: disk full\r\n\r\n/var is 100% full\r\n"
	retried := "From: cron@host.test\r\nTo: agent@example.test\r\nSubject: retried\r\nMessage-ID: <once@host.test>\r\n\r\nonce\r\n"
	for _, data := range []string{alert, alert, retried, retried} {
		if err := smtp.SendMail(addr, nil, "cron@host.test", []string{"agent@example.test"}, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	var l protocol.MessageList
	if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "agent"}, &l); err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, m := range l.Messages {
		n[m.Subject]++
	}
	if n["disk full"] != 2 || n["retried"] != 1 {
		t.Fatalf("stored %v: want the alert twice and the retried message once", n)
	}
}
