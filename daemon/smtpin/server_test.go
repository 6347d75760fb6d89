package smtpin

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/mailctl/mailctl/internal/testwait"
)

const envelope = "MAIL FROM:<alice@sender.example>\r\nRCPT TO:<bob@example.com>\r\nDATA\r\n"

func TestDeliverPlain(t *testing.T) {
	ts := startServer(t, Limits{}, nil, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	c.cmd("MAIL FROM:<alice@sender.example> SIZE=100", "250 ")
	c.cmd("RCPT TO:<bob@example.com>", "250 ")
	c.cmd("RCPT TO:<Carol@Example.COM>", "250 ")
	c.cmd("DATA", "354 ")
	c.send("Subject: hi\r\n\r\n..dot-stuffed line\r\nend\r\n.\r\n")
	c.expect("250 2.0.0")
	c.cmd("QUIT", "221 ")
	got := ts.be.got()
	if len(got) != 1 {
		t.Fatalf("%d deliveries", len(got))
	}
	d := got[0]
	if b := body(t, d.raw); b != "Subject: hi\r\n\r\n.dot-stuffed line\r\nend\r\n" {
		t.Errorf("body %q", b)
	}
	wantEnv := Envelope{RemoteIP: net.ParseIP("127.0.0.1").To4(), Helo: "client.example", MailFrom: "alice@sender.example",
		Rcpts: []string{"bob@example.com", "Carol@Example.COM"}}
	if !d.env.RemoteIP.Equal(wantEnv.RemoteIP) {
		t.Errorf("RemoteIP %v", d.env.RemoteIP)
	}
	d.env.RemoteIP = wantEnv.RemoteIP
	if d.trace != strings.Index(string(d.raw), "Subject:") {
		t.Errorf("trace of %d bytes, want our Received header's", d.trace)
	}
	if len(d.env.Session) != 12 {
		t.Errorf("session %q, want the 12-hex-digit id of the log lines", d.env.Session)
	}
	wantEnv.Session = d.env.Session
	// The room before the message is in the same array, right before it.
	if !d.headroom || d.spooled {
		t.Errorf("the message came without Headroom bytes of room right before it (spooled: %v)", d.spooled)
	}
	if !reflect.DeepEqual(d.env, wantEnv) {
		t.Errorf("envelope -want %+v +got %+v", wantEnv, d.env)
	}
	rcv := string(d.raw[:strings.Index(string(d.raw), "Subject:")])
	if !strings.HasPrefix(rcv, "Received: from client.example ([127.0.0.1])\r\n\tby mx.mailctl.test (mailctl) with ESMTP id ") {
		t.Errorf("Received header %q", rcv)
	}
}

// TestSmuggling sends a first message whose end uses a non-standard line
// ending followed by a smuggled second transaction, then a clean message.
// The only terminator is CRLF.CRLF: the odd endings must never split the
// stream into two messages.
func TestSmuggling(t *testing.T) {
	smuggled := "MAIL FROM:<evil@attacker.example>\r\nRCPT TO:<victim@example.com>\r\nDATA\r\nSubject: smuggled\r\n\r\nx\r\n"
	tests := []struct {
		name    string
		ending  string
		reply   string // reply to the first DATA
		wantOne string // exact body of the first message when accepted
	}{
		{name: "LF.CRLF", ending: "\n.\r\n", reply: "554 5.6.0"},
		{name: "LF.LF", ending: "\n.\n", reply: "554 5.6.0"},
		{name: "CR.CR", ending: "\r.\r", reply: "554 5.6.0"},
		{name: "CR.CRLF", ending: "\r.\r\n", reply: "554 5.6.0"},
		{name: "CRLF.LF", ending: "\r\n.\n", reply: "554 5.6.0"},
		{name: "bare LF in body", ending: "\nstill body\r\n", reply: "554 5.6.0"},
		// "<CRLF>.<CR>x": go-smtp's reader drops the dot and the CR (as if
		// the line had been dot-stuffed), so no bare CR is left to refuse.
		// The data still ends only at <CRLF>.<CRLF>: what follows is body
		// of the one message, never a second transaction.
		{name: "CRLF.CR", ending: "\r\n.\r", reply: "250 ", wantOne: "Subject: one\r\n\r\nbody\r\n" + smuggled},
		{name: "CRLF.CRx mid-body", ending: "\r\n.\rx\r\n", reply: "250 ", wantOne: "Subject: one\r\n\r\nbody\r\nx\r\n" + smuggled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := startServer(t, Limits{}, nil, false)
			c := dialRaw(t, "tcp", ts.addr)
			c.hello()
			c.pipelineEnvelope()
			c.send("Subject: one\r\n\r\nbody" + tt.ending + smuggled + ".\r\n")
			c.expect(tt.reply)
			// The session is still in step: a clean message goes through.
			c.pipelineEnvelope()
			c.send("Subject: clean\r\n\r\nclean\r\n.\r\n")
			c.expect("250 ")
			c.cmd("QUIT", "221 ")
			got := ts.be.got()
			var bodies []string
			for _, d := range got {
				bodies = append(bodies, body(t, d.raw))
				if !reflect.DeepEqual(d.env.Rcpts, []string{"bob@example.com"}) || d.env.MailFrom != "alice@sender.example" {
					t.Errorf("smuggled envelope delivered: %+v", d.env)
				}
			}
			want := []string{"Subject: clean\r\n\r\nclean\r\n"}
			if tt.wantOne != "" {
				want = append([]string{tt.wantOne}, want...)
			}
			if !reflect.DeepEqual(bodies, want) {
				t.Errorf("deliveries:\n-want %q\n+got  %q", want, bodies)
			}
		})
	}
}

