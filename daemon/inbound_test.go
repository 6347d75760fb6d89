package daemon

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/smtp"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-msgauth/dkim"

	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/fakemx"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// startInbound runs a daemon with an SMTP listener on loopback and a test DNS.
func startInbound(t *testing.T, extra string) (*testDaemon, string, *resolver.Map) {
	t.Helper()
	dns := &resolver.Map{}
	td := startDaemonWith(t, extra, Options{Resolver: dns})
	addrs := td.SMTPAddrs()
	if len(addrs) == 0 {
		t.Fatal("no SMTP listener")
	}
	return td, addrs[0], dns
}

// startWithRemoteMX is startInbound with a fake MX for remote.test, as
// mx.remote.test on loopback, that delivery reaches.
func startWithRemoteMX(t *testing.T) (*testDaemon, *fakemx.Server) {
	t.Helper()
	mx := fakemx.New(t, "127.0.0.1", nil)
	_, port, _ := net.SplitHostPort(mx.Addr)
	td, _, dns := startInbound(t, "[delivery]\nport = "+port+"\n")
	dns.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	dns.SetIP("mx.remote.test", "127.0.0.1")
	return td, mx
}

// untrustedHooksForUsers is the config that lets a mailbox's owner create
// a hook that fires on untrusted mail: the tests that watch what reaches a
// mailbox through such a hook create it as whoever runs them (root in CI),
// and root needs no leave.
const untrustedHooksForUsers = "[hook_rules]\nallow_untrusted_for_users = true\n"

// hookOwner is the owner for a mailbox whose hooks a test runs, and a
// directory that owner can write to: the test's own user, or as root a
// throwaway one (hooks never run as root).
func hookOwner(t *testing.T, prefix string) (uid, gid uint32, dir string) {
	t.Helper()
	uid, gid, dir = uint32(os.Getuid()), uint32(os.Getgid()), t.TempDir()
	if uid == 0 {
		u := testusers.Create(t, prefix)
		uid, gid = u.UID, u.GID
		dir = testusers.SharedDir(t)
		os.Chmod(dir, 0o777)
	}
	return uid, gid, dir
}

func sendSMTP(t *testing.T, addr, from string, to []string, msg string) error {
	t.Helper()
	return smtp.SendMail(addr, nil, from, to, []byte(strings.ReplaceAll(msg, "\n", "\r\n")))
}

func TestInboundRoutingAndStorage(t *testing.T) {
	td, addr, _ := startInbound(t, fmt.Sprintf(`catch_all = "catchall"
[[mailboxes]]
name = "support"
owner = %[1]q
aliases = ["help", "contact@example.test"]
[[mailboxes]]
name = "catchall"
owner = %[1]q
`, myName(t)))
	td.ensureMine(t, "alice")
	td.ensureMine(t, "bob")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := protocol.Dial(ctx, td.socket)
	if err != nil {
		t.Fatal(err)
	}
	events, err := c.Watch(ctx, protocol.WatchArgs{Mailboxes: []string{"alice"}})
	if err != nil {
		t.Fatal(err)
	}

	msg := "From: Sender <sender@remote.test>\nTo: alice@example.test, Bob <bob@example.test>\nCc: help@example.test\n" +
		"Subject: =?UTF-8?Q?Gr=C3=BC=C3=9Fe?=\nMessage-ID: <one@remote.test>\nDate: Sun, 22 Nov 2026 00:00:00 +0000\n\nHello *there*.\n"
	if err := sendSMTP(t, addr, "sender@remote.test", []string{"Alice+news@EXAMPLE.test", "bob@example.test", "help@example.test", "alice@example.test"}, msg); err != nil {
		t.Fatalf("send: %v", err)
	}
	// One copy per mailbox, even though alice was addressed twice.
	for _, mb := range []string{"alice", "bob", "support"} {
		var l protocol.MessageList
		if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: mb}, &l); err != nil || len(l.Messages) != 1 {
			t.Fatalf("%s: %v %+v", mb, err, l.Messages)
		}
	}
	var l protocol.MessageList
	td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "alice"}, &l)
	var m protocol.Message
	if err := td.call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "alice", ID: l.Messages[0].ID}, &m); err != nil {
		t.Fatal(err)
	}
	if m.Subject != "Grüße" || len(m.To) != 2 || m.Cc[0] == "" || m.MessageID != "one@remote.test" || !strings.Contains(m.Body, "Hello") {
		t.Errorf("frontmatter: %+v", m)
	}
	if m.DeliveredTo != "Alice+news@EXAMPLE.test" && m.DeliveredTo != "alice@example.test" {
		t.Errorf("delivered_to %q", m.DeliveredTo)
	}
	if m.Trusted != "none" || m.SPF == nil || m.ReceivedFromIP != "127.0.0.1" || m.ThreadID == "" {
		t.Errorf("trust/ip/thread: trusted=%s spf=%+v ip=%s thread=%s", m.Trusted, m.SPF, m.ReceivedFromIP, m.ThreadID)
	}
	raw, err := os.ReadFile(m.RawPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(raw, []byte("Authentication-Results: mx.example.test;")) || !bytes.Contains(raw, []byte("Hello *there*.\r\n")) {
		t.Errorf("raw copy lacks our Authentication-Results header or the body:\n%.400s", raw)
	}
	select {
	case ev := <-events:
		if ev.Type != protocol.EventNewMail || ev.Mailbox != "alice" || ev.Message == nil || ev.Message.Subject != "Grüße" {
			t.Errorf("event %+v", ev)
		}
	case <-ctx.Done():
		t.Fatal("no new_mail event")
	}

	// The same delivery again (a client retrying all its recipients after a
	// lost reply, in another order) is stored once.
	sendSMTP(t, addr, "sender@remote.test", []string{"help@example.test", "alice@example.test", "bob@example.test", "Alice+news@EXAMPLE.test"}, msg)
	td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "alice"}, &l)
	if len(l.Messages) != 1 {
		t.Errorf("duplicate stored twice: %d messages", len(l.Messages))
	}
	// Unknown local parts reach the catch-all; other domains are refused.
	if err := sendSMTP(t, addr, "s@remote.test", []string{"nobody@example.test"}, "Subject: x\n\nbody\n"); err != nil {
		t.Errorf("catch-all: %v", err)
	}
	td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "catchall"}, &l)
	if len(l.Messages) != 1 {
		t.Errorf("catch-all got %d", len(l.Messages))
	}
	err = sendSMTP(t, addr, "s@remote.test", []string{"victim@elsewhere.test"}, "Subject: relay\n\nx\n")
	if err == nil || !strings.Contains(err.Error(), "550") {
		t.Errorf("relay attempt: %v, want 550", err)
	}
}

