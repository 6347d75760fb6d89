// Package testdaemon runs the real mailctl daemon in-process, unprivileged,
// with all its state in a temporary folder (as `mailctl dev` does), for the
// tests of its clients: the MCP shim and the end-to-end clients test against
// the protocol the daemon really speaks, so a change that breaks a client
// fails that client's tests.
//
// Mail reaches it the way mail does: over SMTP to its loopback listener. A
// message can be DKIM-signed for its From domain with a key the daemon's
// (fake) DNS publishes, so that the daemon's own trust rule decides.
package testdaemon

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"net/smtp"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/emersion/go-msgauth/dkim"

	"github.com/mailctl/mailctl/daemon"
	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// Domain is the daemon's mail domain.
const Domain = "example.test"

// TrustedDomain is the domain whose authenticated senders every mailbox
// trusts (the global trusted_senders, with Domain itself). OpenMailbox,
// declared with Options.Open, has no trust policy: its mail is "none".
const (
	TrustedDomain = "trusted.test"
	OpenMailbox   = "open"
)

// Daemon is a running daemon.
type Daemon struct {
	*daemon.Daemon
	Dir      string // the state folder
	Socket   string
	SMTPAddr string
	DNS      *resolver.Map

	key    ed25519.PrivateKey
	pub    ed25519.PublicKey
	cancel context.CancelFunc
	done   chan error
	clock  func() time.Time
	tb     testing.TB    // the test it runs for, failed when it does not stop
	within time.Duration // how long Stop waits for it; 0 is testwait.StopTimeout
}

// Options adjust the config.
type Options struct {
	// Extra is appended to the config's top level (before its tables).
	Extra string
	// Open declares OpenMailbox, owned by the user running the test.
	Open bool
	// Clock, when set, is the daemon's clock (daemon.Options.Clock).
	Clock func() time.Time
}

// Start runs a daemon until the test ends.
func Start(tb testing.TB, opts ...Options) *Daemon {
	tb.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	// Unix socket paths are limited to 108 bytes; t.TempDir can be longer.
	dir, err := os.MkdirTemp("", "mcd")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	if err := daemon.EnsureDevKeys(filepath.Join(dir, "dkim")); err != nil {
		tb.Fatal(err)
	}
	if o.Open {
		o.Extra += fmt.Sprintf("\n[[mailboxes]]\nname = %q\nowner = %q\ntrusted_senders = []\n", OpenMailbox, fmt.Sprint(os.Getuid()))
	}
	text := fmt.Sprintf(`hostname = "mx.%[1]s"
domains = [%[1]q]
%[2]s
[paths]
state_dir = %[3]q
socket = %[4]q
dkim_dir = %[5]q

[smtp]
listen = ["127.0.0.1:0"]

[trust]
trusted_senders = ["*@%[6]s", "*@%[1]s"]
`, Domain, o.Extra, filepath.Join(dir, "state"), filepath.Join(dir, "mailctl.sock"), filepath.Join(dir, "dkim"), TrustedDomain)
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(text), 0o600); err != nil {
		tb.Fatal(err)
	}
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	td := &Daemon{Dir: dir, DNS: &resolver.Map{}, key: key, pub: pub, clock: o.Clock}
	td.run(tb)
	tb.Cleanup(td.Stop)
	return td
}

// Restart stops the daemon and starts it again on the same state.
func (td *Daemon) Restart(tb testing.TB) {
	tb.Helper()
	td.Stop()
	td.run(tb)
}

