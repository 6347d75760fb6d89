package smtpin

import (
	"bufio"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testproc"
	"github.com/mailctl/mailctl/internal/testwait"
)

// startLMTPTCP serves LMTP on 127.0.0.1:0 to the front MTAs in allow.
// Its log goes to logs when not nil.
func startLMTPTCP(t *testing.T, logs *testproc.Output, allow ...string) (*testServer, string) {
	t.Helper()
	var prefixes []netip.Prefix
	for _, a := range allow {
		prefixes = append(prefixes, netip.MustParsePrefix(a))
	}
	ts := startServer(t, Limits{MaxConnectionsPerIP: 1}, nil, false, func(c *Config) {
		c.LMTPAllowFrom = prefixes
		if logs != nil {
			c.Logger = slog.New(slog.NewTextHandler(logs, nil))
		}
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { ts.ServeLMTP(l); close(done) }()
	t.Cleanup(func() { l.Close(); testwait.Recv(t, "ServeLMTP to return once its listener is closed", done) })
	return ts, l.Addr().String()
}

// dialFrom connects to addr from the loopback address src.
func dialFrom(t *testing.T, src, addr string) *rawConn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawConn{t: t, c: c, r: bufio.NewReader(c)}
}

// TestLMTPOverTCPFromFrontMTA: a front MTA in LMTPAllowFrom gets LMTP with
// XFORWARD, the address it forwards is the envelope's (for SPF), and the
// per-IP cap does not hold it to one connection.
func TestLMTPOverTCPFromFrontMTA(t *testing.T) {
	ts, addr := startLMTPTCP(t, nil, "127.0.0.1/32")
	c := dialFrom(t, "127.0.0.1", addr)
	c.expect("220 ")
	if r := c.cmd("LHLO front.example", "250 "); !strings.Contains(r, "250-XFORWARD NAME ADDR PROTO HELO") {
		t.Fatalf("LHLO reply to a front MTA lacks XFORWARD: %q", r)
	}
	// A second connection from the same front is not refused by the
	// per-IP cap of 1.
	c2 := dialFrom(t, "127.0.0.1", addr)
	c2.expect("220 ")
	c2.cmd("QUIT", "221 ")

	c.cmd("XFORWARD NAME=mail.sender.example ADDR=192.0.2.7 HELO=mail.sender.example PROTO=ESMTP", "250 2.0.0 Ok")
	c.transaction("alice@sender.example", "bob@example.com", "Subject: over tcp\r\n\r\nhello\r\n")
	// Without XFORWARD, the client is the front MTA itself.
	c.transaction("postmaster@front.example", "bob@example.com", "Subject: from the front\r\n\r\nhello\r\n")
	got := ts.be.got()
	if len(got) != 2 {
		t.Fatalf("%d deliveries, want 2", len(got))
	}
	if env := got[0].env; env.RemoteIP.String() != "192.0.2.7" || env.Helo != "mail.sender.example" || env.Forwarded == nil {
		t.Errorf("forwarded envelope: ip %v helo %q forwarded %+v", env.RemoteIP, env.Helo, env.Forwarded)
	}
	if env := got[1].env; env.RemoteIP.String() != "127.0.0.1" || env.Forwarded != nil {
		t.Errorf("unforwarded envelope: ip %v forwarded %+v, want the front's own address", env.RemoteIP, env.Forwarded)
	}
}

// TestLMTPOverTCPRefusesOthers: a TCP LMTP client whose address is not in
// LMTPAllowFrom gets 554 5.7.1 at connect and nothing else, and the refusal
// is logged; SMTP on port 25 still never speaks XFORWARD.
func TestLMTPOverTCPRefusesOthers(t *testing.T) {
	logs := &testproc.Output{}
	ts, addr := startLMTPTCP(t, logs, "127.0.0.1/32")
	c := dialFrom(t, "127.0.0.2", addr)
	if r := c.reply(); !strings.HasPrefix(r, "554 5.7.1 ") || !strings.Contains(r, "lmtp.allow_from") {
		t.Fatalf("a client outside allow_from got %q, want 554 5.7.1 naming lmtp.allow_from", r)
	}
	if r := c.reply(); r != "EOF" {
		t.Errorf("connection stayed open after the refusal: %q", r)
	}
	if !strings.Contains(logs.String(), "not in lmtp.allow_from") || !strings.Contains(logs.String(), "remote=127.0.0.2") {
		t.Errorf("no log line for the refusal:\n%s", logs)
	}
	if n := len(ts.be.got()); n != 0 {
		t.Errorf("%d deliveries from a refused client", n)
	}

	// No allow list at all: nobody gets in over TCP.
	_, closed := startLMTPTCP(t, nil)
	c = dialFrom(t, "127.0.0.1", closed)
	c.expect("554 5.7.1 ")
}
