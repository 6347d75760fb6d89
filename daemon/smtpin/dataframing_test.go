package smtpin

import (
	"bytes"
	"net"
	"strings"
	"testing"
)

// unstuffLines is what DATA made of CRLF lines, the last one included, means
// once the leading dot of each line is removed (RFC 5321 section 4.5.2).
// It is the reference only for data without a bare CR or LF.
func unstuffLines(data []byte) string {
	lines := strings.SplitAfter(string(data), "\r\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, ".")
	}
	return strings.Join(lines, "")
}

// FuzzDataFraming sends arbitrary bytes as the DATA of one transaction,
// read through go-smtp's public DATA reader, and checks the framing. Data
// without a bare CR or LF is taken exactly, dots unstuffed, and the command
// after its end is read as a command: no message can be split in two or
// merged with the next. Data with one is never taken as it is: it is
// refused with 554 5.6.0, or, where go-smtp's reader hides the CR
// ("<CRLF>.<CR>x" loses the dot and the CR), taken without any bare CR or
// LF. (After a CR followed by another, go-smtp's reader no longer sees the
// start of the next line, so such data may run on past "<CRLF>.<CRLF>"
// until the client hangs up: docs/go-smtp.md. The test then hangs up.)
func FuzzDataFraming(f *testing.F) {
	for _, s := range []string{
		"Subject: x\r\n\r\n..leading dot\r\n.\rbare\r\nend",
		"a",
		"line\nbare lf\r\r\n",
		"no end of data\r\n",
		"Subject: x\r\n\r\n.\r.\r\nMAIL FROM:<e@x>",
		"x\r\n..\r\n...\r\n",
		"x\r",
		"",
	} {
		f.Add([]byte(s))
	}
	ts := startServer(f, Limits{MaxLineLength: 1 << 20, MaxReceivedHeaders: 1 << 20, MaxConnections: 1000, MaxConnectionsPerIP: 1000}, nil, false)
	f.Fuzz(func(t *testing.T, data []byte) {
		msg := append(data, "\r\n"...)
		if len(data) > 64<<10 || bytes.Contains(append([]byte("\r\n"), msg...), []byte("\r\n.\r\n")) {
			t.Skip("the data ends early: FuzzSession covers what follows")
		}
		ts.be.reset()
		c := dialRaw(t, "tcp", ts.addr)
		c.hello()
		c.pipelineEnvelope()
		c.send(string(data) + "\r\n.\r\nNOOP\r\n")
		if !hasBareEOL(msg) {
			c.expect("250 ")
			c.expect("250 ") // the NOOP: the session is in step
			got := ts.be.got()
			if len(got) != 1 {
				t.Fatalf("%d deliveries, want 1", len(got))
			}
			if b, want := body(t, got[0].raw), unstuffLines(msg); b != want {
				t.Fatalf("message taken as %q, want %q", b, want)
			}
			return
		}
		c.c.(*net.TCPConn).CloseWrite()
		reply := c.reply()
		if !strings.HasPrefix(reply, "554 5.6.0") && !strings.HasPrefix(reply, "250 ") && reply != "EOF" && !strings.HasPrefix(reply, "451 ") {
			t.Fatalf("data with a bare CR or LF answered %q", reply)
		}
		got := ts.be.got()
		if len(got) > 1 {
			t.Fatalf("%d deliveries from one DATA", len(got))
		}
		for _, d := range got {
			if b := body(t, d.raw); hasBareEOL([]byte(b)) {
				t.Fatalf("a bare CR or LF was taken: %q", b)
			}
		}
	})
}
