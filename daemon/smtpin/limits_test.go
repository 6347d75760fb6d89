package smtpin

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSizeLimit(t *testing.T) {
	const max = 1000
	ts := startServer(t, Limits{MaxMessageBytes: max}, serverTLS(t), false)
	msg := func(n int) string {
		s := "Subject: size\r\n\r\n"
		line := strings.Repeat("a", 48) + "\r\n"
		for len(s)+len(line) <= n {
			s += line
		}
		pad := n - len(s) - 2
		return s + strings.Repeat("b", pad) + "\r\n"
	}
	c := dialRaw(t, "tcp", ts.addr)
	c.expect("220 ")
	if ehlo := c.cmd("EHLO client.example", "250 "); !strings.Contains(ehlo, fmt.Sprintf("SIZE %d\n", max)) {
		t.Fatalf("EHLO does not advertise SIZE %d: %q", max, ehlo)
	}
	// The same after STARTTLS, where the reply is encrypted above the
	// connection the server wraps.
	c.cmd("STARTTLS", "220 ")
	tc := tls.Client(c.c, &tls.Config{InsecureSkipVerify: true})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	c.c, c.r = tc, bufio.NewReader(tc)
	if ehlo := c.cmd("EHLO client.example", "250 "); !strings.Contains(ehlo, fmt.Sprintf("SIZE %d\n", max)) {
		t.Fatalf("EHLO after STARTTLS does not advertise SIZE %d: %q", max, ehlo)
	}
	// DATA takes one byte less than the limit (go-smtp's reader refuses a
	// message of exactly its limit; docs/go-smtp.md, point 5).
	for _, tt := range []struct {
		size  int
		reply string
	}{{max - 1, "250 "}, {max, "552 5.3.4"}, {max + 1, "552 5.3.4"}, {max - 2, "250 "}, {10 * max, "552 5.3.4"}} {
		m := msg(tt.size)
		if len(m) != tt.size {
			t.Fatalf("test message has %d bytes, want %d", len(m), tt.size)
		}
		c.pipelineEnvelope()
		c.send(m + ".\r\n")
		c.expect(tt.reply)
	}
	// BDAT and a declared SIZE take exactly the limit.
	c.cmd(fmt.Sprintf("MAIL FROM:<a@b.example> SIZE=%d", max), "250 ")
	c.cmd("RCPT TO:<b@example.com>", "250 ")
	c.send(fmt.Sprintf("BDAT %d LAST\r\n%s", max, msg(max)))
	c.expect("250 ")
	// A declared SIZE over the limit is refused at MAIL.
	c.cmd(fmt.Sprintf("MAIL FROM:<a@b.example> SIZE=%d", max+1), "552 5.3.4")
	if n := len(ts.be.got()); n != 3 {
		t.Errorf("%d deliveries, want 3", n)
	}
}

