package outbound

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/outbound/dkim"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/daemon/outbound/remote"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/fakemx"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

func ptrTo[T any](v T) *T { return &v }

func defaultPolicy() config.SendPolicy { return config.Default().Send }

// testKeys generates one Ed25519 and one RSA key (RSA generation is slow, so
// the pair is made once per test binary).
var (
	keysOnce sync.Once
	keysDir  string
	keysErr  error
	keysVal  []*dkim.Key
)

func testKeys(t testing.TB) []*dkim.Key {
	t.Helper()
	keysOnce.Do(func() {
		keysDir, keysErr = os.MkdirTemp("", "outbound-dkim-")
		if keysErr != nil {
			return
		}
		if _, keysErr = dkim.GenerateKey(keysDir, "ed1", "ed25519"); keysErr != nil {
			return
		}
		if _, keysErr = dkim.GenerateKey(keysDir, "rsa1", "rsa"); keysErr != nil {
			return
		}
		keysVal, keysErr = dkim.LoadKeys(keysDir)
	})
	if keysErr != nil {
		t.Fatal(keysErr)
	}
	return keysVal
}

func TestMain(m *testing.M) {
	code := m.Run()
	if keysDir != "" {
		os.RemoveAll(keysDir)
	}
	os.Exit(code)
}

// txtRecords maps "<sel>._domainkey.<domain>" to the published value.
func txtRecords(domain string, keys []*dkim.Key) map[string]string {
	m := map[string]string{}
	for _, k := range keys {
		m[k.Selector+"._domainkey."+domain] = k.TXTValue()
	}
	return m
}

// mxWorld is a resolver, a dial map and a delivery client wired together.
type mxWorld struct {
	r  *resolver.Map
	dm *fakemx.DialMap
	d  *remote.Client
}

func newWorld(t testing.TB) *mxWorld {
	w := &mxWorld{r: &resolver.Map{}, dm: &fakemx.DialMap{}}
	w.d = &remote.Client{Resolver: w.r, Dial: w.dm.Dial, Hostname: "out.example.com", AllowPlaintext: true,
		ConnectTimeout: 2 * time.Second, TransactionTimeout: 10 * time.Second}
	t.Cleanup(w.d.Close)
	return w
}

// mx starts a fake MX reachable as ip:25 in the world.
func (w *mxWorld) mx(t testing.TB, ip string, tlsCfg ...*tls.Config) *fakemx.Server {
	var cfg *tls.Config
	if len(tlsCfg) > 0 {
		cfg = tlsCfg[0]
	}
	f := fakemx.New(t, ip, cfg)
	w.dm.Set(ip+":25", f.Addr)
	return f
}

// pipeline is a Service over a queue delivering through w, with rec's
// settings; it runs until the test ends.
func (w *mxWorld) pipeline(t testing.TB, rec *Recorder, svc *Service, opts queue.Options) *Service {
	t.Helper()
	q, err := queue.Open(t.TempDir(), w.d, rec, opts)
	if err != nil {
		t.Fatal(err)
	}
	svc.Sent, svc.Queue = rec, q
	if svc.Domain == nil {
		svc.Domain = func() string { return "example.com" }
	}
	runQueue(t, q)
	return svc
}

// runQueue runs q until the test ends.
func runQueue(t testing.TB, q *queue.Queue) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); testwait.Recv(t, "the queue to stop", done) })
}