func (td *Daemon) run(tb testing.TB) {
	tb.Helper()
	cfg, err := config.Load(filepath.Join(td.Dir, "config.toml"))
	if err != nil {
		tb.Fatal(err)
	}
	td.Socket = cfg.Paths.Socket
	td.tb = tb
	td.done = make(chan error, 1)
	ready := make(chan struct{})
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() && os.Getenv("MAILCTL_TEST_DAEMON_LOG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	d, err := daemon.New(cfg, daemon.Options{Version: "test", Logger: logger, Resolver: td.DNS, Clock: td.clock, Ready: func() { close(ready) }})
	if err != nil {
		tb.Fatal(err)
	}
	td.Daemon = d
	ctx, cancel := context.WithCancel(context.Background())
	td.cancel = cancel
	go func() { td.done <- d.Run(ctx) }()
	select {
	case <-ready:
	case err := <-td.done:
		tb.Fatalf("daemon did not start: %v", err)
	case <-time.After(20 * time.Second):
		tb.Fatal("daemon did not become ready")
	}
	td.SMTPAddr = d.SMTPAddrs()[0]
}

// Stop ends the daemon (and every connection to it) and waits for it. A
// daemon that does not end fails the test it runs for, with the stacks that
// hold it; the test's cleanup and the later tests go on.
func (d *Daemon) Stop() {
	if d.cancel == nil {
		return
	}
	d.cancel()
	d.cancel = nil
	within := d.within
	if within == 0 {
		within = testwait.StopTimeout
	}
	testwait.StoppedWithin(d.tb, "the daemon", d.done, within)
}

// Mailbox creates a mailbox owned by the user running the test and returns
// it as its owner lists it.
func (d *Daemon) Mailbox(tb testing.TB, name string) protocol.Mailbox {
	tb.Helper()
	if err := d.EnsureMailbox(name, uint32(os.Getuid()), uint32(os.Getgid())); err != nil {
		tb.Fatal(err)
	}
	var l protocol.MailboxList
	d.Call(tb, protocol.VerbMailboxList, struct{}{}, &l)
	for _, m := range l.Mailboxes {
		if m.Name == name {
			return m
		}
	}
	tb.Fatalf("mailbox %s not listed", name)
	return protocol.Mailbox{}
}

// Call performs one request as the user running the test.
func (d *Daemon) Call(tb testing.TB, verb string, args, out any) {
	tb.Helper()
	if err := d.TryCall(verb, args, out); err != nil {
		tb.Fatalf("%s: %v", verb, err)
	}
}

// TryCall is Call returning the error.
func (d *Daemon) TryCall(verb string, args, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := protocol.Dial(ctx, d.Socket)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Call(ctx, verb, args, out)
}

// Attachment is a file attached to a delivered message.
type Attachment struct {
	Filename, ContentType string
	Data                  []byte
}

// Message is what Deliver sends.
type Message struct {
	From        string   // a From header value; default "sender@example.org"
	To          []string // To header values; default the recipient
	Subject     string
	Body        string // text/plain
	HTML        string // an alternative HTML part when set
	Attachments []Attachment
	MessageID   string // without brackets; default a random one
	InReplyTo   string // without brackets
	Date        time.Time
	// NoDate leaves the Date header out (RFC 5322 requires one; some
	// senders do not send it).
	NoDate bool
	// Sign DKIM-signs the message for its From domain with a key DNS
	// publishes: from TrustedDomain it makes the message trusted.
	Sign bool
	// SignAs signs for this domain instead of the From's.
	SignAs string
}

// Deliver sends m over SMTP to rcpt ("agent" or a full address) and returns
// the id the daemon stored it under.
func (d *Daemon) Deliver(tb testing.TB, rcpt string, m Message) string {
	tb.Helper()
	return d.DeliverAll(tb, rcpt, []Message{m})[0]
}

// DeliverAll sends every message in one SMTP session and returns their ids.
func (d *Daemon) DeliverAll(tb testing.TB, rcpt string, msgs []Message) []string {
	tb.Helper()
	if !strings.Contains(rcpt, "@") {
		rcpt += "@" + Domain
	}
	c, err := smtp.Dial(d.SMTPAddr)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	mids := make([]string, len(msgs))
	for i, m := range msgs {
		from, raw := d.prepare(tb, rcpt, &m)
		mids[i] = m.MessageID
		err := c.Mail(from)
		if err == nil {
			err = c.Rcpt(rcpt)
		}
		var w io.WriteCloser
		if err == nil {
			w, err = c.Data()
		}
		if err == nil {
			_, err = w.Write(raw)
		}
		if err == nil {
			err = w.Close()
		}
		if err != nil {
			tb.Fatalf("delivering %.60q to %s: %v", m.Subject, rcpt, err)
		}
	}
	c.Quit()
	var l protocol.MessageList
	mailbox := strings.Split(rcpt, "@")[0]
	d.Call(tb, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: mailbox, Limit: 200}, &l)
	ids := map[string]string{}
	for _, s := range l.Messages {
		ids[strings.Trim(s.MessageID, "<>")] = s.ID
	}
	out := make([]string, len(mids))
	for i, mid := range mids {
		if out[i] = ids[mid]; out[i] == "" {
			out[i] = d.Find(tb, mailbox, protocol.FolderInbox, mid)
		}
	}
	return out
}

// prepare fills m's defaults and returns its envelope sender and bytes.
func (d *Daemon) prepare(tb testing.TB, rcpt string, m *Message) (string, []byte) {
	tb.Helper()
	if m.From == "" {
		m.From = "sender@example.org"
	}
	if len(m.To) == 0 {
		m.To = []string{rcpt}
	}
	if m.MessageID == "" {
		b := make([]byte, 8)
		rand.Read(b)
		m.MessageID = hex.EncodeToString(b) + "@testdaemon"
	}
	if m.Date.IsZero() && !m.NoDate {
		m.Date = time.Now()
	}
	from, err := mail.ParseAddress(m.From)
	if err != nil {
		tb.Fatalf("From %q: %v", m.From, err)
	}
	raw := compose(tb, *m)
	if m.Sign || m.SignAs != "" {
		domain := from.Address[strings.LastIndex(from.Address, "@")+1:]
		if m.SignAs != "" {
			domain = m.SignAs
		}
		d.DNS.SetTXT("td._domainkey."+domain, "v=DKIM1; k=ed25519; p="+base64.StdEncoding.EncodeToString(d.pub))
		var b bytes.Buffer
		if err := dkim.Sign(&b, bytes.NewReader(raw), &dkim.SignOptions{Domain: domain, Selector: "td", Signer: d.key}); err != nil {
			tb.Fatal(err)
		}
		raw = b.Bytes()
	}
	return from.Address, raw
}

