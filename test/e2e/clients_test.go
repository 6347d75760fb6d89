package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testpostfix"
)

// swaksData recovers the DATA swaks sent from its transcript: the client
// lines (" -> " in clear, " ~> " under TLS) between the 354 reply and the
// lone dot, dot-unstuffed, with CRLF line ends.
func swaksData(t *testing.T, transcript string) []byte {
	t.Helper()
	var out bytes.Buffer
	in := false
	for _, line := range strings.Split(transcript, "\n") {
		line = strings.TrimSuffix(line, "\r")
		if !in {
			if strings.HasPrefix(line, "<~  354") || strings.HasPrefix(line, "<-  354") {
				in = true
			}
			continue
		}
		text, ok := strings.CutPrefix(line, " ~> ")
		if !ok {
			text, ok = strings.CutPrefix(line, " -> ")
		}
		if !ok {
			continue
		}
		if text == "." {
			return out.Bytes()
		}
		text = strings.TrimPrefix(text, ".")
		out.WriteString(text + "\r\n")
	}
	t.Fatalf("no DATA in the swaks transcript:\n%s", transcript)
	return nil
}

// TestSwaksSTARTTLSAttachment sends with swaks over STARTTLS with a binary
// attachment and checks the stored message, the attachment file and the raw
// copy.
func TestSwaksSTARTTLSAttachment(t *testing.T) {
	swaks := needTool(t, "swaks", "swaks libnet-ssleay-perl")
	if out, _ := exec.Command(swaks, "--support").CombinedOutput(); !strings.Contains(string(out), "=== TLS supported") {
		t.Skip("swaks cannot do TLS here (apt install libnet-ssleay-perl)")
	}
	d := startDaemon(t, options{})
	att := []byte("%PDF-1.4\x00\x01\x02binary\xff\xfe data\r\nsecond line\nthird\r\n")
	attPath := filepath.Join(t.TempDir(), "report.pdf")
	if err := os.WriteFile(attPath, att, 0o644); err != nil {
		t.Fatal(err)
	}
	out := runTool(t, nil, swaks, "--server", d.SMTPAddr, "--tls", "--ehlo", "client.sender.test",
		"--from", "alice@sender.test", "--to", rcpt,
		"--header", "From: Alice <alice@sender.test>",
		"--header", "Subject: quarterly report",
		"--header", "Message-Id: <swaks-1@sender.test>",
		"--body", "Please find the report attached.\n.leading dot line",
		"--attach-type", "application/pdf", "--attach-name", "report.pdf", "--attach", "@"+attPath)
	if !strings.Contains(out, "=== TLS started") || !strings.Contains(out, "<~  250 2.0.0 OK") {
		t.Fatalf("swaks did not finish a STARTTLS transaction:\n%s", out)
	}
	sent := swaksData(t, out)

	m := d.byMessageID(t, "swaks-1@sender.test", 10*time.Second)
	checkCommon(t, m, "Alice <alice@sender.test>", "quarterly report", "swaks-1@sender.test")
	d.checkOwned(t, m)
	fields := checkRaw(t, m.Raw, sent, 0)
	if !strings.Contains(fields[1], "with ESMTPS") || !strings.Contains(fields[1], "TLS1.") {
		t.Errorf("our Received header does not record TLS: %q", fields[1])
	}
	d.checkAttachment(t, m, "report.pdf", "application/pdf", att)
	if !strings.Contains(m.Body, "Please find the report attached.") || !strings.Contains(m.Body, ".leading dot line") {
		t.Errorf("body lacks the text part:\n%s", m.Body)
	}
	if m.Meta.ReceivedFromIP != "127.0.0.1" {
		t.Errorf("received_from_ip = %q", m.Meta.ReceivedFromIP)
	}
	t.Logf("swaks --tls --attach: stored once, frontmatter, %d-byte attachment on disk and raw copy byte-for-byte (+AR, +Received with TLS) verified", len(att))
}