// A STARTTLS whose handshake fails ends the connection with a 421. go-smtp
// itself answers 550 and goes on reading commands in plaintext, from a
// stream the handshake consumed an unknown part of, with the transaction
// begun before STARTTLS still open (it was delivered), and lets one
// connection start handshake after handshake.
func TestFailedSTARTTLSEndsTheConnection(t *testing.T) {
	ts := startServer(t, Limits{}, serverTLS(t), false)
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	c.cmd("MAIL FROM:<a@sender.example>", "250 ")
	c.cmd("RCPT TO:<user@example.com>", "250 ")
	c.cmd("STARTTLS", "220 ")
	// A TLS record header and five bytes that are no handshake message.
	c.send("\x16\x03\x01\x00\x05bogus")
	// The server's TLS alert, then its answer in plaintext.
	line, err := c.r.ReadString('\n')
	if err != nil || !strings.Contains(line, "421 4.7.0 ") {
		t.Fatalf("after a failed handshake: %q, %v; want a 421 4.7.0", line, err)
	}
	_, _ = io.WriteString(c.c, "DATA\r\nSubject: after TLS failed\r\n\r\nx\r\n.\r\nQUIT\r\n")
	if rest, _ := io.ReadAll(c.r); len(rest) > 0 {
		t.Errorf("the connection went on after a failed handshake: %q", rest)
	}
	if got := ts.be.got(); len(got) != 0 {
		t.Errorf("%d messages delivered on a connection whose handshake failed", len(got))
	}
}

// TestCutDataStaysFramed: a message cut at the size limit right before
// ".<CRLF>" in the middle of a line, followed by a smuggled transaction.
// go-smtp's reader stops handing on data at the limit and drains the rest
// in the state it stopped in, mid-line, so that dot does not end the data
// and the bytes after it are never taken for commands. The cut is placed
// on and around the byte where the limit falls.
func TestCutDataStaysFramed(t *testing.T) {
	const max = 1000
	prefix := "Subject: big\r\n\r\n"
	smuggled := "MAIL FROM:<evil@attacker.example>\r\nRCPT TO:<victim@example.com>\r\nDATA\r\nSubject: smuggled\r\n\r\nx\r\n.\r\n"
	for _, size := range []int{max - 1, max, max + 1} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			ts := startServer(t, Limits{MaxMessageBytes: max}, nil, false)
			c := dialRaw(t, "tcp", ts.addr)
			c.hello()
			c.pipelineEnvelope()
			// size bytes of one line, then a "." that ends it: the DATA
			// really ends with the smuggled text's own end-of-data line.
			c.send(prefix + strings.Repeat("a", size-len(prefix)) + ".\r\n" + smuggled)
			c.expect("552 ")
			c.pipelineEnvelope()
			c.send("Subject: clean\r\n\r\nclean\r\n.\r\n")
			c.expect("250 ")
			got := ts.be.got()
			for _, d := range got {
				if d.env.MailFrom != "alice@sender.example" {
					t.Errorf("smuggled envelope delivered: %+v", d.env)
				}
			}
			if len(got) != 1 {
				t.Errorf("%d deliveries, want the clean message only", len(got))
			}
		})
	}
}

