// Package control is the daemon's control-socket API: the Unix socket
// server, its per-uid connection and memory limits, the dispatch of
// requests, the one authorization table and gate, the watch events, and the
// handlers of every verb (one file per object: mailboxes, messages, drafts,
// the queue, hooks, labels, sending, status).
//
// It acts on the store and the registry directly and asks the rest of the
// daemon for everything else through Backend, so that the daemon package
// keeps only the wiring: what runs, with which config, and how mail flows.
package control

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/outbound"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/internal/logsum"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// Backend is what the control API asks of the rest of the daemon.
type Backend interface {
	// Config is the configuration in force now (a reload replaces it).
	Config() *config.Config
	// RestartPending names the config keys changed in the file that the
	// running daemon applies only at its next start.
	RestartPending() []string
	// Mailbox finds a mailbox by name, declared or registered; Mailboxes
	// lists them all, sorted by name.
	Mailbox(name string) (*registry.Mailbox, bool)
	Mailboxes() []*registry.Mailbox
	// DisplayName is the name a mailbox's outgoing From carries ("" for
	// none); TrustedSenders its effective trusted-sender patterns and where
	// they are set ("config", "mailbox" or "global").
	DisplayName(name string) string
	TrustedSenders(name string) ([]string, string)
	// Usage is what a mailbox's files take against its quota.
	Usage(name string) protocol.MailboxUsage
	// Prune applies the retention policy to every mailbox, or one ("" for
	// all), or says what it would do.
	Prune(mailbox string, dryRun bool) (protocol.PruneResult, error)
	// Hooks lists every hook, declared and registered, with its last run.
	Hooks() []protocol.Hook
	// HookRuns lists up to limit recorded hook runs that keep accepts,
	// newest first.
	HookRuns(keep func(protocol.HookRun) bool, limit int) []protocol.HookRun
	// Outbound is the send pipeline; nil when this daemon cannot send.
	Outbound() Outbound
	// Health runs the host checks `mailctl doctor` shows.
	Health(ctx context.Context) []protocol.Finding
	// Listeners names the inbound listeners that are up.
	Listeners() []string
	// LastReload is the outcome of the last config reload, nil before
	// the first.
	LastReload() *protocol.ReloadStatus
}

// Outbound is the send pipeline as the control API uses it.
type Outbound interface {
	Send(ctx context.Context, req outbound.SendRequest) (protocol.SendResult, error)
	// Status reads the sent copy's frontmatter with header, which charges
	// the caller.
	Status(mailbox, id string, header outbound.HeaderReader) (protocol.SendResult, error)
	// RateUsage is how much of its send rate limits a mailbox, owned by
	// uid, has used.
	RateUsage(mailbox string, uid uint32, p config.SendPolicy) []protocol.SendRate
	Queue() Queue
}

// Queue is the outbound queue as the control API steers it; *queue.Queue
// is one.
type Queue interface {
	List() []*queue.Item
	Get(id string) (*queue.Item, error)
	Retry(id string) error
	Drop(id string) error
	// DropEventually drops an item now, or when the attempt delivering
	// it right now ends.
	DropEventually(id string) error
	Approve(id string) error
	Reschedule(id string, at time.Time) error
	FlushMany(ids []string, m queue.Match) protocol.QueueBulkResult
	DropMany(ids []string, m queue.Match) protocol.QueueBulkResult
}

var _ Queue = (*queue.Queue)(nil)

// Options are a Server's parts and settings.
type Options struct {
	Version string
	Dev     bool // a `mailctl dev` instance
	// Capture is the mailbox that takes outbound mail instead of the
	// recipients' servers (`mailctl dev` without --deliver).
	Capture string
	Logger  *slog.Logger
	Now     func() time.Time
	Started time.Time
	Store   *store.Store
	// Registry holds the mailboxes and hooks created over the socket.
	Registry *registry.Registry
	Backend  Backend
	// Requests counts requests by verb and result code.
	Requests *prometheus.CounterVec
	// LogSum folds repeated log lines (identical requests, refusals).
	LogSum *logsum.Summarizer
}

// Server is the control socket and the API behind it.
type Server struct {
	opts   Options
	b      Backend
	store  *store.Store
	reg    *registry.Registry
	log    *slog.Logger
	events *hub

	// mu serializes the creation and deletion of mailboxes and hooks.
	mu sync.Mutex
	// names holds mailbox names still while requests act on them and
	// inbound deliveries store into them (HoldNames); a name's lock is
	// always taken before mu.
	names nameLocks
	// turns paces users' requests (turns.go).
	turns turns
	// health shares the host checks among users' status calls (status.go).
	health healthCache
	// wg counts the connections being served, closing closes when the
	// daemon stops.
	wg      sync.WaitGroup
	closing chan struct{}
	once    sync.Once
	// gated, when set, runs in place of the package's gated for this
	// server's requests: a test holds one server's request there while
	// other tests' servers run beside it.
	gated func(verb string)

	listener
}

// New builds the API; Listen and Serve open it to clients.
func New(o Options) *Server {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.LogSum == nil {
		o.LogSum = &logsum.Summarizer{}
	}
	if o.Requests == nil {
		o.Requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mailctl_socket_requests_total"}, []string{"verb", "code"})
	}
	return &Server{opts: o, b: o.Backend, store: o.Store, reg: o.Registry, log: o.Logger, events: newHub(), closing: make(chan struct{})}
}

func (s *Server) cfg() *config.Config { return s.b.Config() }

func (s *Server) now() time.Time { return s.opts.Now() }

// version is the daemon's build version.
func (s *Server) version() string { return s.opts.Version }

// address is the mail address of a mailbox on the primary domain.
func (s *Server) address(name string) string { return name + "@" + s.cfg().PrimaryDomain() }

var errClosing = protocol.Errorf(protocol.CodeUnavailable, "the daemon is shutting down; retry in a moment")

// Close stops taking connections, closes the open ones and ends every
// watch; requests in flight go on until they answer (see Wait).
func (s *Server) Close() {
	s.once.Do(func() { close(s.closing) })
	s.closeListener()
}

// Wait waits until every connection has been served, or ctx ends; it
// reports whether they all were.
func (s *Server) Wait(ctx context.Context) bool {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}