// TestPythonSMTPUTF8 sends with Python's smtplib using SMTPUTF8: a UTF-8
// envelope sender, display name and subject, unencoded in the header.
func TestPythonSMTPUTF8(t *testing.T) {
	py := needTool(t, "/usr/bin/python3", "python3")
	d := startDaemon(t, options{})
	// Mailbox names are ASCII ([a-z0-9._-]), so the UTF-8 local part is the
	// sender's; the recipient stays agent@.
	from := "José Müller <josé@sender.test>"
	subject := "Grüße aus Zürich — 東京 ✓"
	msg := crlf("From: " + from + "\nTo: " + rcpt + "\nSubject: " + subject +
		"\nDate: Sun, 22 Nov 2026 01:00:00 +0000\nMessage-ID: <py-utf8-1@sender.test>\nMIME-Version: 1.0\n" +
		"Content-Type: text/plain; charset=utf-8\nContent-Transfer-Encoding: 8bit\n\nHallo, schöne Grüße.\n.\n..two dots\n")
	script := `
import smtplib, sys
host, port, rcpt = sys.argv[1], int(sys.argv[2]), sys.argv[3]
raw = sys.stdin.buffer.read()
with smtplib.SMTP(host, port, timeout=20) as s:
    s.ehlo("client.sender.test")
    if not s.has_extn("smtputf8"):
        sys.exit("server does not offer SMTPUTF8")
    s.starttls()
    s.ehlo("client.sender.test")
    refused = s.sendmail("josé@sender.test", [rcpt], raw, mail_options=["SMTPUTF8"])
    if refused:
        sys.exit("refused: %r" % refused)
print("sent")
`
	host, port, _ := strings.Cut(d.SMTPAddr, ":")
	out := runTool(t, msg, py, "-c", script, host, port, rcpt)
	if !strings.Contains(out, "sent") {
		t.Fatalf("python: %s", out)
	}
	m := d.byMessageID(t, "py-utf8-1@sender.test", 10*time.Second)
	checkCommon(t, m, from, subject, "py-utf8-1@sender.test")
	d.checkOwned(t, m)
	fields := checkRaw(t, m.Raw, msg, 0)
	if !strings.Contains(fields[1], "with UTF8SMTPS") {
		t.Errorf("our Received header does not say UTF8SMTPS: %q", fields[1])
	}
	if !strings.Contains(m.Body, "Hallo, schöne Grüße.") || !strings.Contains(m.Body, "\n.\n") || !strings.Contains(m.Body, "..two dots") {
		t.Errorf("body not decoded as sent:\n%q", m.Body)
	}
	if len(m.Meta.Attachments) != 0 {
		t.Errorf("unexpected attachments %+v", m.Meta.Attachments)
	}
	t.Logf("python smtplib SMTPUTF8+STARTTLS: UTF-8 sender, display name and raw UTF-8 subject stored; raw copy byte-for-byte")
}

// TestMsmtp sends with msmtp over STARTTLS from a message with LF line ends;
// msmtp sends CRLF, which is what must be stored.
func TestMsmtp(t *testing.T) {
	msmtp := needTool(t, "msmtp", "msmtp")
	d := startDaemon(t, options{})
	host, port, _ := strings.Cut(d.SMTPAddr, ":")
	msg := "From: Bob <bob@sender.test>\nTo: Agent <" + rcpt + ">, other@elsewhere.test\nCc: carol@sender.test\n" +
		"Reply-To: replies@sender.test\nSubject: via msmtp\nDate: Sun, 22 Nov 2026 01:02:03 +0000\n" +
		"Message-ID: <msmtp-1@sender.test>\nIn-Reply-To: <root-1@e2e.test>\nReferences: <root-1@e2e.test>\n\nbody line\n"
	cfg := filepath.Join(t.TempDir(), "msmtprc")
	os.WriteFile(cfg, []byte("defaults\naccount default\nhost "+host+"\nport "+port+
		"\nfrom bob@sender.test\ntls on\ntls_starttls on\ntls_certcheck off\ndomain client.sender.test\n"), 0o600)
	runTool(t, []byte(msg), msmtp, "-C", cfg, rcpt)

	m := d.byMessageID(t, "msmtp-1@sender.test", 10*time.Second)
	checkCommon(t, m, "Bob <bob@sender.test>", "via msmtp", "msmtp-1@sender.test")
	d.checkOwned(t, m)
	checkRaw(t, m.Raw, crlf(msg), 0)
	fm := m.Meta
	if len(fm.To) != 2 || !contains(fm.To, "other@elsewhere.test") {
		t.Errorf("to = %q, want both To addresses", fm.To)
	}
	if !contains(fm.Cc, "carol@sender.test") || !contains(fm.ReplyTo, "replies@sender.test") {
		t.Errorf("cc = %q, reply_to = %q", fm.Cc, fm.ReplyTo)
	}
	if fm.InReplyTo != "root-1@e2e.test" && fm.InReplyTo != "<root-1@e2e.test>" {
		t.Errorf("in_reply_to = %q", fm.InReplyTo)
	}
	if len(fm.References) != 1 || !strings.Contains(fm.References[0], "root-1@e2e.test") {
		t.Errorf("references = %q", fm.References)
	}
	// The documented thread id: the first 16 hex digits of SHA-256 of the
	// root Message-ID (the first References entry).
	if want := threadID(fm.References[0]); fm.ThreadID != want {
		t.Errorf("thread_id = %q, want %q from the References root %q", fm.ThreadID, want, fm.References[0])
	}
	if want := time.Date(2026, 11, 22, 1, 2, 3, 0, time.UTC); !fm.Date.Equal(want) {
		t.Errorf("date = %v, want %v", fm.Date, want)
	}
	t.Logf("msmtp STARTTLS: LF input stored as the CRLF msmtp sent; to/cc/reply_to/in_reply_to/references/thread_id/date verified")
}

