package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/smtp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sizedMessage is a message of exactly n bytes (n well above 200).
func sizedMessage(n int) []byte {
	head := "From: big@sender.test\r\nTo: " + rcpt + "\r\nSubject: size " + strconv.Itoa(n) +
		"\r\nMessage-ID: <size-" + strconv.Itoa(n) + "@sender.test>\r\n\r\n"
	var b strings.Builder
	b.WriteString(head)
	for n-b.Len() > 100 {
		b.WriteString(strings.Repeat("x", 76) + "\r\n")
	}
	b.WriteString(strings.Repeat("y", n-b.Len()-2) + "\r\n") // 21 to 98 letters
	return []byte(b.String())
}

// TestMessageSizeLimit checks max_message_bytes through the real binary:
// EHLO advertises the limit (RFC 1870), a message one byte over is refused
// with 552, and over DATA a message of one byte less than the limit is the
// largest taken (go-smtp's DATA reader refuses exactly its limit; BDAT and
// a declared SIZE take it: docs/go-smtp.md, point 5, and smtpin's
// TestSizeLimit, which also reads the EHLO after STARTTLS).
func TestMessageSizeLimit(t *testing.T) {
	const limit = 20000
	d := startDaemon(t, options{MaxBytes: limit})
	for _, n := range []int{limit - 1, limit, limit + 1} {
		if got := len(sizedMessage(n)); got != n {
			t.Fatalf("sizedMessage(%d) has %d bytes", n, got)
		}
	}
	if err := trySend(d.SMTPAddr, "big@sender.test", rcpt, sizedMessage(limit-1)); err != nil {
		t.Errorf("message of max_message_bytes - 1 refused: %v", err)
	}
	for _, n := range []int{limit, limit + 1} {
		err := trySend(d.SMTPAddr, "big@sender.test", rcpt, sizedMessage(n))
		if err == nil || !strings.Contains(err.Error(), "552") {
			t.Errorf("message of %d bytes over DATA, limit %d: %v, want 552", n, limit, err)
		}
	}

	c, err := smtp.Dial(d.SMTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Hello("client.sender.test"); err != nil {
		t.Fatal(err)
	}
	_, size := c.Extension("SIZE")
	if t.Failed() {
		return
	}
	if size != strconv.Itoa(limit) {
		t.Errorf("EHLO advertises SIZE %s, want max_message_bytes %d", size, limit)
	}
	t.Logf("max_message_bytes=%d: %d bytes stored, %d and %d refused with 552 over DATA, EHLO SIZE %s", limit, limit-1, limit, limit+1, size)
}

// rawConn is a hand-driven SMTP client for conversations a library would
// refuse to have.
type rawConn struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rc := &rawConn{t: t, c: c, r: bufio.NewReader(c)}
	if g := rc.reply(); !strings.HasPrefix(g, "220 ") {
		t.Fatalf("greeting %q", g)
	}
	return rc
}

// reply reads one (possibly multi-line) reply; "" when the server closed.
func (rc *rawConn) reply() string {
	rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var all string
	for {
		line, err := rc.r.ReadString('\n')
		all += line
		if err != nil || len(line) < 4 || line[3] != '-' {
			return all
		}
	}
}

// cmd sends raw bytes and returns the reply.
func (rc *rawConn) cmd(s string) string {
	rc.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(rc.c, s); err != nil {
		return "write: " + err.Error()
	}
	return rc.reply()
}

