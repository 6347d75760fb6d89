package daemon

import (
	"bufio"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/testproc"
	"github.com/mailctl/mailctl/protocol"
)

// lmtpTCPAddr is the daemon's bound LMTP-over-TCP address.
func lmtpTCPAddr(t *testing.T, td *testDaemon) string {
	t.Helper()
	for _, a := range td.SMTPAddrs() {
		if rest, ok := strings.CutPrefix(a, "lmtp:"); ok && !strings.HasPrefix(rest, "/") {
			return rest
		}
	}
	t.Fatalf("no LMTP TCP listener among %v", td.SMTPAddrs())
	return ""
}

// TestLMTPOverTCPFromFrontMTAFeedsSPF: a front MTA in lmtp.allow_from
// (127.0.0.1) delivers over LMTP/TCP and the client address it passes
// with XFORWARD is what SPF judges; a client from 127.0.0.2 is refused at
// connect with 554 and a log line, and nothing is stored.
func TestLMTPOverTCPFromFrontMTAFeedsSPF(t *testing.T) {
	dns := &resolver.Map{}
	dns.SetTXT("sender.example", "v=spf1 ip4:192.0.2.7 -all")
	var logs testproc.Output
	td := startDaemonSMTP(t, "[lmtp]\nlisten_tcp = [\"127.0.0.1:0\"]\nallow_from = [\"127.0.0.1/32\"]\n", "listen = []",
		Options{Resolver: dns, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	td.ensureMine(t, "agent")
	addr := lmtpTCPAddr(t, td)

	dial := func(src string) (net.Conn, *bufio.Reader) {
		t.Helper()
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(20 * time.Second))
		return c, bufio.NewReader(c)
	}

	c, r := dial("127.0.0.1")
	expect := func(code string) {
		t.Helper()
		for {
			line, err := r.ReadString('\n')
			if err != nil || !strings.HasPrefix(line, code) {
				t.Fatalf("got %q (%v), want %s", line, err, code)
			}
			if line[3] == ' ' {
				return
			}
		}
	}
	send := func(line, code string) { t.Helper(); fmt.Fprintf(c, "%s\r\n", line); expect(code) }
	expect("220")
	send("LHLO front.example", "250")
	send("XFORWARD NAME=mail.sender.example ADDR=192.0.2.7 HELO=mail.sender.example PROTO=ESMTP", "250")
	send("MAIL FROM:<alice@sender.example>", "250")
	send("RCPT TO:<agent@example.test>", "250")
	send("DATA", "354")
	send("From: alice@sender.example\r\nSubject: via the tier\r\n\r\nhello\r\n.", "250")
	send("QUIT", "221")

	var l protocol.MessageList
	if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "agent", Subject: "via the tier"}, &l); err != nil || len(l.Messages) != 1 {
		t.Fatalf("stored: %v %+v", err, l)
	}
	var m protocol.Message
	if err := td.call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "agent", ID: l.Messages[0].ID}, &m); err != nil {
		t.Fatal(err)
	}
	if m.SPF == nil || m.SPF.Result != "pass" || m.ReceivedFromIP != "192.0.2.7" {
		t.Errorf("SPF %+v from %q, want pass for the forwarded client 192.0.2.7", m.SPF, m.ReceivedFromIP)
	}

	c, r = dial("127.0.0.2")
	line, _ := r.ReadString('\n')
	if !strings.HasPrefix(line, "554 5.7.1 ") || !strings.Contains(line, "lmtp.allow_from") {
		t.Errorf("a client outside allow_from got %q, want 554 5.7.1 naming lmtp.allow_from", line)
	}
	if rest, err := r.ReadString('\n'); err == nil {
		t.Errorf("connection open after the refusal: %q", rest)
	}
	if out := logs.String(); !strings.Contains(out, "not in lmtp.allow_from") || !strings.Contains(out, "remote=127.0.0.2") {
		t.Errorf("no log line for the refused client:\n%s", out)
	}
	if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "agent"}, &l); err != nil || len(l.Messages) != 1 {
		t.Errorf("after the refused client: %v, %d messages, want 1", err, len(l.Messages))
	}
}

// TestLMTPKeysWaitForRestart: the LMTP listeners and their allow list are
// bound at start; a reload that changes them names them as waiting for a
// restart and keeps the running values.
func TestLMTPKeysWaitForRestart(t *testing.T) {
	running, err := config.Parse([]byte("domains = [\"a.test\"]\n[lmtp]\nlisten_tcp = [\"10.0.0.5:24\"]\nallow_from = [\"10.0.0.1/32\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	file, err := config.Parse([]byte("domains = [\"a.test\"]\n[lmtp]\nlisten_tcp = [\"10.0.0.5:24\"]\nallow_from = [\"10.0.0.2/32\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	next, applied, pending := applyReload(file, running)
	if !slices.Contains(pending, "lmtp.allow_from") || slices.Contains(applied, "lmtp.allow_from") {
		t.Errorf("applied %v, pending %v: want lmtp.allow_from pending", applied, pending)
	}
	if got := next.LMTP.AllowFrom; len(got) != 1 || got[0] != "10.0.0.1/32" {
		t.Errorf("running allow_from after reload %v, want the one bound at start", got)
	}
}
