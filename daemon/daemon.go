// Package daemon is mailctl's root service: the control socket and its
// authorization, the mailbox registry, inbound and outbound mail, and hooks.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/ingest"
	"github.com/mailctl/mailctl/daemon/intake"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/hooks"
	"github.com/mailctl/mailctl/internal/logsum"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// Options are the parts of a daemon that are not in the config file.
type Options struct {
	Version string
	Logger  *slog.Logger
	// Ready is called once every listener is up (systemd notify, dev banner).
	Ready func()
	// Resolver replaces the configured DNS resolver (tests).
	Resolver resolver.Resolver
	// Dial replaces the outbound dialer (tests reach fake MX servers with it).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Capture names a local mailbox that receives every outbound message
	// addressed outside this host's domains instead of the recipient's MX
	// (`mailctl dev` without --deliver). The message keeps its headers; the
	// sent copy records it as delivered by "capture".
	Capture string
	// Dev marks a `mailctl dev` instance (doctor checks what matters there).
	Dev bool
	// Clock replaces the wall clock of the queue and of send_at checks
	// (tests of scheduled sends).
	Clock func() time.Time
}

// Daemon is one running mailctl service.
type Daemon struct {
	opts    Options
	log     *slog.Logger
	state   atomic.Pointer[state]
	store   *store.Store
	reg     *Registry
	events  *hub
	started time.Time

	smtp     *smtpService
	metrics  *metrics
	metricsS *metricsService
	inbound  *inbound
	intake   *intake.Journal // accepted inbound copies until their files are durable
	out      *outboundService
	dialer   func(ctx context.Context, network, addr string) (net.Conn, error) // tests
	resolver resolver.Resolver                                                 // [dns] resolver, or Options.Resolver (tests)
	// lookups is what mail asks (trust checks, MX delivery): resolver
	// behind a short cache, since mail from or to one domain asks the same
	// questions message after message. A test's resolver is asked every
	// time, so a test can change its answers. Doctor asks resolver.
	lookups resolver.Resolver
	onDSN   func(mailbox, tag string, dsn *ingest.DSN) bool

	hookLog *hooks.RunLog
	runner  *hooks.Runner
	now     func() time.Time

	lock    *os.File   // the daemon's lock, held from New to the end of Run
	mu      sync.Mutex // serializes mailbox and hook creation and deletion
	wg      sync.WaitGroup
	closing chan struct{}
	// logSum counts repeated log lines (identical requests, refusals) so a
	// flood costs one line per kind and window; see logRepeats.
	logSum logsum.Summarizer
	extras []service // inbound, outbound, hooks: started with the daemon
}

// state is what a reload replaces at once.
type state struct {
	cfg      *config.Config
	declared map[string]*mailboxInfo // operator-declared mailboxes with resolved owners
	problems []string                // declarations that could not be honoured
	pending  []string                // config keys changed in the file that wait for a restart
}

// mailboxInfo is a mailbox as the daemon knows it, from either source.
type mailboxInfo struct {
	// ID is the mailbox's identity, never reused by another mailbox of the
	// same name: hooks, their runs and events are bound to it.
	ID       string
	Name     string
	UID, GID uint32
	Source   string // "config" or "registry"
	Aliases  []string
}

// service is a part of the daemon with its own lifetime (a listener, the queue).
type service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// New prepares a daemon from a loaded config: it opens the store and the
// registry and creates the folders of operator-declared mailboxes.
func New(cfg *config.Config, opts Options) (*Daemon, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if err := hooks.CloseOnExecAbove2(); err != nil {
		return nil, fmt.Errorf("marking inherited descriptors close-on-exec: %w", err)
	}
	setMemoryLimit(cfg)
	lock, err := acquireLock(cfg.Paths.Socket)
	if err != nil {
		return nil, err
	}
	d, err := newLocked(cfg, opts, lock)
	if err != nil {
		lock.Close()
		return nil, err
	}
	return d, nil
}

// memoryHeadroom is what the daemon needs besides the memory requests hold:
// indexes, SMTP sessions, the queue, and the collector's own slack.
const memoryHeadroom = 192 << 20

// setMemoryLimit asks the garbage collector to keep the heap near what the
// daemon's budgets allow (control.request_memory plus memoryHeadroom), so
// that garbage from large requests does not pile up to twice the live heap.
// GOMEMLIMIT in the environment takes precedence.
func setMemoryLimit(cfg *config.Config) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetMemoryLimit(cfg.Control.RequestMemory + memoryHeadroom)
}