// TestLimitsFromConfig checks that the [smtp] limits of the config file
// reach the listener of the real binary: recipients per message, line
// length, the whole-session deadline that NOOP cannot extend, and message
// framing that bare line ends cannot split.
func TestLimitsFromConfig(t *testing.T) {
	d := startDaemon(t, options{SMTPExtra: "max_recipients = 5\nmax_line_length = 1000\nsession_timeout = \"3s\"\n"})

	t.Run("recipients", func(t *testing.T) {
		c := dialRaw(t, d.SMTPAddr)
		c.cmd("EHLO client.sender.test\r\n")
		if r := c.cmd("MAIL FROM:<a@sender.test>\r\n"); !strings.HasPrefix(r, "250") {
			t.Fatalf("MAIL: %q", r)
		}
		for i := range 5 {
			if r := c.cmd(fmt.Sprintf("RCPT TO:<agent+%d@%s>\r\n", i, domain)); !strings.HasPrefix(r, "250") {
				t.Fatalf("RCPT %d: %q", i, r)
			}
		}
		if r := c.cmd("RCPT TO:<agent+6@" + domain + ">\r\n"); !strings.HasPrefix(r, "452") {
			t.Errorf("6th RCPT with max_recipients = 5: %q, want 452", r)
		}
		c.cmd("DATA\r\n")
		if r := c.cmd("Subject: five\r\nMessage-ID: <five@sender.test>\r\n\r\nhi\r\n.\r\n"); !strings.HasPrefix(r, "250") {
			t.Fatalf("DATA end: %q", r)
		}
		m := d.byMessageID(t, "five@sender.test", 10*time.Second)
		if n := countMessageID(d.inbox(t), "five@sender.test"); n != 1 {
			t.Errorf("five recipients in one mailbox stored %d copies, want 1", n)
		}
		t.Logf("max_recipients=5: 6th RCPT refused with 452; one copy stored (tag %q)", m.Meta.Tag)
	})

	t.Run("line length", func(t *testing.T) {
		c := dialRaw(t, d.SMTPAddr)
		c.cmd("EHLO client.sender.test\r\n")
		r := c.cmd("NOOP " + strings.Repeat("a", 1100) + "\r\n")
		if !strings.HasPrefix(r, "500") {
			t.Errorf("1105-byte command line with max_line_length = 1000: %q, want 500", r)
		}
		c = dialRaw(t, d.SMTPAddr)
		c.cmd("EHLO client.sender.test\r\n")
		c.cmd("MAIL FROM:<a@sender.test>\r\n")
		c.cmd("RCPT TO:<" + rcpt + ">\r\n")
		c.cmd("DATA\r\n")
		rd := c.cmd("Subject: long\r\n\r\n" + strings.Repeat("y", 1100) + "\r\n.\r\n")
		if !strings.HasPrefix(rd, "500") {
			t.Errorf("1100-byte DATA line with max_line_length = 1000: %q, want 500", rd)
		}
		t.Logf("max_line_length=1000: a 1105-byte command gets %q, an 1100-byte DATA line %q", strings.TrimSpace(r), strings.TrimSpace(rd))
	})

	t.Run("first line length", func(t *testing.T) {
		c := dialRaw(t, d.SMTPAddr)
		r := c.cmd("RSET   " + strings.Repeat("x", 8000) + "\r\n")
		if !strings.HasPrefix(r, "500") {
			next := c.reply()
			t.Errorf("an over-long first line (8007 bytes, max_line_length = 1000) was partly run as a command: got %q, then %q; want 500", strings.TrimSpace(r), strings.TrimSpace(next))
		}
	})

	t.Run("session deadline", func(t *testing.T) {
		c := dialRaw(t, d.SMTPAddr)
		start := time.Now()
		var last string
		for time.Since(start) < 8*time.Second {
			last = c.cmd("NOOP\r\n")
			if !strings.HasPrefix(last, "250") {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		took := time.Since(start)
		if took > 5*time.Second || took < 2*time.Second {
			t.Errorf("a NOOP-forever client was cut after %v, want about session_timeout = 3s (last reply %q)", took, last)
		}
		t.Logf("session_timeout=3s: NOOP every 200ms cut after %v with %q", took.Round(100*time.Millisecond), strings.TrimSpace(last))
	})

	t.Run("bare LF framing", func(t *testing.T) {
		// An attempt to end DATA with <LF>.<CR><LF> and smuggle a second
		// transaction behind it: one reply to the real end of DATA, and no
		// smuggled message stored.
		c := dialRaw(t, d.SMTPAddr)
		c.cmd("EHLO client.sender.test\r\n")
		c.cmd("MAIL FROM:<a@sender.test>\r\n")
		c.cmd("RCPT TO:<" + rcpt + ">\r\n")
		c.cmd("DATA\r\n")
		r := c.cmd("Subject: outer\r\nMessage-ID: <outer@sender.test>\r\n\r\nhi\n.\r\n" +
			"MAIL FROM:<evil@sender.test>\r\nRCPT TO:<" + rcpt + ">\r\nDATA\r\n" +
			"Subject: smuggled\r\nMessage-ID: <smuggled@sender.test>\r\n\r\nevil\r\n.\r\n")
		if strings.HasPrefix(r, "250") || strings.HasPrefix(r, "354") {
			t.Errorf("message with a bare LF before the dot: %q, want it refused", r)
		}
		if next := c.cmd("NOOP\r\n"); !strings.HasPrefix(next, "250") && next != "" {
			t.Errorf("after the refused message the next reply is %q: the stream was split", next)
		}
		time.Sleep(300 * time.Millisecond)
		for _, id := range []string{"outer@sender.test", "smuggled@sender.test"} {
			if n := countMessageID(d.inbox(t), id); n != 0 {
				t.Errorf("%s stored %d times, want 0", id, n)
			}
		}
		t.Logf("<LF>.<CR><LF> smuggling: one reply %q, nothing stored", strings.TrimSpace(r))
	})
}

func countMessageID(msgs []stored, id string) int {
	n := 0
	for _, m := range msgs {
		if m.Meta.MessageID == id {
			n++
		}
	}
	return n
}
