package smtpin

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// TestSTARTTLSForgetsWhatWasSentBeforeTheHandshake: a man in the middle
// appends commands in plaintext to a client's STARTTLS in the same packet
// (CVE-2011-0411's class). Nothing sent before the handshake may act in the
// TLS session: the injected MAIL FROM is not the session's sender, so the
// client's own RCPT inside TLS is refused for want of a sender, or the server has
// ended the connection.
func TestSTARTTLSForgetsWhatWasSentBeforeTheHandshake(t *testing.T) {
	ts := startServer(t, Limits{}, serverTLS(t), false)
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	c.send("STARTTLS\r\nMAIL FROM:<evil@attacker.example>\r\nRCPT TO:<user@example.com>\r\n")
	c.expect("220 ")
	if n := c.r.Buffered(); n != 0 {
		t.Fatalf("the server answered more than STARTTLS in plaintext (%d bytes more)", n)
	}
	tc := tls.Client(c.c, &tls.Config{InsecureSkipVerify: true, ServerName: "mx.mailctl.test"})
	tc.SetDeadline(time.Now().Add(20 * time.Second))
	if err := tc.Handshake(); err != nil {
		return // the server would not go on with a session so begun: nothing injected acts
	}
	r := bufio.NewReader(tc)
	line := func() string {
		var last string
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				if errors.Is(err, io.EOF) || l == "" {
					return "EOF"
				}
				return l
			}
			last = strings.TrimRight(l, "\r\n")
			if len(last) < 4 || last[3] != '-' {
				return last
			}
		}
	}
	io.WriteString(tc, "EHLO client.example\r\n")
	if got := line(); got == "EOF" {
		return
	} else if !strings.HasPrefix(got, "250 ") {
		t.Fatalf("EHLO inside TLS: %q", got)
	}
	io.WriteString(tc, "RCPT TO:<user@example.com>\r\n")
	if got := line(); got != "EOF" && !strings.HasPrefix(got, "503 ") && !strings.HasPrefix(got, "502 5.5.1 Missing MAIL FROM") {
		t.Errorf("RCPT inside TLS after a plaintext MAIL was injected: %q, want a refusal for want of a sender, or the connection ended", got)
	}
	io.WriteString(tc, "DATA\r\n")
	line()
	io.WriteString(tc, "Subject: injected\r\n\r\nx\r\n.\r\nQUIT\r\n")
	io.ReadAll(r)
	if got := ts.be.got(); len(got) != 0 {
		t.Errorf("%d messages delivered with an envelope injected before the handshake: %+v", len(got), got[0].env)
	}
}