// newLocked is New once the daemon's lock is held: every temporary file and
// uncommitted message in the store is a crash's leftover and is swept.
func newLocked(cfg *config.Config, opts Options, lock *os.File) (*Daemon, error) {
	for _, dir := range []string{cfg.Paths.StateDir} {
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return nil, fmt.Errorf("creating %s: %w", dir, err)
		}
	}
	st, err := store.Open(cfg.Paths.MailboxesDir())
	if err != nil {
		return nil, fmt.Errorf("opening the mailbox store: %w", err)
	}
	reg, problems, err := OpenRegistry(cfg.Paths.RegistryDir())
	if err != nil {
		return nil, err
	}
	d := &Daemon{opts: opts, log: opts.Logger, store: st, reg: reg, events: newHub(), started: time.Now(),
		closing: make(chan struct{}), now: time.Now, lock: lock}
	if opts.Clock != nil {
		d.now = opts.Clock
	}
	if n, err := st.Sweep(); err != nil {
		d.log.Error("sweeping crash leftovers from the store", "removed", n, "err", err)
	} else if n > 0 {
		d.log.Info("swept crash leftovers from the store", "removed", n)
	}
	for _, p := range problems {
		d.log.Error("registry entry skipped", "err", p)
	}
	s := d.buildState(cfg)
	d.state.Store(s)
	if err := d.openHookRunner(); err != nil {
		return nil, fmt.Errorf("opening the hook run log: %w", err)
	}
	d.resolver, d.lookups = opts.Resolver, opts.Resolver
	if d.resolver == nil {
		d.resolver = resolver.New(cfg.DNS.Resolver, 0)
		d.lookups = resolver.NewCache(d.resolver)
	}
	d.dialer = opts.Dial
	d.metrics = newMetrics(d)
	if cfg.Metrics.Listen != "" {
		d.metricsS = &metricsService{d: d}
		d.extras = append(d.extras, d.metricsS)
	}
	d.inbound = d.newInbound()
	in, err := d.openIntake()
	if err != nil {
		return nil, err
	}
	d.extras = append(d.extras, in)
	out, err := d.newOutbound()
	if err != nil {
		return nil, err
	}
	d.out = out
	d.extras = append(d.extras, out)
	if len(cfg.SMTP.Listen) > 0 || cfg.SMTP.LMTPSocket != "" || len(cfg.LMTP.ListenTCP) > 0 {
		svc, err := d.newSMTPService()
		if err != nil {
			return nil, err
		}
		d.smtp = svc
		d.extras = append(d.extras, svc)
	}
	d.ensureDeclared(s)
	return d, nil
}

func (d *Daemon) cfg() *config.Config { return d.state.Load().cfg }

// buildState resolves operator-declared mailboxes' owners.
func (d *Daemon) buildState(cfg *config.Config) *state {
	s := &state{cfg: cfg, declared: map[string]*mailboxInfo{}}
	for _, m := range cfg.Mailboxes {
		uid, gid, err := resolveUser(m.Owner)
		if err != nil {
			s.problems = append(s.problems, fmt.Sprintf("mailbox %q: owner %q: %v", m.Name, m.Owner, err))
			continue
		}
		s.declared[m.Name] = &mailboxInfo{ID: configMailboxID(m.Name, uid), Name: m.Name, UID: uid, GID: gid, Source: "config", Aliases: m.Aliases}
	}
	for _, p := range s.problems {
		d.log.Error("config mailbox not served", "problem", p)
	}
	return s
}

// ensureDeclared creates the folders of declared mailboxes that lack them.
func (d *Daemon) ensureDeclared(s *state) {
	for _, m := range s.declared {
		if _, err := d.store.Create(m.Name, int(m.UID), int(m.GID)); err != nil {
			d.log.Error("creating declared mailbox folder", "mailbox", m.Name, "err", err)
		}
	}
}

