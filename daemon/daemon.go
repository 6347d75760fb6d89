// Package daemon is mailctl's root service and the place its parts are
// wired together: New builds them from a config (the store, the registry,
// the control API, inbound SMTP/LMTP, the send pipeline and its queue, the
// hook runner, metrics), Run serves until the context ends, and Reload
// applies a changed config. The control socket's API is daemon/control;
// what mail does on its way in and out lives in the daemon/ packages it
// names (smtpin, ingest, trust, outbound).
package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mailctl/mailctl/daemon/backup"
	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/control"
	"github.com/mailctl/mailctl/daemon/intake"
	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/hooks"
	"github.com/mailctl/mailctl/internal/logsum"
	"github.com/mailctl/mailctl/internal/safeio"
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
	// StepQueue leaves the outbound queue still: it attempts and warns only
	// when the test calls its Step (tests that step Clock).
	StepQueue bool
	// Clock replaces the wall clock of the queue and of send_at checks
	// (tests of scheduled sends).
	Clock func() time.Time
	// Statfs replaces the store filesystem's free-space query of the disk
	// reserve (tests).
	Statfs func(path string) (free uint64, err error)
	// ChangedAt replaces reading when a file in a mailbox last changed
	// (when a message came to trash), for tests that move Clock.
	ChangedAt func(mailboxDir, rel string) (time.Time, error)
}

// Daemon is one running mailctl service.
type Daemon struct {
	opts    Options
	log     *slog.Logger
	state   atomic.Pointer[state]
	store   *store.Store
	reg     *registry.Registry
	ctl     *control.Server
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
	dsn     *reportHandler // bounces to our return paths; nil without sending

	hookLog *hooks.RunLog
	runner  *hooks.Runner
	now     func() time.Time
	reserve *diskReserve // reserve.go
	// usageCount is each mailbox's usage against its quota (usage.go).
	usageCount usageCounter
	changedAt  func(mailboxDir, rel string) (time.Time, error) // retention.go

	// lastReload is the outcome of the last Reload, for `mailctl reload`.
	lastReload atomic.Pointer[protocol.ReloadStatus]

	lock    *os.File // the daemon's lock, held from New to the end of Run
	closing chan struct{}
	// logSum counts repeated log lines (identical requests, refusals) so a
	// flood costs one line per kind and window; see logRepeats.
	logSum logsum.Summarizer
	// auditSum does the same for the control socket's lines, apart: a
	// flood of SMTP clients from many addresses fills logSum's table, and
	// must not have the audit lines of local users counted unwritten.
	auditSum logsum.Summarizer
	extras   []service // inbound, outbound, hooks: started with the daemon
}

