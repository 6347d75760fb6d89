// Package fakemx is a test helper: an SMTP server on a loopback address whose
// answers a test sets, a dial map that routes "ip:25" to it, and self-signed
// certificates. It counts connections so tests can see sessions reused.
package fakemx

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// Received is one message the server accepted.
type Received struct {
	From  string
	Rcpts []string
	Data  []byte
	TLS   bool
	Helo  string
	User  string // authenticated user, relay only
	UTF8  bool   // MAIL FROM had SMTPUTF8
}

// Server is a go-smtp server whose answers tests set.
type Server struct {
	Addr string // host:port it listens on

	mu       sync.Mutex
	rcptErr  map[string]*smtp.SMTPError
	mailErr  *smtp.SMTPError
	dataErr  *smtp.SMTPError // non-nil: the end of DATA answers it (after the gate)
	msgs     []Received
	password string // non-empty: AUTH PLAIN required with user "relayuser"
	conns    int
	open     int
	maxOpen  int
	gate     chan struct{} // non-nil: DATA waits for a value
	waiting  int           // transactions held at the gate
	live     map[net.Conn]bool
}

// New starts a server on ip (port chosen by the system) until the test ends.
func New(t testing.TB, ip string, tlsCfg *tls.Config) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	return Serve(t, ln, tlsCfg)
}

// NewSMTPUTF8 is New for a server that offers SMTPUTF8 (RFC 6531).
func NewSMTPUTF8(t testing.TB, ip string, tlsCfg *tls.Config) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	return serve(t, ln, tlsCfg, nil, true)
}

// NewImplicit starts a server on ip that speaks TLS from the first byte
// (implicit TLS, as on port 465) with tlsCfg. Unlike Serve on a TLS
// listener, its sessions know they run over TLS, so AUTH works and
// Received.TLS is true.
func NewImplicit(t testing.TB, ip string, tlsCfg *tls.Config) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	return serve(t, ln, nil, tlsCfg, false)
}

// Serve serves on ln (a TLS listener for implicit TLS) until the test ends;
// tlsCfg, when set, is offered with STARTTLS.
func Serve(t testing.TB, ln net.Listener, tlsCfg *tls.Config) *Server {
	return serve(t, ln, tlsCfg, nil, false)
}

func serve(t testing.TB, ln net.Listener, tlsCfg, implicit *tls.Config, utf8 bool) *Server {
	f := &Server{Addr: ln.Addr().String(), rcptErr: map[string]*smtp.SMTPError{}, live: map[net.Conn]bool{}}
	s := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		// go-smtp makes a new session after STARTTLS: connections are
		// counted where they are accepted.
		return &session{f: f, c: c}, nil
	}))
	s.Domain = "fake.test"
	s.TLSConfig = tlsCfg
	s.EnableSMTPUTF8 = utf8
	s.ReadTimeout, s.WriteTimeout = 10*time.Second, 10*time.Second
	s.ErrorLog = discardLogger{}
	go s.Serve(&countingListener{Listener: ln, f: f, implicit: implicit})
	// Not s.Close: go-smtp's Close reads a connection field that a
	// STARTTLS in progress writes. Closing the listener and the TCP
	// connections underneath ends every handler as well.
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		live := make([]net.Conn, 0, len(f.live))
		for c := range f.live {
			live = append(live, c)
		}
		f.mu.Unlock()
		for _, c := range live {
			c.Close()
		}
	})
	return f
}

// countingListener counts the TCP connections and those open now, and
// with implicit set hands them on as TLS server connections.
type countingListener struct {
	net.Listener
	f        *Server
	implicit *tls.Config
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	f := l.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conns++
	f.open++
	f.maxOpen = max(f.maxOpen, f.open)
	cc := &countedConn{Conn: c, f: f}
	f.live[cc] = true
	if l.implicit != nil {
		return tls.Server(cc, l.implicit), nil
	}
	return cc, nil
}

type countedConn struct {
	net.Conn
	f    *Server
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.f.mu.Lock()
		c.f.open--
		delete(c.f.live, c)
		c.f.mu.Unlock()
	})
	return c.Conn.Close()
}