// botStore is a store holding the mailbox bot, owned by the test's user,
// closed when the test ends.
func botStore(t testing.TB) *store.Store {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Create("bot", os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	return st
}

// memStore is an in-memory SentStore.
type memStore struct {
	mu sync.Mutex
	n  int
	// creates and updates count the sent copies written and rewritten.
	creates, updates int
	msgs             map[string]*store.Message // mailbox/id
	raw              map[string][]byte
	body             map[string]string
	// deferred are the copies CreateDeferred holds unwritten: as in the
	// store, the first read or update writes them, once.
	deferred map[string]bool
}

func newMemStore() *memStore {
	return &memStore{msgs: map[string]*store.Message{}, raw: map[string][]byte{}, body: map[string]string{}, deferred: map[string]bool{}}
}

// settle writes the deferred copy k, if it is one; s.mu is held.
func (s *memStore) settle(k string) bool {
	if !s.deferred[k] {
		return false
	}
	delete(s.deferred, k)
	s.creates++
	return true
}

func (s *memStore) Reserve(mailbox, folder string, m *store.Message) (string, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	id := store.NewID(m.Date, m.Subject) + "-" + string(rune('a'+s.n%26)) + strings.Repeat("x", s.n/26)
	return id, func() {}, nil
}

func (s *memStore) CreateUnsynced(mailbox, folder, id string, m *store.Message, body string, raw []byte, atts []store.AttachmentData) error {
	return s.CreateUnsyncedIn("", mailbox, folder, id, m, body, raw, atts)
}

// MailboxIdentity is the name: a memStore's mailboxes are never made again.
func (s *memStore) MailboxIdentity(name string) (string, error) { return name, nil }

func (s *memStore) CreateUnsyncedIn(in, mailbox, folder, id string, m *store.Message, body string, raw []byte, _ []store.AttachmentData) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in != "" && in != mailbox {
		return store.ErrNotFound
	}
	k := mailbox + "/" + folder + "/" + id
	if _, ok := s.msgs[k]; ok {
		return store.ErrExists
	}
	s.creates++
	c := *m
	c.ID, c.Mailbox = id, mailbox
	s.msgs[k], s.raw[k], s.body[k] = &c, raw, body
	return nil
}

func (s *memStore) CreateDeferredIn(in, mailbox, folder, id string, m *store.Message, body string, raw []byte, atts []store.AttachmentData, _ time.Duration) error {
	if err := s.CreateUnsyncedIn(in, mailbox, folder, id, m, body, raw, atts); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.creates--
	s.deferred[mailbox+"/"+folder+"/"+id] = true
	return nil
}

func (s *memStore) Has(mailbox, folder, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.msgs[mailbox+"/"+folder+"/"+id]
	return ok
}

func (s *memStore) Update(mailbox, folder, id string, fn func(*store.Message) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.msgs[mailbox+"/"+folder+"/"+id]
	if !ok {
		return fmt.Errorf("no %s: %w", id, store.ErrNotFound)
	}
	c := *m
	c.DeliveryDetails = append([]store.RecipientStatus(nil), m.DeliveryDetails...)
	if err := fn(&c); err != nil {
		return err
	}
	if !s.settle(mailbox + "/" + folder + "/" + id) {
		s.updates++
	}
	s.msgs[mailbox+"/"+folder+"/"+id] = &c
	return nil
}

func (s *memStore) UpdateUnsyncedIn(in, mailbox, folder, id string, fn func(*store.Message) error) error {
	if in != "" && in != mailbox {
		return store.ErrNotFound
	}
	return s.Update(mailbox, folder, id, fn)
}

func (s *memStore) Sync() error { return nil }

func (s *memStore) Get(mailbox, folder, id string) (*store.Message, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := mailbox + "/" + folder + "/" + id
	m, ok := s.msgs[k]
	if !ok {
		return nil, "", protocol.Errorf(protocol.CodeNotFound, "no %s", id)
	}
	s.settle(k)
	c := *m
	return &c, s.body[k], nil
}

func (s *memStore) Header(mailbox, folder, id string) (*store.Message, error) {
	m, _, err := s.Get(mailbox, folder, id)
	return m, err
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

// Version: the memory store holds no drafts.
func (s *memStore) Version(mailbox, folder, id string) (string, error) {
	return "", store.ErrNotFound
}

// DraftDigest: the memory store holds no drafts.
func (s *memStore) DraftDigest(mailbox, folder, id string) (string, error) {
	return "", store.ErrNotFound
}

func (s *memStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.msgs)
}

var _ SentStore = (*store.Store)(nil)