// state is what a reload replaces at once.
type state struct {
	cfg      *config.Config
	declared map[string]*registry.Mailbox // operator-declared mailboxes with resolved owners
	problems []string                     // declarations that could not be honoured
	// unserved holds the names and aliases (as written, lower case) of
	// declarations not served for their owner (unknown, or not the owner
	// of the folder): mail to them waits (4xx) for the operator's fix
	// rather than bouncing or reaching the catch-all.
	unserved []string
	pending  []string // config keys changed in the file that wait for a restart
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
	// Every secret the config names is checked before anything starts;
	// the readers check again on the descriptors they read.
	if err := cfg.CheckSecrets(); err != nil {
		return nil, fmt.Errorf("refusing to start: %w", err)
	}
	if err := checkDeclaredHooks(cfg); err != nil {
		return nil, fmt.Errorf("refusing to start: %w", err)
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
	// 0711 whatever the umask: owners reach their mailbox folders through
	// it (TestStateDirMadeUnderAStrictUmaskLetsOwnersIn).
	if err := safeio.MkdirAll(cfg.Paths.StateDir, 0o711); err != nil {
		return nil, fmt.Errorf("creating %s: %w", cfg.Paths.StateDir, err)
	}
	if err := backup.CheckIncomplete(cfg.Paths.StateDir); err != nil {
		return nil, fmt.Errorf("refusing to start: %w", err)
	}
	sf, err := checkFormats(cfg.Paths, opts.Version) // formats.go
	if err != nil {
		return nil, fmt.Errorf("refusing to start: %w", err)
	}
	st, err := store.OpenIndexed(cfg.Paths.MailboxesDir(), cfg.Paths.IndexFile())
	if err != nil {
		return nil, fmt.Errorf("opening the mailbox store: %w", sf.named(err))
	}
	reg, problems, err := registry.Open(cfg.Paths.RegistryDir())
	if err != nil {
		return nil, err
	}
	if err := sf.writeStamps(opts.Version, opts.Logger); err != nil {
		return nil, err
	}
	d := &Daemon{opts: opts, log: opts.Logger, store: st, reg: reg, started: time.Now(),
		closing: make(chan struct{}), now: time.Now, lock: lock}
	if opts.Clock != nil {
		d.now = opts.Clock
	}
	d.reserve = &diskReserve{d: d, statfs: statfsFree}
	if opts.Statfs != nil {
		d.reserve.statfs = opts.Statfs
	}
	d.changedAt = changedAt
	if opts.ChangedAt != nil {
		d.changedAt = opts.ChangedAt
	}
	if n, err := st.Sweep(); err != nil {
		d.log.Error("sweeping crash leftovers from the store", "removed", n, "err", err)
	} else if n > 0 {
		d.log.Info("swept crash leftovers from the store", "removed", n)
	}
	if n, err := backup.RemoveStaging(cfg.Paths.StateDir); err != nil {
		d.log.Error("removing what an interrupted restore left", "removed", n, "err", err)
	} else if n > 0 {
		d.log.Info("removed what an interrupted restore left", "removed", n)
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
	if opts.Dev {
		d.lookups = withDevKeyRecords(d.lookups, cfg)
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
	d.extras = append(d.extras, out, &pruneService{d: d})
	if len(cfg.SMTP.Listen) > 0 || cfg.SMTP.LMTPSocket != "" || len(cfg.LMTP.ListenTCP) > 0 {
		svc, err := d.newSMTPService()
		if err != nil {
			return nil, err
		}
		d.smtp = svc
		d.extras = append(d.extras, svc)
	}
	d.ctl = control.New(control.Options{Version: opts.Version, Dev: opts.Dev, Capture: opts.Capture, Logger: d.log, Now: d.now, Started: d.started,
		Store: st, Registry: reg, Backend: backend{d}, Requests: d.metrics.requests, LogSum: &d.auditSum})
	d.ensureDeclared(s)
	return d, nil
}

func (d *Daemon) cfg() *config.Config { return d.state.Load().cfg }

// buildState resolves operator-declared mailboxes' owners.
func (d *Daemon) buildState(cfg *config.Config) *state {
	s := &state{cfg: cfg, declared: map[string]*registry.Mailbox{}}
	for _, m := range cfg.Mailboxes {
		unserved := func() {
			s.unserved = append(s.unserved, strings.ToLower(m.Name))
			for _, a := range m.Aliases {
				s.unserved = append(s.unserved, strings.ToLower(a))
			}
		}
		uid, gid, err := registry.ResolveUser(m.Owner)
		if err != nil {
			s.problems = append(s.problems, fmt.Sprintf("mailbox %q: owner %q: %v", m.Name, m.Owner, err))
			unserved()
			continue
		}
		if r, ok := d.reg.Mailbox(m.Name); ok && r.OwnerUID != uid {
			// A user made it over the socket: serving the declaration would
			// hand that user's mail and address to the declared owner.
			s.problems = append(s.problems, fmt.Sprintf("mailbox %q: the name is a mailbox uid %d created; it stays that user's (delete it first to declare the name for %q)", m.Name, r.OwnerUID, m.Owner))
			continue
		}
		if fuid, _, err := d.store.Owner(m.Name); err == nil && uint32(fuid) != uid {
			// The folder and the mail in it are another user's (a restore
			// gave them to the archive's owner, or the owner line changed):
			// serving the declaration would hand them to the declared owner.
			s.problems = append(s.problems, fmt.Sprintf("mailbox %q: its folder %s belongs to uid %d, not to the declared owner %q (uid %d); not served: "+
				"declare the owner it has, or give it the folder's mail with `sudo %s`", m.Name, d.store.Path(m.Name), fuid, m.Owner, uid,
				protocol.GiveMailboxCommand(fmt.Sprintf("%d:%d", uid, gid), d.store.Path(m.Name))))
			unserved()
			continue
		}
		// An alias that is the name of a mailbox another user created would
		// take that user's mail (routing gives aliases first): not served.
		var aliases []string
		for _, a := range m.Aliases {
			local, ours := cfg.AliasLocal(a)
			if r, ok := d.reg.Mailbox(local); ok && r.OwnerUID != uid && ours {
				s.problems = append(s.problems, fmt.Sprintf("mailbox %q: alias %q is the name of a mailbox uid %d created; the alias is not served (the mail stays that user's)", m.Name, a, r.OwnerUID))
				continue
			}
			aliases = append(aliases, a)
		}
		s.declared[m.Name] = &registry.Mailbox{ID: registry.ConfigMailboxID(m.Name, uid), Name: m.Name, UID: uid, GID: gid, Source: registry.SourceConfig, Aliases: aliases}
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
// keys and the TLS certificate and key are read again.
func (d *Daemon) Reload(path string) error {
	count := 1
	if last := d.lastReload.Load(); last != nil {
		count = last.Count + 1
	}
	file, err := config.Load(path)
	if err == nil {
		err = file.CheckSecrets()
	}
	if err == nil {
		err = checkDeclaredHooks(file)
	}
	if err == nil && d.out != nil {
		// A key file that does not load would stop the next start: the
		// reload fails too, so that `systemctl reload` says so now, and the
		// keys in use stay.
		err = d.out.loadKeys()
	}
	if err != nil {
		d.log.Error("reload refused, keeping the running config", "err", err)
		d.lastReload.Store(&protocol.ReloadStatus{Count: count, At: d.now().UTC(), Error: err.Error()})
		return err
	}
	cfg, applied, pending := applyReload(file, d.cfg())
	if d.smtp != nil && d.smtp.certs != nil {
		d.smtp.certs.Reload() // a refused pair is logged; the one in use stays
	}
	setMemoryLimit(cfg)
	// Who owns a declared name is decided and put in place holding the
	// name alone: a user's create of that name waits, or is seen by
	// buildState, and a request checked on the name's earlier owner ends
	// first.
	release := d.ctl.HoldNamesAlone(append(declaredNames(d.cfg()), declaredNames(cfg)...)...)
	s := d.buildState(cfg)
	s.pending = pending
	reloadBuilt()
	old := d.state.Swap(s)
	d.ensureDeclared(s)
	release()
	for _, name := range slices.Sorted(maps.Keys(old.declared)) {
		if now, ok := s.declared[name]; !ok || now.ID != old.declared[name].ID {
			d.ctl.MailboxGone(old.declared[name])
		}
	}
	d.log.Info("config reloaded", "file", path, "applied", strings.Join(applied, ","), "need_restart", strings.Join(pending, ","))
	st := &protocol.ReloadStatus{Count: count, At: d.now().UTC(), OK: true, Applied: applied, Pending: pending, NotServed: s.problems}
	if d.out != nil {
		st.DKIMKeys = d.out.keyNames()
		if st.DKIMKeys == nil {
			st.DKIMKeys = []string{} // none loaded, said as such: outbound mail goes unsigned
		}
	}
	d.lastReload.Store(st)
	if len(pending) > 0 {
		d.log.Warn("config keys changed that take effect only at the next restart", "keys", strings.Join(pending, ","))
	}
	return nil
}

// reloadBuilt is called by Reload between deciding the declared mailboxes'
// owners and putting them in place (a variable so that a test can act in
// between).
var reloadBuilt = func() {}

// declaredNames are the mailbox names cfg declares, its mailboxes' and its
// aliases' at our domains.
func declaredNames(cfg *config.Config) []string {
	var out []string
	for _, m := range cfg.Mailboxes {
		out = append(out, m.Name)
		for _, a := range m.Aliases {
			if local, ours := cfg.AliasLocal(a); ours {
				out = append(out, local)
			}
		}
	}
	return out
}

// lookupMailbox finds a mailbox by name in either source.
func (d *Daemon) lookupMailbox(name string) (*registry.Mailbox, bool) {
	if m, ok := d.state.Load().declared[name]; ok {
		return m, true
	}
	if r, ok := d.reg.Mailbox(name); ok {
		return r.Mailbox(), true
	}
	return nil, false
}

// allMailboxes lists every mailbox, sorted by name.
func (d *Daemon) allMailboxes() []*registry.Mailbox {
	s := d.state.Load()
	var out []*registry.Mailbox
	for _, m := range s.declared {
		out = append(out, m)
	}
	for _, r := range d.reg.Mailboxes() {
		if _, dup := s.declared[r.Name]; dup {
			continue
		}
		out = append(out, r.Mailbox())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Run serves until ctx ends, then drains: in-flight requests get a grace period.
func (d *Daemon) Run(ctx context.Context) error {
	cfg := d.cfg()
	defer d.lock.Close()
	srv := d.ctl
	if err := srv.Listen(cfg.Paths.Socket); err != nil {
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
	var err error
	d.ctl.IndexInBackground("start")
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve() }()
	go d.logRepeats()
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	close(d.closing)
	defer d.logSum.FlushAll(d.logRepeat)
	defer d.auditSum.FlushAll(d.logRepeat)
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
	if !srv.Wait(drain) {
		d.log.Warn("shutdown grace ended with requests still running")
	}
	// The index writer writes what it holds (or the next start reads it
	// from the files).
	d.store.Close()
	d.log.Info("mailctl daemon stopped")
	return err
}

// Version is the daemon's build version.
func (d *Daemon) Version() string { return d.opts.Version }

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
			d.auditSum.Flush(d.logRepeat)
		}
	}
}

func (d *Daemon) logRepeat(kind string, n int) {
	d.log.Info("repeats not logged one by one", "kind", kind, "count", n)
}

// Watchers is the number of watch streams open now; tests of clients wait
// for it before causing the event they expect a stream to carry.
func (d *Daemon) Watchers() int { return d.ctl.Watchers() }