func TestNotSMTP(t *testing.T) {
	ts := startServer(t, Limits{}, nil, false)
	for _, req := range []string{
		"GET / HTTP/1.1\r\nHost: mx\r\n\r\n",
		"POST /form HTTP/1.1\r\nHost: mx\r\nContent-Length: 40\r\n\r\nMAIL FROM:<a@b>\r\nRCPT TO:<bob@example.com>\r\n",
		"CONNECT mx:25 HTTP/1.1\r\n\r\n",
		"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
	} {
		c := dialRaw(t, "tcp", ts.addr)
		c.expect("220 ")
		c.send(req)
		c.expect("554 5.7.0")
		if r := c.reply(); r != "EOF" {
			t.Errorf("%q: connection still open: %q", req, r)
		}
	}
	if len(ts.be.got()) != 0 {
		t.Error("delivery from an HTTP request")
	}
}

func TestPipelining(t *testing.T) {
	ts := startServer(t, Limits{}, nil, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.expect("220 ")
	c.send("EHLO client.example\r\n")
	if ehlo := c.expect("250 "); !strings.Contains(ehlo, "PIPELINING") || !strings.Contains(ehlo, "SMTPUTF8") ||
		!strings.Contains(ehlo, "8BITMIME") || !strings.Contains(ehlo, "SIZE ") || strings.Contains(ehlo, "STARTTLS") {
		t.Errorf("EHLO reply %q", ehlo)
	}
	c.send("MAIL FROM:<a@sender.example>\r\nRCPT TO:<b@example.com>\r\nRCPT TO:<x@foreign.example>\r\n" +
		"RCPT TO:<nobody@example.com>\r\nRCPT TO:<c@mailctl.test>\r\nDATA\r\n")
	for _, want := range []string{"250 ", "250 ", "550 5.7.1", "550 5.1.1", "250 ", "354 "} {
		c.expect(want)
	}
	c.send("Subject: p\r\n\r\nx\r\n.\r\nMAIL FROM:<a@sender.example>\r\nRCPT TO:<b@example.com>\r\nDATA\r\n")
	c.expect("250 ")
	c.expect("250 ")
	c.expect("250 ")
	c.expect("354 ")
	c.send("Subject: q\r\n\r\ny\r\n.\r\nQUIT\r\n")
	c.expect("250 ")
	c.expect("221 ")
	got := ts.be.got()
	if len(got) != 2 || !reflect.DeepEqual(got[0].env.Rcpts, []string{"b@example.com", "c@mailctl.test"}) {
		t.Errorf("deliveries %+v", got)
	}
}

func TestOpenRelayRefused(t *testing.T) {
	ts := startServer(t, Limits{}, nil, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	c.cmd("MAIL FROM:<spammer@spam.example>", "250 ")
	for _, r := range []string{"victim@gmail.example", "bob@example.com.evil.example", "bob%example.com@evil.example"} {
		c.send("RCPT TO:<" + r + ">\r\n")
		if rep := c.reply(); strings.HasPrefix(rep, "2") {
			t.Errorf("relay to %q accepted: %q", r, rep)
		}
	}
	c.cmd("DATA", "502 ")
	if len(ts.be.got()) != 0 {
		t.Error("relayed")
	}
}

func TestReceivedLoopGuard(t *testing.T) {
	ts := startServer(t, Limits{MaxReceivedHeaders: 5}, nil, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	for _, tt := range []struct {
		n     int
		reply string
	}{{5, "250 "}, {6, "554 5.4.6"}} {
		c.pipelineEnvelope()
		// Folded and oddly spaced fields count too; a body line does not.
		h := strings.Repeat("Received: from a\r\n\tby b; date\r\n", tt.n-1) + "RECEIVED : from c by d\r\n"
		c.send(h + "Subject: loop\r\n\r\nReceived: in the body\r\n.\r\n")
		c.expect(tt.reply)
	}
	if n := len(ts.be.got()); n != 1 {
		t.Errorf("%d deliveries, want 1", n)
	}
}

func TestEmptyMessage(t *testing.T) {
	ts := startServer(t, Limits{}, nil, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	c.pipelineEnvelope()
	c.send(".\r\n")
	c.expect("554 5.6.0")
}

func TestPartialFailureSMTP(t *testing.T) {
	ts := startServer(t, Limits{}, nil, false)
	ts.be.failFor = map[string]error{"c@example.com": errors.New("disk full")}
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	c.cmd("MAIL FROM:<a@sender.example>", "250 ")
	c.cmd("RCPT TO:<b@example.com>", "250 ")
	c.cmd("RCPT TO:<c@example.com>", "250 ")
	c.cmd("DATA", "354 ")
	c.send("Subject: x\r\n\r\nx\r\n.\r\n")
	// The internal error text must not leak to the client.
	if r := c.expect("451 4.3.0"); strings.Contains(r, "disk") {
		t.Errorf("reply leaks detail: %q", r)
	}
}

func TestLMTPPerRecipient(t *testing.T) {
	ts := startServer(t, Limits{}, nil, true)
	ts.be.failFor = map[string]error{
		"b@example.com": errors.New("disk full"),
		"c@example.com": &smtp.SMTPError{Code: 552, EnhancedCode: smtp.EnhancedCode{5, 2, 2}, Message: "Mailbox full"},
	}
	c := dialRaw(t, "unix", ts.lmtp)
	c.expect("220 ")
	c.cmd("EHLO postfix.example", "500 ")
	c.cmd("LHLO postfix.example", "250 ")
	c.cmd("MAIL FROM:<a@sender.example>", "250 ")
	c.cmd("RCPT TO:<a@example.com>", "250 ")
	c.cmd("RCPT TO:<b@example.com>", "250 ")
	c.cmd("RCPT TO:<x@foreign.example>", "550 5.7.1")
	c.cmd("RCPT TO:<c@example.com>", "250 ")
	c.cmd("DATA", "354 ")
	c.send("Subject: lmtp\r\n\r\nhello\r\n.\r\n")
	c.expect("250 ")
	c.expect("451 4.3.0")
	c.expect("552 5.2.2")
	c.cmd("QUIT", "221 ")
	got := ts.be.got()
	if len(got) != 1 || got[0].env.RemoteIP != nil || !strings.Contains(string(got[0].raw), "with LMTP id") {
		t.Fatalf("deliveries %+v", got)
	}
	if b := body(t, got[0].raw); b != "Subject: lmtp\r\n\r\nhello\r\n" {
		t.Errorf("body %q", b)
	}
}

func TestShutdownWaitsForSession(t *testing.T) {
	ts := startServer(t, Limits{}, nil, false)
	ts.be.started = make(chan struct{}, 1)
	ts.be.release = make(chan struct{})
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	c.pipelineEnvelope()
	c.send("Subject: s\r\n\r\nx\r\n.\r\n")
	testwait.Recv(t, "Deliver to begin", ts.be.started) // Shutdown begins while Deliver runs
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testwait.Timeout)
		defer cancel()
		done <- ts.Shutdown(ctx)
	}()
	testwait.For(t, "the shutdown to begin", func() bool {
		ts.lmu.Lock()
		defer ts.lmu.Unlock()
		return ts.closing
	})
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned while a session was delivering: %v", err)
	default:
	}
	close(ts.be.release)
	c.expect("250 ")
	c.cmd("QUIT", "221 ")
	if err := testwait.Recv(t, "Shutdown to return once the session ended", done); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if _, err := net.Dial("tcp", ts.addr); err == nil {
		t.Error("still accepting after Shutdown")
	}
}

// A listener handed to Serve after Shutdown began (a goroutine that had not
// yet run when the daemon was told to stop) is closed and not served: before,
// go-smtp registered it after its Shutdown had closed the others, and Serve
// accepted on it forever.
func TestServeAfterShutdownReturns(t *testing.T) {
	s := NewServer(Config{Hostname: "mx.mailctl.test", Logger: quietLogger(t)}, &fakeBackend{domains: []string{"example.com"}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s.Shutdown(ctx)
	for _, serve := range []func(net.Listener) error{s.ServeSMTP, s.ServeLMTP} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- serve(l) }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve after shutdown: %v", err)
			}
		case <-time.After(10 * time.Second):
			l.Close()
			t.Fatal("serve after shutdown is still accepting")
		}
		if c, err := net.Dial("tcp", l.Addr().String()); err == nil {
			c.Close()
			t.Error("the listener handed to serve after shutdown still accepts")
		}
	}
}