// The recipients past the limit get 452, which tells the client to send
// them in a later transaction (RFC 5321 §4.5.3.1.10); they are not refused
// commands: a client that pipelines many more than the limit still gets its
// transaction through, not a 421 that would lose it at every retry.
func TestTooManyRecipients(t *testing.T) {
	ts := startServer(t, Limits{MaxErrors: 3}, nil, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	c.cmd("MAIL FROM:<a@sender.example>", "250 ")
	for i := 1; i <= 100; i++ {
		c.cmd(fmt.Sprintf("RCPT TO:<user%d@example.com>", i), "250 ")
	}
	for i := 101; i <= 110; i++ {
		c.cmd(fmt.Sprintf("RCPT TO:<user%d@example.com>", i), "452 4.5.3")
	}
	c.cmd("DATA", "354 ")
	c.send("Subject: many\r\n\r\nx\r\n.\r\n")
	c.expect("250 ")
	if got := ts.be.got(); len(got) != 1 || len(got[0].env.Rcpts) != 100 {
		t.Errorf("want one delivery to 100 recipients")
	}
}

func TestLongLine(t *testing.T) {
	ts := startServer(t, Limits{MaxLineLength: 1000}, nil, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	c.send("NOOP " + strings.Repeat("x", 2000) + "\r\n")
	c.expect("500 5.4.0")
	if r := c.reply(); r != "EOF" {
		t.Errorf("connection still open after long line: %q", r)
	}

	c = dialRaw(t, "tcp", ts.addr)
	c.hello()
	c.pipelineEnvelope()
	c.send("Subject: long\r\n\r\n" + strings.Repeat("y", 2000) + "\r\n.\r\n")
	c.expect("500 5.4.0")
	if len(ts.be.got()) != 0 {
		t.Error("message with an over-long line was delivered")
	}
}

func TestSessionDeadlineIgnoresNOOP(t *testing.T) {
	ts := startServer(t, Limits{SessionTimeout: 400 * time.Millisecond, CommandTimeout: 10 * time.Second}, nil, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	start := time.Now()
	for time.Since(start) < 5*time.Second {
		if _, err := io.WriteString(c.c, "NOOP\r\n"); err != nil {
			break
		}
		if r := c.reply(); !strings.HasPrefix(r, "250") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("NOOP loop kept the session open for %v, limit 400ms", el)
	}
}

func TestCommandTimeout(t *testing.T) {
	ts := startServer(t, Limits{CommandTimeout: 200 * time.Millisecond}, nil, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.expect("220 ")
	c.expect("421 4.4.2")
}

func TestMaxErrors(t *testing.T) {
	ts := startServer(t, Limits{MaxErrors: 3}, nil, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	c.cmd("MAIL FROM:<a@sender.example>", "250 ")
	c.cmd("RCPT TO:<nobody@example.com>", "550 5.1.1")
	c.cmd("RCPT TO:<x@foreign.example>", "550 5.7.1")
	c.cmd("RCPT TO:<y@foreign.example>", "421 4.7.0")
	if r := c.reply(); r != "EOF" {
		t.Errorf("connection open after too many errors: %q", r)
	}
}

func TestConnectionLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 500 connections")
	}
	const n, max = 500, 300
	ts := startServer(t, Limits{MaxConnections: max, MaxConnectionsPerIP: n}, nil, false)
	var held, refused, other int
	var mu sync.Mutex
	var wg sync.WaitGroup
	conns := make(chan net.Conn, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", ts.addr, 10*time.Second)
			if err != nil {
				mu.Lock()
				other++
				mu.Unlock()
				return
			}
			conns <- c
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			buf := make([]byte, 128)
			k, _ := io.ReadAtLeast(c, buf, 4)
			mu.Lock()
			defer mu.Unlock()
			switch s := string(buf[:k]); {
			case strings.HasPrefix(s, "220 "):
				held++
			case strings.HasPrefix(s, "421 4.7.0"):
				refused++
			default:
				other++
			}
		}()
	}
	wg.Wait()
	close(conns)
	for c := range conns {
		c.Close()
	}
	if held != max || refused != n-max || other != 0 {
		t.Errorf("held %d refused %d other %d; want %d/%d/0", held, refused, other, max, n-max)
	}

	// Slots come back when connections close.
	deadline := time.Now().Add(5 * time.Second)
	for {
		ts.mu.Lock()
		total := ts.total
		ts.mu.Unlock()
		if total == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connection slots still taken", total)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c := dialRaw(t, "tcp", ts.addr)
	c.expect("220 ")
}

func TestPerIPLimit(t *testing.T) {
	ts := startServer(t, Limits{MaxConnectionsPerIP: 3}, nil, false)
	for i := 0; i < 3; i++ {
		dialRaw(t, "tcp", ts.addr).expect("220 ")
	}
	c := dialRaw(t, "tcp", ts.addr)
	c.expect("421 4.7.0")
	if r := c.reply(); r != "EOF" {
		t.Errorf("refused connection still open: %q", r)
	}
}

// An IPv6 client can use any address of its /64: the per-IP cap counts the
// network, or one client could take every slot. IPv4 addresses, mapped or
// not, count one by one.
func TestPerIPLimitCountsIPv6Networks(t *testing.T) {
	s := NewServer(Config{Hostname: "mx.mailctl.test", Limits: Limits{MaxConnectionsPerIP: 2}, Logger: quietLogger(t)}, &fakeBackend{})
	for _, tt := range []struct {
		ip, reason string
	}{
		{"2001:db8:1:2::1", ""},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", ""},
		{"2001:db8:1:2:ffff::9", "too many connections from this IP"},
		{"2001:db8:1:3::1", ""},
		{"192.0.2.1", ""},
		{"::ffff:192.0.2.1", ""},
		{"192.0.2.1", "too many connections from this IP"},
		{"192.0.2.2", ""},
	} {
		if got := s.acquire(capKey(net.ParseIP(tt.ip))); got != tt.reason {
			t.Errorf("acquire(%s) = %q, want %q", tt.ip, got, tt.reason)
		}
	}
	s.release(capKey(net.ParseIP("2001:db8:1:2::1")))
	if got := s.acquire(capKey(net.ParseIP("2001:db8:1:2::77"))); got != "" {
		t.Errorf("after a release in the /64: %q", got)
	}
}

// TestSlotFreeOnceClientSeesClose: a client that read the server's close
// after QUIT can connect again at once, even at a limit of one connection.
// The slot is released before the socket closes, so there is no window in
// which a gone session still counts.
func TestSlotFreeOnceClientSeesClose(t *testing.T) {
	ts := startServer(t, Limits{MaxConnections: 1, MaxConnectionsPerIP: 1}, nil, false)
	for i := range 50 {
		c := dialRaw(t, "tcp", ts.addr)
		c.expect("220 ")
		c.cmd("QUIT", "221 ")
		if r := c.reply(); r != "EOF" {
			t.Fatalf("round %d: after 221, got %q, want the server's close", i, r)
		}
		c.c.Close()
	}
	dialRaw(t, "tcp", ts.addr).expect("220 ")
}

func TestInFlightMemoryBudget(t *testing.T) {
	ts := startServer(t, Limits{MaxInFlightBytes: 600 << 10}, nil, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	big := "Subject: big\r\n\r\n" + strings.Repeat(strings.Repeat("z", 98)+"\r\n", 4000)
	c.pipelineEnvelope()
	c.send(big + ".\r\n")
	c.expect("452 4.3.1")
	if n := ts.inFlight.Load(); n != 0 {
		t.Errorf("in-flight bytes after refusal: %d", n)
	}
	c.pipelineEnvelope()
	c.send("Subject: small\r\n\r\nok\r\n.\r\n")
	c.expect("250 ")
	if n := ts.inFlight.Load(); n != 0 {
		t.Errorf("in-flight bytes after delivery: %d", n)
	}
}

// TestLMTPGivesItsBudgetBackBeforeItsReplies: LMTP answers each recipient
// while the message is still being handled; its share of the in-flight
// budget (and its spool) went back only after the last reply, so a front
// MTA that sent its next message on reading the replies could find the
// budget still taken, and be refused 452 for memory no message held.
func TestLMTPGivesItsBudgetBackBeforeItsReplies(t *testing.T) {
	ts := startServer(t, Limits{}, nil, true)
	c := dialRaw(t, "unix", ts.lmtp)
	c.expect("220 ")
	c.cmd("LHLO front.example", "250 ")
	msg := "Subject: lmtp budget\r\n\r\n" + strings.Repeat(strings.Repeat("l", 70)+"\r\n", 3000)
	for i := range 3 {
		c.cmd("MAIL FROM:<alice@sender.example>", "250 ")
		c.cmd("RCPT TO:<a@example.com>", "250 ")
		c.cmd("RCPT TO:<b@example.com>", "250 ")
		c.cmd("DATA", "354 ")
		c.send(msg + ".\r\n")
		c.expect("250 ")
		c.expect("250 ")
		if n := ts.inFlight.Load(); n != 0 {
			t.Fatalf("message %d: in-flight bytes once every recipient was answered: %d", i, n)
		}
	}
}

// The size MAIL FROM declares only sizes the array the message is read into:
// whether it is exact, too small (more comes than declared) or too large,
// the message stored is the message sent, and the in-flight budget is given
// back.
func TestDeclaredSizeIsOnlyAHint(t *testing.T) {
	ts := startServer(t, Limits{}, nil, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	msg := "Subject: sized\r\n\r\n" + strings.Repeat(strings.Repeat("s", 70)+"\r\n", 3000)
	for i, declared := range []int{len(msg), 100, 10 * len(msg), len(msg) - 1} {
		c.cmd(fmt.Sprintf("MAIL FROM:<alice@sender.example> SIZE=%d", declared), "250 ")
		c.cmd("RCPT TO:<bob@example.com>", "250 ")
		c.cmd("DATA", "354 ")
		c.send(msg + ".\r\n")
		c.expect("250 ")
		got := ts.be.got()
		if len(got) != i+1 {
			t.Fatalf("SIZE=%d: %d deliveries", declared, len(got))
		}
		if b := body(t, got[i].raw); b != msg {
			t.Fatalf("SIZE=%d: stored %d bytes, sent %d", declared, len(b), len(msg))
		}
		if n := ts.inFlight.Load(); n != 0 {
			t.Fatalf("SIZE=%d: in-flight bytes after delivery: %d", declared, n)
		}
	}
}

// TestLongLineLimitInData: go-smtp applies the line limit to DATA as to
// commands, to the byte: a line of limit-2 characters and its CRLF passes,
// one more is refused and ends the connection; bare LFs end lines (the
// message is refused for them, not for its length).
func TestLongLineLimitInData(t *testing.T) {
	const limit = 1000
	ts := startServer(t, Limits{MaxLineLength: limit}, nil, false)
	send := func(c *rawConn, body, want string) {
		t.Helper()
		c.pipelineEnvelope()
		c.send(body + "\r\n.\r\n")
		c.expect(want)
	}
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	send(c, "Subject: at the limit\r\n\r\n"+strings.Repeat("y", limit-2), "250 ")
	send(c, "Subject: bare LFs\r\n\r\n"+strings.Repeat("a\n", 3*limit), "554 ")
	c.send("NOOP " + strings.Repeat("x", 2*limit) + "\r\n")
	c.expect("500 5.4.0")

	// An over-long command pipelined behind the message: go-smtp counts
	// lines as bytes arrive, so when both come in one read the message is
	// refused with them (docs/go-smtp.md). The command never runs, and the
	// connection ends.
	c = dialRaw(t, "tcp", ts.addr)
	c.hello()
	c.pipelineEnvelope()
	c.send("Subject: pipelined\r\n\r\nshort\r\n.\r\nMAIL FROM:<" + strings.Repeat("e", 2*limit) + "@attacker.example>\r\nRCPT TO:<victim@example.com>\r\nDATA\r\n")
	c.expect("500 5.4.0")
	if r := c.reply(); r != "EOF" {
		t.Errorf("after a pipelined over-long command: %q, want the connection closed", r)
	}

	c = dialRaw(t, "tcp", ts.addr)
	c.hello()
	// What follows the end of this DATA must never run as commands.
	smuggled := "\r\n.\r\nMAIL FROM:<evil@attacker.example>\r\nRCPT TO:<victim@example.com>\r\nDATA\r\nSubject: smuggled\r\n\r\nx"
	send(c, "Subject: one over\r\n\r\n"+strings.Repeat("y", limit-1)+smuggled, "500 5.4.0")
	if r := c.reply(); r != "EOF" {
		t.Errorf("connection still open after a long line in DATA: %q", r)
	}
	if got := ts.be.got(); len(got) != 1 {
		t.Errorf("%d messages delivered, want the one at the limit only", len(got))
	}
}
