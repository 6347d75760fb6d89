package smtpin

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
)

// FuzzSession writes arbitrary bytes as a whole client session and checks
// that the server neither panics nor hangs, and that every accepted message
// is well framed: CRLF line endings only, ending in CRLF, and no message
// holds an end-of-data line the client did not dot-stuff (which would mean
// two transactions were merged or one was split).
func FuzzSession(f *testing.F) {
	seeds := []string{
		"EHLO a\r\n" + envelope + "Subject: x\r\n\r\nbody\r\n.\r\nQUIT\r\n",
		"EHLO a\r\n" + envelope + "Subject: x\r\n\r\nbody\n.\r\nMAIL FROM:<e@x>\r\nRCPT TO:<v@example.com>\r\nDATA\r\nx\r\n.\r\n",
		"EHLO a\r\n" + envelope + "a\r\n.\rMAIL FROM:<e@x>\r\n.\r\n",
		"EHLO a\r\n" + envelope + "a\r\n..\r\nMAIL FROM:<e@x>\r\n.\r\n",
		"EHLO a\r\nMAIL FROM:<a@b> SIZE=10\r\nRCPT TO:<b@example.com>\r\nBDAT 5 LAST\r\nab\ncd",
		"GET / HTTP/1.1\r\n\r\n",
		"HELO x\r\nMAIL FROM:<>\r\nRCPT TO:<postmaster@example.com>\r\nRCPT TO:<x@elsewhere>\r\nDATA\r\n.\r\n",
		"EHLO a\r\nSTARTTLS\r\nNOOP\r\nRSET\r\nVRFY x\r\nQUIT\r\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	ts := startServer(f, Limits{
		MaxMessageBytes: 64 << 10, CommandTimeout: time.Second, SessionTimeout: 3 * time.Second,
		MaxConnections: 1000, MaxConnectionsPerIP: 1000, MaxLineLength: 2048,
	}, nil, false)
	f.Fuzz(func(t *testing.T, data []byte) {
		ts.be.reset()
		c, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		go func() {
			c.Write(data)
			c.(*net.TCPConn).CloseWrite()
		}()
		if _, err := io.Copy(io.Discard, c); err != nil {
			var ne net.Error
			if ok := asNetErr(err, &ne); ok && ne.Timeout() {
				t.Fatalf("session did not end: %v", err)
			}
		}
		for _, d := range ts.be.got() {
			raw := d.raw
			if !bytes.HasSuffix(raw, []byte("\r\n")) {
				t.Fatalf("accepted message does not end in CRLF: %q", raw)
			}
			if hasBareEOL(raw) {
				t.Fatalf("accepted message has a bare CR or LF: %q", raw)
			}
			// A "." line in a message comes from a stuffed ".." line, or from
			// ".\r." (go-smtp drops a ".\r" that does not end the data).
			b := body(t, raw)
			if (strings.Contains(b, "\r\n.\r\n") || strings.HasPrefix(b, ".\r\n")) &&
				!bytes.Contains(data, []byte("\n..\r\n")) && !bytes.Contains(data, []byte("\n.\r.")) {
				t.Fatalf("accepted message holds an end-of-data line the client did not stuff: %q", raw)
			}
			for _, r := range d.env.Rcpts {
				if !strings.HasSuffix(strings.ToLower(r), "@example.com") && !strings.HasSuffix(strings.ToLower(r), "@mailctl.test") &&
					!strings.HasSuffix(strings.ToLower(r), "@bücher.example") {
					t.Fatalf("foreign recipient accepted: %q", r)
				}
			}
		}
	})
}

func asNetErr(err error, target *net.Error) bool {
	ne, ok := err.(net.Error)
	if ok {
		*target = ne
	}
	return ok
}

// BenchmarkSMTPDeliver measures whole SMTP transactions (MAIL, RCPT, DATA
// of a 4 KiB message) against an in-process server with a backend that
// stores nothing; it prints messages per second.
func BenchmarkSMTPDeliver(b *testing.B) { benchSMTPDeliver(b, 50) }

// BenchmarkSMTPDeliver1MiB is BenchmarkSMTPDeliver with 1 MiB messages,
// where reading DATA is most of the work.
func BenchmarkSMTPDeliver1MiB(b *testing.B) { benchSMTPDeliver(b, 13000) }

func benchSMTPDeliver(b *testing.B, lines int) {
	ts := startServer(b, Limits{MaxConnections: 1000, MaxConnectionsPerIP: 1000}, nil, false)
	msg := []byte("From: a@sender.example\r\nTo: b@example.com\r\nSubject: bench\r\n\r\n" +
		strings.Repeat(strings.Repeat("x", 78)+"\r\n", lines))
	b.SetBytes(int64(len(msg)))
	b.SetParallelism(4)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		c, err := smtp.Dial(ts.addr)
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		if err := c.Hello("bench.example"); err != nil {
			b.Error(err)
			return
		}
		for pb.Next() {
			if err := c.SendMail("a@sender.example", []string{"b@example.com"}, bytes.NewReader(msg)); err != nil {
				b.Error(err)
				return
			}
		}
		c.Quit()
	})
	el := time.Since(start)
	b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
	ts.be.reset()
}