// TestClientResetIsNotAWarning: a client that resets the connection (a port
// probe, a scanner) leaves no WARN line: that level is for what the
// operator should look at. The session's INFO line still records it.
func TestClientResetIsNotAWarning(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logs.Write(p) })
	ts := startServer(t, Limits{}, nil, false, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	for range 3 {
		c, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		r := bufio.NewReader(c)
		if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "220 ") {
			t.Fatalf("greeting %q %v", line, err)
		}
		// After the EHLO reply the server waits in a read, which the
		// reset ends with ECONNRESET.
		c.Write([]byte("EHLO probe.test\r\n"))
		for line := ""; !strings.HasPrefix(line, "250 "); {
			var err error
			if line, err = r.ReadString('\n'); err != nil {
				t.Fatal(err)
			}
		}
		c.(*net.TCPConn).SetLinger(0) // close with a reset
		c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ts.Shutdown(ctx) // every session's lines are out once it returns
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), "level=WARN") || strings.Count(logs.String(), "connection closed") != 3 {
		t.Fatalf("three reset sessions logged:\n%s\nwant three INFO \"connection closed\" lines and no WARN", logs.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// Envelope addresses with control characters, line separators or spaces at
// either end (inside the brackets, or in a quoted local part) are refused
// before routing: they would be stored as delivered_to and shown to the
// mailbox's reader. So is one that starts with a dash, which a program
// taking addresses as arguments reads as an option.
func TestEnvelopeAddressesWithControlsRefused(t *testing.T) {
	ts := startServer(t, Limits{MaxErrors: 100}, nil, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	for _, a := range []string{"a\x1b@sender.example", `"a` + "\x07" + `b"@sender.example`, "a@sender.example\r", "a@sender.example\u2028",
		"-oQ/tmp/x@sender.example", `"-f"@sender.example`} {
		c.send("MAIL FROM:<" + a + ">\r\n")
		if rep := c.reply(); !strings.HasPrefix(rep, "5") {
			t.Errorf("MAIL FROM:<%q>: %q, want a refusal", a, rep)
		}
	}
	c.cmd("MAIL FROM:<a@sender.example>", "250 ")
	for _, r := range []string{"c@mailctl.test\r", "\rc@mailctl.test", "c@mailctl.test\v", "c@mailctl.test\f", "c@mailctl.test\u0085",
		"c@mailctl.test\u2028", `"c+` + "\x1b]0;pwned\x07" + `"@mailctl.test`, " c@mailctl.test",
		"-c@mailctl.test", `"-c"@mailctl.test`} {
		c.send("RCPT TO:<" + r + ">\r\n")
		if rep := c.reply(); !strings.HasPrefix(rep, "5") {
			t.Errorf("RCPT TO:<%q>: %q, want a refusal", r, rep)
		}
	}
	c.cmd(`RCPT TO:<"c+a tag"@mailctl.test>`, "250 ")
	c.cmd("DATA", "354 ")
	c.send("Subject: p\r\n\r\nx\r\n.\r\n")
	c.expect("250 ")
	got := ts.be.got()
	if len(got) != 1 || len(got[0].env.Rcpts) != 1 || got[0].env.Rcpts[0] != "c+a tag@mailctl.test" {
		t.Fatalf("deliveries %+v", got)
	}
}

// go-smtp refuses RCPT TO:<postmaster> without a domain itself (docs/go-smtp.md,
// point 7); postmaster@ our domain is an address like any other. When this
// fails, go-smtp hands the bare name on: route it to the postmaster mailbox.
func TestUnqualifiedPostmaster(t *testing.T) {
	ts := startServer(t, Limits{}, nil, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	c.cmd("MAIL FROM:<a@sender.example>", "250 ")
	c.cmd("RCPT TO:<postmaster>", "501 5.5.2")
	c.cmd("RCPT TO:<Postmaster@example.com>", "250 ")
}

// Shutdown reports ctx's end only when it cut sessions: with none open it
// returns nil however late it is (go-smtp's own Shutdown may then return
// either), and with one held past ctx it says so.
func TestShutdownReportsOnlyCutSessions(t *testing.T) {
	for range 20 {
		s := NewServer(Config{Hostname: "mx.mailctl.test", Logger: quietLogger(t)}, &fakeBackend{domains: []string{"example.com"}})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown with no session open: %v", err)
		}
	}

	ts := startServer(t, Limits{}, nil, false)
	ts.be.started = make(chan struct{}, 1)
	ts.be.release = make(chan struct{})
	defer close(ts.be.release)
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	c.pipelineEnvelope()
	c.send("Subject: s\r\n\r\nx\r\n.\r\n")
	testwait.Recv(t, "Deliver to begin", ts.be.started)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ts.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown that cut a delivering session: %v, want %v", err, context.Canceled)
	}
}
