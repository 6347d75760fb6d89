package outbound

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// received is one message a fake MX accepted.
type received struct {
	From  string
	Rcpts []string
	Data  []byte
	TLS   bool
	Helo  string
	User  string // authenticated user, relay only
}

// fakeMX is a go-smtp server on a loopback address whose answers tests set.
type fakeMX struct {
	Addr string // host:port it listens on

	mu       sync.Mutex
	rcptErr  map[string]*smtp.SMTPError
	mailErr  *smtp.SMTPError
	msgs     []received
	password string // non-empty: AUTH PLAIN required with user "relayuser"
	conns    int
}

func newFakeMX(t testing.TB, ip string, tlsCfg *tls.Config) *fakeMX {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	f := &fakeMX{Addr: ln.Addr().String(), rcptErr: map[string]*smtp.SMTPError{}}
	s := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		f.mu.Lock()
		f.conns++
		f.mu.Unlock()
		return &fakeSession{f: f, c: c}, nil
	}))
	s.Domain = "fake.test"
	s.TLSConfig = tlsCfg
	s.ReadTimeout, s.WriteTimeout = 10*time.Second, 10*time.Second
	s.ErrorLog = discardLogger{}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return f
}

type discardLogger struct{}

func (discardLogger) Printf(string, ...interface{}) {}
func (discardLogger) Println(...interface{})        {}

func (f *fakeMX) setRcptErr(rcpt string, e *smtp.SMTPError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e == nil {
		delete(f.rcptErr, rcpt)
	} else {
		f.rcptErr[rcpt] = e
	}
}

func (f *fakeMX) messages() []received {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]received(nil), f.msgs...)
}

type fakeSession struct {
	f     *fakeMX
	c     *smtp.Conn
	from  string
	rcpts []string
	user  string
}

func (s *fakeSession) Reset()        { s.from, s.rcpts = "", nil }
func (s *fakeSession) Logout() error { return nil }
func (s *fakeSession) Mail(from string, _ *smtp.MailOptions) error {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if s.f.password != "" && s.user == "" {
		return smtp.ErrAuthRequired
	}
	if s.f.mailErr != nil {
		return s.f.mailErr
	}
	s.from = from
	return nil
}
func (s *fakeSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if e := s.f.rcptErr[to]; e != nil {
		return e
	}
	s.rcpts = append(s.rcpts, to)
	return nil
}
func (s *fakeSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	_, isTLS := s.c.TLSConnectionState()
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	s.f.msgs = append(s.f.msgs, received{From: s.from, Rcpts: s.rcpts, Data: b, TLS: isTLS, Helo: s.c.Hostname(), User: s.user})
	return nil
}
func (s *fakeSession) AuthMechanisms() []string {
	if s.f.password == "" {
		return nil
	}
	return []string{sasl.Plain}
}
func (s *fakeSession) Auth(mech string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if user != "relayuser" || pass != s.f.password {
			return errors.New("bad credentials")
		}
		s.user = user
		return nil
	}), nil
}

// dialMap routes the deliverer's dials ("127.0.0.31:25") to the fake
// servers' real addresses; anything else is refused, like a host that is down.
type dialMap struct {
	mu sync.Mutex
	m  map[string]string
}

func (d *dialMap) set(from, to string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]string{}
	}
	d.m[from] = to
}

func (d *dialMap) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	real, ok := d.m[addr]
	d.mu.Unlock()
	if !ok {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, real)
}

// testCert makes a CA-less self-signed certificate for hosts and a pool
// trusting it.
func testCert(t testing.TB, hosts ...string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: hosts[0]}, DNSNames: hosts,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }
func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// notes records Notifier calls.
type notes struct {
	mu      sync.Mutex
	updated []*Item
	settled chan *Item
}

func newNotes() *notes { return &notes{settled: make(chan *Item, 100)} }
func (n *notes) Updated(it *Item) {
	n.mu.Lock()
	n.updated = append(n.updated, it)
	n.mu.Unlock()
}
func (n *notes) Settled(it *Item) { n.settled <- it }

func (n *notes) waitSettled(t testing.TB) *Item {
	t.Helper()
	select {
	case it := <-n.settled:
		return it
	case <-time.After(10 * time.Second):
		t.Fatal("item never settled")
		return nil
	}
}

// memStore is an in-memory SentStore.
type memStore struct {
	mu   sync.Mutex
	n    int
	msgs map[string]*store.Message // mailbox/id
	raw  map[string][]byte
	body map[string]string
}

func newMemStore() *memStore {
	return &memStore{msgs: map[string]*store.Message{}, raw: map[string][]byte{}, body: map[string]string{}}
}

func (s *memStore) Deliver(mailbox, folder string, m *store.Message, body string, raw []byte, _ []store.AttachmentData) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	id := store.NewID(m.Date, m.Subject) + "-" + string(rune('a'+s.n%26)) + strings.Repeat("x", s.n/26)
	c := *m
	c.ID, c.Mailbox = id, mailbox
	k := mailbox + "/" + folder + "/" + id
	s.msgs[k], s.raw[k], s.body[k] = &c, raw, body
	return id, false, nil
}

func (s *memStore) Update(mailbox, folder, id string, fn func(*store.Message) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.msgs[mailbox+"/"+folder+"/"+id]
	if !ok {
		return protocol.Errorf(protocol.CodeNotFound, "no %s", id)
	}
	c := *m
	c.DeliveryDetails = append([]store.RecipientStatus(nil), m.DeliveryDetails...)
	if err := fn(&c); err != nil {
		return err
	}
	s.msgs[mailbox+"/"+folder+"/"+id] = &c
	return nil
}

func (s *memStore) Get(mailbox, folder, id string) (*store.Message, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := mailbox + "/" + folder + "/" + id
	m, ok := s.msgs[k]
	if !ok {
		return nil, "", protocol.Errorf(protocol.CodeNotFound, "no %s", id)
	}
	c := *m
	return &c, s.body[k], nil
}

func (s *memStore) FindByMessageID(mailbox, folder, mid string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, m := range s.msgs {
		if strings.HasPrefix(k, mailbox+"/"+folder+"/") && m.MessageID == mid {
			return m.ID, true
		}
	}
	return "", false
}

func (s *memStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.msgs)
}

var _ SentStore = (*store.Store)(nil)

// newResolver returns an empty resolver.Map.
func newResolver() *resolver.Map { return &resolver.Map{} }
