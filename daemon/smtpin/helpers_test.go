package smtpin

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/mailctl/mailctl/internal/testcert"
	"github.com/mailctl/mailctl/internal/testwait"
)

// fakeBackend accepts recipients at its domains and records deliveries.
type fakeBackend struct {
	domains []string
	failFor map[string]error // per-recipient Deliver failures
	started chan struct{}    // when set, Deliver sends on it as it starts
	release chan struct{}    // when set, Deliver then waits for it to close

	mu         sync.Mutex
	deliveries []delivery
}

type delivery struct {
	env     Envelope
	raw     []byte
	trace   int  // bytes of our Received header
	spooled bool // the message came in a Spool
	// headroom: the message came in memory with Headroom bytes of room
	// right before it in the same array.
	headroom bool
}

func (f *fakeBackend) CheckRecipient(_ context.Context, rcpt string) error {
	at := strings.LastIndexByte(rcpt, '@')
	if at < 0 {
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 3}, Message: "Bad address"}
	}
	dom := strings.ToLower(rcpt[at+1:])
	for _, d := range f.domains {
		if dom == d {
			if strings.HasPrefix(strings.ToLower(rcpt), "nobody@") {
				return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "No such user"}
			}
			return nil
		}
	}
	return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 7, 1}, Message: "Relaying denied"}
}

func (f *fakeBackend) Deliver(_ context.Context, env Envelope, msg *Message) []error {
	raw, err := io.ReadAll(msg.Open())
	if err != nil || int64(len(raw)) != msg.Size() {
		panic(fmt.Sprintf("reading the message back: %d of %d bytes, %v", len(raw), msg.Size(), err))
	}
	if f.started != nil {
		f.started <- struct{}{}
	}
	if f.release != nil {
		<-f.release
	}
	errs := make([]error, len(env.Rcpts))
	for i, r := range env.Rcpts {
		errs[i] = f.failFor[r]
	}
	f.mu.Lock()
	h, b := msg.Headroom, msg.Bytes()
	headroom := len(h) == Headroom && cap(h) >= len(h)+len(b) && len(b) > 0 && &h[:len(h)+1][len(h)] == &b[0]
	f.deliveries = append(f.deliveries, delivery{env: env, raw: raw, trace: msg.Trace, spooled: msg.Spool() != nil, headroom: headroom})
	f.mu.Unlock()
	return errs
}

func (f *fakeBackend) got() []delivery {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]delivery(nil), f.deliveries...)
}

func (f *fakeBackend) reset() {
	f.mu.Lock()
	f.deliveries = nil
	f.mu.Unlock()
}

// body returns a delivered message without our Received header.
func body(t testing.TB, raw []byte) string {
	t.Helper()
	s := string(raw)
	if !strings.HasPrefix(s, "Received: from ") {
		t.Fatalf("delivery does not start with our Received header: %q", s[:min(len(s), 80)])
	}
	// Our header is three lines: "Received: from", "\tby", "\t<date>".
	for i := 0; i < 3; i++ {
		s = s[strings.Index(s, "\r\n")+2:]
	}
	return s
}

type testServer struct {
	*Server
	be   *fakeBackend
	addr string
	lmtp string // unix socket path when started
}

func quietLogger(t testing.TB) *slog.Logger {
	if os.Getenv("SMTPIN_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startServer runs SMTP on 127.0.0.1:0 and, when withLMTP, LMTP on a unix
// socket in a temp dir.
func startServer(t testing.TB, lim Limits, tlsCfg *tls.Config, withLMTP bool, opts ...func(*Config)) *testServer {
	t.Helper()
	be := &fakeBackend{domains: []string{"example.com", "mailctl.test", "bücher.example"}}
	cfg := Config{Hostname: "mx.mailctl.test", Limits: lim, TLS: tlsCfg, Logger: quietLogger(t)}
	for _, o := range opts {
		o(&cfg)
	}
	s := NewServer(cfg, be)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: s, be: be, addr: l.Addr().String()}
	done := make(chan struct{}, 2)
	go func() { s.ServeSMTP(l); done <- struct{}{} }()
	n := 1
	if withLMTP {
		ts.lmtp = filepath.Join(t.TempDir(), "lmtp.sock")
		ul, err := net.Listen("unix", ts.lmtp)
		if err != nil {
			t.Fatal(err)
		}
		n++
		go func() { s.ServeLMTP(ul); done <- struct{}{} }()
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		for i := 0; i < n; i++ {
			testwait.Recv(t, "the LMTP listeners to stop serving after Shutdown", done)
		}
	})
	return ts
}