// Find returns the id of the message with Message-ID mid (no brackets) in a
// mailbox folder.
func (d *Daemon) Find(tb testing.TB, mailbox, folder, mid string) string {
	tb.Helper()
	var l protocol.MessageList
	d.Call(tb, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: mailbox, Folder: folder, Limit: 200}, &l)
	for _, s := range l.Messages {
		if strings.Trim(s.MessageID, "<>") == mid {
			return s.ID
		}
	}
	tb.Fatalf("message <%s> not in %s/%s", mid, mailbox, folder)
	return ""
}

// fold keeps a header line short (SMTP limits lines to 1000 bytes): a long
// text, or the display name before " <address>", becomes encoded-words on
// lines of their own.
func fold(v string) string {
	if len(v) <= 200 {
		return mime.QEncoding.Encode("utf-8", v)
	}
	text, addr := v, ""
	if i := strings.LastIndex(v, " <"); i >= 0 && strings.HasSuffix(v, ">") {
		text, addr = v[:i], v[i:]
	}
	var words []string
	for len(text) > 0 {
		n := min(len(text), 50)
		for n < len(text) && !utf8.RuneStart(text[n]) {
			n--
		}
		words = append(words, "=?utf-8?b?"+base64.StdEncoding.EncodeToString([]byte(text[:n]))+"?=")
		text = text[n:]
	}
	return strings.Join(words, "\r\n ") + addr
}

func compose(tb testing.TB, m Message) []byte {
	var b bytes.Buffer
	h := func(k, v string) { fmt.Fprintf(&b, "%s: %s\r\n", k, v) }
	h("From", fold(m.From))
	h("To", strings.Join(m.To, ",\r\n "))
	h("Subject", fold(m.Subject))
	if !m.NoDate {
		h("Date", m.Date.Format(time.RFC1123Z))
	}
	h("Message-ID", "<"+m.MessageID+">")
	if m.InReplyTo != "" {
		h("In-Reply-To", "<"+m.InReplyTo+">")
		h("References", "<"+m.InReplyTo+">")
	}
	h("MIME-Version", "1.0")
	// Quoted-printable keeps long lines under SMTP's limit.
	text := func(w io.Writer, s string) {
		qw := quotedprintable.NewWriter(w)
		io.WriteString(qw, strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\n", "\r\n"))
		qw.Close()
	}
	if m.HTML == "" && len(m.Attachments) == 0 {
		h("Content-Type", "text/plain; charset=utf-8")
		h("Content-Transfer-Encoding", "quoted-printable")
		b.WriteString("\r\n")
		text(&b, m.Body)
		return b.Bytes()
	}
	mw := multipart.NewWriter(&b)
	kind := "mixed"
	if len(m.Attachments) == 0 {
		kind = "alternative"
	}
	h("Content-Type", fmt.Sprintf("multipart/%s; boundary=%q", kind, mw.Boundary()))
	b.WriteString("\r\n")
	part := func(hdr map[string]string) io.Writer {
		th := textproto.MIMEHeader{}
		for k, v := range hdr {
			th.Set(k, v)
		}
		w, err := mw.CreatePart(th)
		if err != nil {
			tb.Fatal(err)
		}
		return w
	}
	text(part(map[string]string{"Content-Type": "text/plain; charset=utf-8", "Content-Transfer-Encoding": "quoted-printable"}), m.Body)
	if m.HTML != "" {
		text(part(map[string]string{"Content-Type": "text/html; charset=utf-8", "Content-Transfer-Encoding": "quoted-printable"}), m.HTML)
	}
	for _, a := range m.Attachments {
		ct := a.ContentType
		if ct == "" {
			ct = "application/octet-stream"
		}
		w := part(map[string]string{"Content-Type": ct, "Content-Transfer-Encoding": "base64",
			"Content-Disposition": mime.FormatMediaType("attachment", map[string]string{"filename": a.Filename})})
		enc := base64.StdEncoding.EncodeToString(a.Data)
		for len(enc) > 76 {
			io.WriteString(w, enc[:76]+"\r\n")
			enc = enc[76:]
		}
		io.WriteString(w, enc+"\r\n")
	}
	mw.Close()
	return b.Bytes()
}