// postfixMasterCF is the smallest master.cf a private Postfix instance needs
// to take mail from sendmail and relay it over SMTP, with nothing listening
// on a network port and nothing chrooted.
var postfixMasterCF = testpostfix.MasterCF()

// privatePostfix configures and starts a Postfix instance of its own (own
// config dir, queue and data directories) with extra main.cf lines, and
// stops it when the test ends. It returns the config dir.
func privatePostfix(t *testing.T, extra ...string) (etc string, maillog func() string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a private Postfix instance needs root (CI runs this as root)")
	}
	postfix := needTool(t, "/usr/sbin/postfix", "postfix")
	pfUser, err := user.Lookup("postfix")
	if err != nil {
		t.Skipf("no postfix user (apt install postfix): %v", err)
	}
	uid, _ := strconv.Atoi(pfUser.Uid)
	dir, err := os.MkdirTemp("", "mailctl-e2e-postfix-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	etc = filepath.Join(dir, "etc")
	for _, sub := range []string{etc, filepath.Join(dir, "spool"), filepath.Join(dir, "data")} {
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chown(filepath.Join(dir, "data"), uid, -1)
	logPath := filepath.Join(dir, "maillog")
	mainCF := append([]string{
		"compatibility_level = 3.6",
		"queue_directory = " + filepath.Join(dir, "spool"),
		"data_directory = " + filepath.Join(dir, "data"),
		"maillog_file = " + logPath,
		"maillog_file_prefixes = " + dir,
		"mail_owner = postfix",
		"setgid_group = postdrop",
		"myhostname = postfix.sender.test",
		"myorigin = sender.test",
		"mydestination =",
		"inet_interfaces = loopback-only",
		"inet_protocols = ipv4",
		"notify_classes =",
	}, extra...)
	os.WriteFile(filepath.Join(etc, "main.cf"), []byte(strings.Join(mainCF, "\n")+"\n"), 0o644)
	os.WriteFile(filepath.Join(etc, "master.cf"), []byte(postfixMasterCF), 0o644)
	maillog = func() string { b, _ := os.ReadFile(logPath); return string(b) }
	pf := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, postfix, append([]string{"-c", etc}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("postfix %v: %v\n%s\nmaillog:\n%s", args, err, out, maillog())
		}
	}
	pf("check")
	pf("start")
	t.Cleanup(func() {
		exec.Command(postfix, "-c", etc, "stop").Run()
		// postfix stop returns before master exits.
		time.Sleep(300 * time.Millisecond)
	})
	return etc, maillog
}