// Reload applies the config file again. A config that fails to load is
// reported and the old one kept. Keys that can change live take effect; those
// fixed when the daemon started (listeners, SMTP limits, delivery, relay,
// resolvers: restartKeys) keep their running values and are named in the log
// and, until a restart, in the status findings `mailctl doctor` shows. DKIM
// keys are read again.
func (d *Daemon) Reload(path string) error {
	file, err := config.Load(path)
	if err != nil {
		d.log.Error("reload refused, keeping the running config", "err", err)
		return err
	}
	cfg, applied, pending := applyReload(file, d.cfg())
	if d.out != nil {
		if err := d.out.loadKeys(); err != nil {
			d.log.Error("reload: DKIM keys not reloaded", "err", err)
		}
	}
	setMemoryLimit(cfg)
	s := d.buildState(cfg)
	s.pending = pending
	d.state.Store(s)
	d.ensureDeclared(s)
	d.log.Info("config reloaded", "file", path, "applied", strings.Join(applied, ","), "need_restart", strings.Join(pending, ","))
	if len(pending) > 0 {
		d.log.Warn("config keys changed that take effect only at the next restart", "keys", strings.Join(pending, ","))
	}
	return nil
}

// lookupMailbox finds a mailbox by name in either source.
func (d *Daemon) lookupMailbox(name string) (*mailboxInfo, bool) {
	if m, ok := d.state.Load().declared[name]; ok {
		return m, true
	}
	if r, ok := d.reg.Mailbox(name); ok {
		return registryMailbox(r), true
	}
	return nil, false
}

func registryMailbox(r *registeredMailbox) *mailboxInfo {
	return &mailboxInfo{ID: r.ID, Name: r.Name, UID: r.OwnerUID, GID: r.OwnerGID, Source: "registry"}
}

// allMailboxes lists every mailbox, sorted by name.
func (d *Daemon) allMailboxes() []*mailboxInfo {
	s := d.state.Load()
	var out []*mailboxInfo
	for _, m := range s.declared {
		out = append(out, m)
	}
	for _, r := range d.reg.Mailboxes() {
		if _, dup := s.declared[r.Name]; dup {
			continue
		}
		out = append(out, registryMailbox(r))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// resolveUser turns a user name or numeric uid into uid and primary gid. A
// numeric uid must have a passwd entry: mailboxes and hooks need a real user.
func resolveUser(s string) (uint32, uint32, error) {
	var u *user.User
	var err error
	if _, nerr := strconv.ParseUint(s, 10, 32); nerr == nil {
		u, err = user.LookupId(s)
	} else {
		u, err = user.Lookup(s)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("no such user")
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, errors.New("user has a non-numeric id")
	}
	return uint32(uid), uint32(gid), nil
}

// userName returns the login name of uid, or the number when it has none.
func userName(uid uint32) string {
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		return u.Username
	}
	return strconv.FormatUint(uint64(uid), 10)
}

// Run serves until ctx ends, then drains: in-flight requests get a grace period.
func (d *Daemon) Run(ctx context.Context) error {
	cfg := d.cfg()
	defer d.lock.Close()
	srv, err := d.listenControl(cfg.Paths.Socket)
	if err != nil {
		return err
	}
	for _, ex := range d.extras {
		if err := ex.Start(ctx); err != nil {
			srv.Close()
			return err
		}
	}
	d.log.Info("mailctl daemon ready", "version", d.opts.Version, "socket", cfg.Paths.Socket, "domains", cfg.Domains)
	if d.opts.Ready != nil {
		d.opts.Ready()
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve() }()
	go d.logRepeats()
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	close(d.closing)
	defer d.logSum.FlushAll(d.logRepeat)
	srv.Close()
	drain, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for i := len(d.extras) - 1; i >= 0; i-- {
		if e := d.extras[i].Stop(drain); e != nil {
			d.log.Error("stopping", "err", e)
		}
	}
	if err := d.runner.Shutdown(drain); err != nil {
		d.log.Warn("hooks still running at shutdown", "err", err)
	}
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-drain.Done():
		d.log.Warn("shutdown grace ended with requests still running")
	}
	d.log.Info("mailctl daemon stopped")
	return err
}

// Version is the daemon's build version.
func (d *Daemon) Version() string { return d.opts.Version }

var errClosing = protocol.Errorf(protocol.CodeUnavailable, "the daemon is shutting down; retry in a moment")

// logRepeats writes, every window until the daemon closes, the counts of
// lines the summarizer held back, so a burst that stops is still reported.
func (d *Daemon) logRepeats() {
	t := time.NewTicker(logsum.DefaultWindow)
	defer t.Stop()
	for {
		select {
		case <-d.closing:
			return
		case <-t.C:
			d.logSum.Flush(d.logRepeat)
		}
	}
}

func (d *Daemon) logRepeat(kind string, n int) {
	d.log.Info("repeats not logged one by one", "kind", kind, "count", n)
}
