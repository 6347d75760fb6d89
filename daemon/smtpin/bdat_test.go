package smtpin

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/testwait"
)

// CHUNKING is always advertised by go-smtp; BDAT data is not dot-stuffed,
// and the same framing and size rules apply to it.
func TestBDAT(t *testing.T) {
	ts := startServer(t, Limits{MaxMessageBytes: 100}, nil, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	msg := "Subject: b\r\n\r\n.\r\nline\r\n"
	c.cmd("MAIL FROM:<a@sender.example>", "250 ")
	c.cmd("RCPT TO:<b@example.com>", "250 ")
	c.send(fmt.Sprintf("BDAT %d\r\n%s", 10, msg[:10]))
	c.expect("250 ")
	c.send(fmt.Sprintf("BDAT %d LAST\r\n%s", len(msg)-10, msg[10:]))
	c.expect("250 ")
	c.cmd("MAIL FROM:<a@sender.example>", "250 ")
	c.cmd("RCPT TO:<b@example.com>", "250 ")
	bad := "Subject: b\r\n\r\nbare\nlf\r\n"
	c.send(fmt.Sprintf("BDAT %d LAST\r\n%s", len(bad), bad))
	c.expect("554 5.6.0")
	c.cmd("MAIL FROM:<a@sender.example>", "250 ")
	c.cmd("RCPT TO:<b@example.com>", "250 ")
	c.send(fmt.Sprintf("BDAT 101 LAST\r\n%s", strings.Repeat("x", 99)+"\r\n"))
	c.expect("552 5.3.4")
	c.cmd("NOOP", "250 ")
	// A last chunk that ends mid-line: the line is completed, so every
	// stored message ends in CRLF.
	c.cmd("MAIL FROM:<a@sender.example>", "250 ")
	c.cmd("RCPT TO:<b@example.com>", "250 ")
	open := "Subject: c\r\n\r\nno end"
	c.send(fmt.Sprintf("BDAT %d LAST\r\n%s", len(open), open))
	c.expect("250 ")
	got := ts.be.got()
	if len(got) != 2 || body(t, got[0].raw) != msg || body(t, got[1].raw) != open+"\r\n" {
		t.Errorf("deliveries %+v", got)
	}
}

// RFC 3030 lets a client abandon a BDAT transfer with RSET, and go-smtp
// resets the transaction itself when a chunk takes the message past the
// limit. Either way the framing is intact: the session goes on, and the
// abort is neither a refused command nor a reason to hang up. (Each
// connection aborts one transfer and then sends with DATA: a second BDAT
// transaction after an abort meets go-smtp's race, docs/go-smtp.md point 6.)
func TestBDATAbortKeepsTheSession(t *testing.T) {
	ts := startServer(t, Limits{MaxMessageBytes: 100, MaxErrors: 1}, nil, false)
	for _, abort := range []struct{ send, reply string }{
		{"RSET\r\n", "250 "},
		{fmt.Sprintf("BDAT 95 LAST\r\n%95s", "y"), "552 5.3.4"},
	} {
		c := dialRaw(t, "tcp", ts.addr)
		c.hello()
		c.cmd("MAIL FROM:<a@sender.example>", "250 ")
		c.cmd("RCPT TO:<b@example.com>", "250 ")
		c.send("BDAT 10\r\nSubject: x")
		c.expect("250 ")
		c.send(abort.send)
		c.expect(abort.reply)
		c.transaction("a@sender.example", "b@example.com", "Subject: kept\r\n\r\nbody\r\n")
		c.cmd("NOOP", "250 ")
	}
	got := ts.be.got()
	if len(got) != 2 || body(t, got[0].raw) != "Subject: kept\r\n\r\nbody\r\n" || body(t, got[1].raw) != body(t, got[0].raw) {
		t.Errorf("deliveries %+v, want the two messages sent whole", got)
	}
}

// A BDAT transfer ended without LAST (by RSET, by a chunk past the limit,
// after an empty first chunk) and another begun after it made go-smtp's
// goroutine for one of them block for ever on a result slot the other had
// taken (docs/go-smtp.md, point 6): a client repeating that on a connection
// leaked a goroutine, and the connection with it, on most tries. Every
// session's goroutines must end with its connection.
func TestBDATAbortsLeakNoGoroutines(t *testing.T) {
	ts := startServer(t, Limits{MaxMessageBytes: 100, MaxErrors: 1000}, nil, false)
	before := runtime.NumGoroutine()
	const txn = "MAIL FROM:<a@sender.example>\r\nRCPT TO:<b@example.com>\r\n"
	for _, abort := range []string{
		txn + "BDAT 5\r\nxxxxxRSET\r\n",
		txn + "BDAT 0\r\nRSET\r\n",
		txn + "BDAT 3\r\nabcBDAT 200\r\n" + strings.Repeat("z", 200),
	} {
		for range 10 {
			c := dialRaw(t, "tcp", ts.addr)
			c.hello()
			c.send(strings.Repeat(abort, 50) + "QUIT\r\n")
			for r := c.reply(); r != "EOF" && !strings.HasPrefix(r, "221 "); r = c.reply() {
			}
			c.c.Close()
		}
	}
	testwait.For(t, "the sessions' goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}