type discardLogger struct{}

func (discardLogger) Printf(string, ...interface{}) {}
func (discardLogger) Println(...interface{})        {}

// SetRcptErr makes RCPT TO:<rcpt> answer e (nil: accept again).
func (f *Server) SetRcptErr(rcpt string, e *smtp.SMTPError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e == nil {
		delete(f.rcptErr, rcpt)
	} else {
		f.rcptErr[rcpt] = e
	}
}

// SetMailErr makes MAIL FROM answer e (nil: accept).
func (f *Server) SetMailErr(e *smtp.SMTPError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mailErr = e
}

// SetDataErr makes the end of DATA answer e, once the gate (if any) lets
// the transaction go (nil: accept). A message so refused is not kept.
func (f *Server) SetDataErr(e *smtp.SMTPError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dataErr = e
}

// RequireAuth makes the server demand AUTH PLAIN as "relayuser" with password.
func (f *Server) RequireAuth(password string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.password = password
}

// Gate makes each DATA wait until a value is sent on the returned channel,
// so a test can hold transactions open and look at the connections.
func (f *Server) Gate() chan<- struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gate = make(chan struct{})
	return f.gate
}

// Messages returns what the server accepted so far.
func (f *Server) Messages() []Received {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Received(nil), f.msgs...)
}

// Conns is the number of connections accepted so far.
func (f *Server) Conns() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conns
}

// Waiting is the number of transactions held at the gate now.
func (f *Server) Waiting() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waiting
}

// Open is the number of connections open now; MaxOpen the most at once.
func (f *Server) Open() (now, most int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.open, f.maxOpen
}

type session struct {
	f     *Server
	c     *smtp.Conn
	from  string
	utf8  bool
	rcpts []string
	user  string
}

func (s *session) Reset()        { s.from, s.utf8, s.rcpts = "", false, nil }
func (s *session) Logout() error { return nil }
func (s *session) Mail(from string, opts *smtp.MailOptions) error {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if s.f.password != "" && s.user == "" {
		return smtp.ErrAuthRequired
	}
	if s.f.mailErr != nil {
		return s.f.mailErr
	}
	s.from, s.utf8 = from, opts != nil && opts.UTF8
	return nil
}
func (s *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if e := s.f.rcptErr[to]; e != nil {
		return e
	}
	s.rcpts = append(s.rcpts, to)
	return nil
}
func (s *session) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.f.mu.Lock()
	gate := s.f.gate
	s.f.mu.Unlock()
	if gate != nil {
		s.f.mu.Lock()
		s.f.waiting++
		s.f.mu.Unlock()
		<-gate
		s.f.mu.Lock()
		s.f.waiting--
		s.f.mu.Unlock()
	}
	_, isTLS := s.c.TLSConnectionState()
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if s.f.dataErr != nil {
		return s.f.dataErr
	}
	s.f.msgs = append(s.f.msgs, Received{From: s.from, Rcpts: s.rcpts, Data: b, TLS: isTLS, Helo: s.c.Hostname(), User: s.user, UTF8: s.utf8})
	return nil
}
func (s *session) AuthMechanisms() []string {
	if s.f.password == "" {
		return nil
	}
	return []string{sasl.Plain}
}
func (s *session) Auth(mech string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if user != "relayuser" || pass != s.f.password {
			return errors.New("bad credentials")
		}
		s.user = user
		return nil
	}), nil
}

// DialMap routes a deliverer's dials ("127.0.0.31:25") to the fake servers'
// real addresses; anything else is refused, like a host that is down.
type DialMap struct {
	mu sync.Mutex
	m  map[string]string
	n  int
}

// Set routes dials of from to to.
func (d *DialMap) Set(from, to string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]string{}
	}
	d.m[from] = to
}

// Dials is the number of dials made so far, refused ones included.
func (d *DialMap) Dials() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n
}

// Dial is the dial function to give the deliverer.
func (d *DialMap) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	real, ok := d.m[addr]
	d.n++
	d.mu.Unlock()
	if !ok {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, real)
}