// TestPostfixSendmailRelay submits with Postfix's sendmail to a private
// Postfix instance whose relayhost is mailctl, and checks the relayed copy:
// Postfix's Received header sits under ours and the message is otherwise
// unchanged.
func TestPostfixSendmailRelay(t *testing.T) {
	sendmail := needTool(t, "/usr/sbin/sendmail", "postfix")
	d := startDaemon(t, options{})
	// Postfix's smtp client takes STARTTLS when the server offers it.
	etc, maillog := privatePostfix(t, "relayhost = ["+strings.Replace(d.SMTPAddr, ":", "]:", 1), "smtp_tls_security_level = may")
	msg := "From: Dora <dora@sender.test>\nTo: " + rcpt + "\nSubject: relayed by postfix\n" +
		"Date: Sun, 22 Nov 2026 01:04:05 +0000\nMessage-ID: <pf-relay-1@sender.test>\n\nthrough a real MTA\n.\nend\n"
	runTool(t, []byte(msg), sendmail, "-C", etc, "-i", "-f", "dora@sender.test", rcpt)

	deadline := time.Now().Add(30 * time.Second)
	var m stored
	for found := false; !found; {
		for _, s := range d.inbox(t) {
			if s.Meta.MessageID == "pf-relay-1@sender.test" {
				m, found = s, true
			}
		}
		if !found && time.Now().After(deadline) {
			t.Fatalf("Postfix did not relay the message; maillog:\n%s\nmailctl log:\n%s", maillog(), d.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	checkCommon(t, m, "Dora <dora@sender.test>", "relayed by postfix", "pf-relay-1@sender.test")
	fields := checkRaw(t, m.Raw, crlf(msg), 1)
	if !strings.Contains(fields[1], "from postfix.sender.test") || !strings.Contains(fields[1], "with ESMTPS") {
		t.Errorf("our Received does not name Postfix's HELO and STARTTLS: %q\nmaillog:\n%s", fields[1], maillog())
	}
	if !strings.Contains(fields[2], "by postfix.sender.test (Postfix") {
		t.Errorf("Postfix's Received header missing: %q", fields[2])
	}
	if !strings.Contains(maillog(), "status=sent (250 ") {
		t.Errorf("Postfix did not log a 250 from mailctl:\n%s", maillog())
	}
	t.Logf("postfix sendmail → private Postfix (relayhost, STARTTLS) → mailctl: relayed copy stored, raw = AR + Received(mailctl) + Received(Postfix) + message")
}

// TestPostfixLMTP submits with Postfix's sendmail to a private Postfix that
// delivers the domain over LMTP to mailctl's socket (docs/postfix-front.md).
func TestPostfixLMTP(t *testing.T) {
	sendmail := needTool(t, "/usr/sbin/sendmail", "postfix")
	d := startDaemon(t, options{LMTP: true})
	etc, maillog := privatePostfix(t, "virtual_mailbox_domains = "+domain, "virtual_mailbox_maps =",
		"virtual_transport = lmtp:unix:"+d.LMTPSock)
	msg := "From: Eve <eve@sender.test>\nTo: " + rcpt + ", nobody@" + domain + "\nSubject: over lmtp\n" +
		"Date: Sun, 22 Nov 2026 01:06:07 +0000\nMessage-ID: <pf-lmtp-1@sender.test>\n\nvia LMTP\n"
	runTool(t, []byte(msg), sendmail, "-C", etc, "-i", "-f", "eve@sender.test", rcpt, "nobody@"+domain)

	m := d.byMessageID(t, "pf-lmtp-1@sender.test", 30*time.Second)
	checkCommon(t, m, "Eve <eve@sender.test>", "over lmtp", "pf-lmtp-1@sender.test")
	fields := checkRaw(t, m.Raw, crlf(msg), 1)
	if !strings.Contains(fields[1], "with LMTP") {
		t.Errorf("our Received does not say LMTP: %q", fields[1])
	}
	// LMTP answers per recipient: the unknown one is refused alone.
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(maillog(), "to=<nobody@"+domain+">") || !strings.Contains(maillog(), "5.1.1") {
		if time.Now().After(deadline) {
			t.Fatalf("Postfix did not log the refused recipient:\n%s", maillog())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := len(d.inbox(t)); n != 1 {
		t.Errorf("inbox holds %d messages, want 1", n)
	}
	t.Logf("postfix sendmail → private Postfix → lmtp:unix socket → mailctl: stored once, unknown recipient refused with 5.1.1 per recipient")
}

func threadID(root string) string {
	sum := sha256.Sum256([]byte(root))
	return hex.EncodeToString(sum[:])[:16]
}