// xforwardFrom lets the given uids use XFORWARD on the LMTP socket.
func xforwardFrom(uids ...uint32) func(*Config) {
	return func(c *Config) { c.XForwardUIDs = uids }
}

// rawConn is a line-oriented test client that writes exact bytes.
type rawConn struct {
	t testing.TB
	c net.Conn
	r *bufio.Reader
}

func dialRaw(t testing.TB, network, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawConn{t: t, c: c, r: bufio.NewReader(c)}
}

func (rc *rawConn) send(s string) {
	rc.t.Helper()
	if _, err := io.WriteString(rc.c, s); err != nil {
		rc.t.Fatalf("write: %v", err)
	}
}

// reply reads one (possibly multi-line) reply and returns it joined by \n.
func (rc *rawConn) reply() string {
	rc.t.Helper()
	var lines []string
	for {
		l, err := rc.r.ReadString('\n')
		if err != nil {
			if len(lines) == 0 && l == "" {
				return "EOF"
			}
			return strings.Join(append(lines, l), "\n")
		}
		l = strings.TrimRight(l, "\r\n")
		lines = append(lines, l)
		if len(l) < 4 || l[3] != '-' {
			return strings.Join(lines, "\n")
		}
	}
}

// expect reads a reply and checks its code prefix (e.g. "250", "550 5.7.1").
func (rc *rawConn) expect(prefix string) string {
	rc.t.Helper()
	r := rc.reply()
	last := r[strings.LastIndexByte(r, '\n')+1:]
	if !strings.HasPrefix(last, prefix) {
		rc.t.Fatalf("want reply %q, got %q", prefix, r)
	}
	return r
}

// cmd sends a line and checks the reply.
func (rc *rawConn) cmd(line, prefix string) string {
	rc.t.Helper()
	rc.send(line + "\r\n")
	return rc.expect(prefix)
}

// pipelineEnvelope sends MAIL, RCPT and DATA (envelope) in one write and
// wants them accepted: the message is to be sent next.
func (rc *rawConn) pipelineEnvelope() {
	rc.t.Helper()
	rc.send(envelope)
	rc.expect("250 ")
	rc.expect("250 ")
	rc.expect("354 ")
}

// transaction sends one message from one sender to one recipient, the
// message (headers and body, CRLF lines) dot-terminated by it, and wants
// it accepted.
func (rc *rawConn) transaction(from, rcpt, msg string) {
	rc.t.Helper()
	rc.cmd("MAIL FROM:<"+from+">", "250 ")
	rc.cmd("RCPT TO:<"+rcpt+">", "250 ")
	rc.cmd("DATA", "354 ")
	rc.send(msg + ".\r\n")
	rc.expect("250 ")
}

// hello reads the greeting and sends EHLO.
func (rc *rawConn) hello() {
	rc.t.Helper()
	rc.expect("220 ")
	rc.cmd("EHLO client.example", "250 ")
}

// serverTLS is a throwaway certificate for STARTTLS tests.
func serverTLS(t testing.TB) *tls.Config {
	t.Helper()
	cert, _ := testcert.New(t, "mx.mailctl.test", "localhost", "127.0.0.1")
	return &tls.Config{Certificates: []tls.Certificate{cert}}
}