// A domain written absolute, with its final dot, is the same domain: an
// alias that names it reaches its mailbox as the plain form does, rather
// than the catch-all (which may be another owner's).
func TestAliasAtAbsoluteDomain(t *testing.T) {
	td, addr, _ := startInbound(t, fmt.Sprintf(`catch_all = "catchall"
[[mailboxes]]
name = "support"
owner = %[1]q
aliases = ["contact@example.test"]
[[mailboxes]]
name = "catchall"
owner = %[1]q
`, myName(t)))
	for _, rcpt := range []string{"contact@example.test.", "Contact@EXAMPLE.test."} {
		if err := sendSMTP(t, addr, "s@remote.test", []string{rcpt}, "Subject: to "+rcpt+"\n\nbody\n"); err != nil {
			t.Fatalf("send to %s: %v", rcpt, err)
		}
	}
	for _, c := range []struct {
		mailbox string
		want    int
	}{{"support", 2}, {"catchall", 0}} {
		var l protocol.MessageList
		if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: c.mailbox}, &l); err != nil || len(l.Messages) != c.want {
			t.Errorf("%s holds %d messages (%v), want %d", c.mailbox, len(l.Messages), err, c.want)
		}
	}
}

func TestInboundUnknownUserWithoutCatchAll(t *testing.T) {
	_, addr, _ := startInbound(t, "")
	err := sendSMTP(t, addr, "s@remote.test", []string{"nobody@example.test"}, "Subject: x\n\nbody\n")
	if err == nil || !strings.Contains(err.Error(), "550") || !strings.Contains(err.Error(), "5.1.1") {
		t.Fatalf("unknown user: %v, want 550 5.1.1", err)
	}
}

// TestInboundTrustAndHooks: an aligned DKIM signature from a trusted sender
// makes the message trusted and fires the owner's hook; the same From signed
// by an unrelated domain is stored untrusted and fires nothing.
func TestInboundTrustAndHooks(t *testing.T) {
	td, addr, dns := startInbound(t, `[trust]
trusted_senders = ["boss@trusted.test"]
`)
	uid, gid, outDir := hookOwner(t, "mcth")
	out := filepath.Join(outDir, "fired")
	td.EnsureMailbox("agent", uid, gid)
	var h protocol.Hook
	if err := td.call(t, protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "agent", Event: "on_receive",
		Cmd: []string{"/bin/sh", "-c", "cat >> " + out}}, &h); err != nil {
		t.Fatal(err)
	}
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	for _, d := range []string{"trusted.test", "evil.test"} {
		dns.SetTXT("sel._domainkey."+d, "v=DKIM1; k=ed25519; p="+base64.StdEncoding.EncodeToString(pub))
	}
	sign := func(domain, subject string) string {
		msg := "From: boss@trusted.test\r\nTo: agent@example.test\r\nSubject: " + subject + "\r\nMessage-ID: <" + subject + "@x>\r\n\r\nbody\r\n"
		var b bytes.Buffer
		if err := dkim.Sign(&b, strings.NewReader(msg), &dkim.SignOptions{Domain: domain, Selector: "sel", Signer: priv}); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	for _, tc := range []struct{ domain, subject, trusted string }{{"trusted.test", "aligned", "true"}, {"evil.test", "forged", "false"}} {
		if err := smtp.SendMail(addr, nil, "bounce@"+tc.domain, []string{"agent@example.test"}, []byte(sign(tc.domain, tc.subject))); err != nil {
			t.Fatal(err)
		}
		var l protocol.MessageList
		td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "agent", Subject: tc.subject}, &l)
		if len(l.Messages) != 1 || string(l.Messages[0].Trusted) != tc.trusted {
			t.Fatalf("%s: %+v, want trusted=%s", tc.subject, l.Messages, tc.trusted)
		}
	}
	td.runner.Wait()
	got, _ := os.ReadFile(out)
	if !strings.Contains(string(got), `subject = "aligned"`) || strings.Contains(string(got), "forged") {
		t.Fatalf("hook input: %q; want only the aligned message", got)
	}
}
