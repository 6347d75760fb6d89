// Package doctor checks a mailctl host and says precisely what is wrong: the
// config, keys, owners and modes of every path, the daemon and its version,
// the SMTP listeners, the published DNS against the local keys, the queue and
// the mailboxes. Each finding has a stable id, a severity and a fix.
//
// Root runs the checks locally (`mailctl doctor`); other users get them from
// the daemon's status verb, which calls Check with the daemon's own config.
package doctor

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/protocol"
)

// Severities of a finding, from good to bad.
const (
	OK   = "ok"
	Info = "info"
	Warn = "warn"
	Fail = "fail"
)

// Env is what Check needs from outside the config: every network and OS edge
// is a seam so tests can seed faults.
type Env struct {
	// Resolver answers DNS; nil skips the DNS checks.
	Resolver resolver.Resolver
	// DNSSEC asks the configured resolver whole questions, to see whether
	// it validates (the AD bit); nil skips that check.
	DNSSEC resolver.Exchanger
	// Root reports whether the checks may read root-only files (keys, queue,
	// owners); the daemon passes true, a non-root CLI never calls Check.
	Root bool
	// SocketAnswers asks the daemon for its version; nil skips the check (the
	// daemon checking itself).
	SocketAnswers func() (serverVersion string, err error)
	// ClientVersion is this binary's version, compared with the daemon's.
	ClientVersion string
	// Port25Listening reports whether SMTP answers; nil dials every configured
	// listen address on loopback (and says QUIT).
	Port25Listening func() bool
	// ServedCertificate returns the certificate the daemon serves for
	// STARTTLS; nil fetches it with STARTTLS from the first listener that
	// answers.
	ServedCertificate func(context.Context) (*x509.Certificate, error)
	// Now is the clock (certificate expiry); nil is time.Now.
	Now func() time.Time
	// LocalAddrs lists this host's public addresses, to compare with the
	// host name's A/AAAA records; nil skips that comparison.
	LocalAddrs func() ([]net.IP, error)
	// Dev says the daemon is a `mailctl dev` instance: it runs as a user with
	// every path that user's and a made-up domain, so the ownership,
	// role-address and DNS checks of a host do not apply.
	Dev bool
}

// findings collects results. A check that added none says so with one OK
// finding; it tells by comparing the list's length before and after.
type findings []protocol.Finding

func (f *findings) add(id, sev, fix, format string, args ...any) {
	*f = append(*f, protocol.Finding{ID: id, Severity: sev, Message: fmt.Sprintf(format, args...), Fix: fix})
}

// Check runs every check against cfg and returns the findings, failures
// first. It never stops at the first problem.
func Check(ctx context.Context, cfg *config.Config, env Env) []protocol.Finding {
	if env.Now == nil {
		env.Now = time.Now
	}
	var f findings
	checkConfig(&f, cfg)
	checkDaemon(&f, env)
	if !env.Dev {
		checkPaths(&f, cfg, env)
	}
	checkSecrets(&f, cfg)
	checkInputs(&f, cfg)
	keys := checkKeys(&f, cfg, env)
	checkTLS(ctx, &f, cfg, env)
	checkMailboxes(&f, cfg, env)
	if !env.Dev {
		checkRoleAddresses(&f, cfg)
	}
	checkQueue(&f, cfg, env)
	checkFormats(&f, cfg)
	checkRestore(&f, cfg)
	checkListeners(ctx, &f, cfg, env)
	switch {
	case env.Dev:
		f.add("dev.instance", Info, "", "a mailctl dev instance: owners, role addresses and DNS are checked on a host (sudo mailctl setup), not here")
	case env.Resolver != nil:
		checkDNS(ctx, &f, cfg, env, keys)
		checkDNSSEC(ctx, &f, cfg, env)
	default:
		f.add("dns.skipped", Info, "", "DNS checks skipped: no resolver")
	}
	Sort(f)
	return f
}

// CheckFile loads the config at path and checks the host. A config that does
// not load is itself a finding ("config.unknown_key" when a key is misspelled,
// "config.parse" otherwise); the other checks then run on the defaults, so a
// typo never hides the rest.
func CheckFile(ctx context.Context, path string, env Env) (*config.Config, []protocol.Finding) {
	cfg, err := config.Load(path)
	if err == nil {
		return cfg, Check(ctx, cfg, env)
	}
	var f findings
	var unknown *config.UnknownKeyError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f.add("config.missing", Fail, "sudo mailctl setup", "no config at %s", path)
	case errors.Is(err, fs.ErrPermission):
		f.add("config.unreadable", Fail, "run doctor as root (sudo mailctl doctor), or without root to ask the daemon", "cannot read %s: %v", path, err)
	case errors.Is(err, formats.ErrNewer):
		f.add("format.newer", Fail, formatFix, "%v", err)
	case errors.As(err, &unknown):
		f.add("config.unknown_key", Fail, "fix the key's spelling against docs/configuration.md, then "+protocol.ReloadLine(), "%v", err)
	default:
		f.add("config.parse", Fail, "fix the line named, then "+protocol.ReloadLine(), "%v", err)
	}
	if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission) && !errors.Is(err, formats.ErrNewer) {
		// A key or a value is wrong: check the rest against the file's
		// own values. The defaults would name other paths (the state and
		// keys missing, a running daemon down), another host name, no TLS
		// and no declared mailboxes, and call the file's mailboxes orphans.
		if lenient, lerr := config.LoadForChecks(path); lerr == nil {
			f = append(f, slices.DeleteFunc(Check(ctx, lenient, env), func(r protocol.Finding) bool { return r.ID == "config.ok" })...)
			Sort(f)
			return nil, f
		}
	}
	def := config.Default()
	def.File, def.Format = path, 0 // the file's own format is not known
	// Without a config there are no domains; that finding only repeats this one.
	f = append(f, slices.DeleteFunc(Check(ctx, def, env), func(r protocol.Finding) bool { return r.ID == "config.domains" })...)
	Sort(f)
	return nil, f
}

// RuntimeIDs are the findings only the running daemon can make: about what
// it runs rather than what the files hold. Root's doctor checks the files
// itself and takes these from the daemon's status.
var RuntimeIDs = []string{RestartPending}

// RestartPending is the finding of config keys changed in the file that the
// running daemon applies only at a restart.
const RestartPending = "config.restart_pending"

// Runtime keeps the findings of f that RuntimeIDs names.
func Runtime(f []protocol.Finding) []protocol.Finding {
	var out []protocol.Finding
	for _, x := range f {
		if slices.Contains(RuntimeIDs, x.ID) {
			out = append(out, x)
		}
	}
	return out
}

var sevRank = map[string]int{Fail: 0, Warn: 1, Info: 2, OK: 3}

// Sort orders findings by severity (failures first), keeping check order.
func Sort(f []protocol.Finding) {
	sort.SliceStable(f, func(i, j int) bool { return sevRank[f[i].Severity] < sevRank[f[j].Severity] })
}

// Failed reports whether any finding is a failure.
func Failed(f []protocol.Finding) bool {
	return slices.ContainsFunc(f, func(x protocol.Finding) bool { return x.Severity == Fail })
}

func checkConfig(f *findings, cfg *config.Config) {
	if len(cfg.Domains) == 0 {
		f.add("config.domains", Fail, "add domains = [\"example.com\"] to the config, or run `sudo mailctl setup`", "no mail domain configured: all mail is refused")
		return
	}
	f.add("config.ok", OK, "", "config loads; domains %s, host name %s", strings.Join(cfg.Domains, ", "), cfg.Hostname)
	if cfg.CatchAll != "" && cfg.Mailbox(cfg.CatchAll) == nil {
		f.add("config.catch_all", Info, "", "catch-all %q is not declared under [[mailboxes]]; it must exist in the registry", cfg.CatchAll)
	}
}

func checkDaemon(f *findings, env Env) {
	if env.SocketAnswers == nil {
		return
	}
	v, err := env.SocketAnswers()
	if err != nil {
		f.add("daemon.down", Fail, protocol.StartCommand()+" ("+protocol.LogsHint()+")", "the daemon does not answer on its socket: %v", err)
		return
	}
	if env.ClientVersion != "" && v != env.ClientVersion {
		f.add("daemon.version_drift", Warn, protocol.RestartLine(), "the daemon runs %s but this binary is %s: restart the daemon after an upgrade", v, env.ClientVersion)
		return
	}
	f.add("daemon.up", OK, "", "the daemon answers (version %s)", v)
}

// owner returns the uid owning fi.
func owner(fi fs.FileInfo) (uint32, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}

// pathSpec is one path doctor knows the mode of.
type pathSpec struct {
	path string
	mode fs.FileMode
	dir  bool
	// strict: a more permissive mode is a failure (secrets); otherwise a warning.
	strict bool
}

func checkPaths(f *findings, cfg *config.Config, env Env) {
	specs := []pathSpec{
		{cfg.Paths.StateDir, 0o711, true, false},
		{cfg.Paths.RegistryDir(), 0o700, true, true},
		{cfg.Paths.QueueDir(), 0o700, true, true},
		{cfg.Paths.MailboxesDir(), 0o711, true, false},
		{cfg.Paths.DKIMDir, 0o700, true, true},
	}
	if cfg.File != "" {
		specs = append(specs, pathSpec{cfg.File, 0o640, false, true})
	}
	before := len(*f)
	for _, s := range specs {
		fi, err := os.Lstat(s.path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				f.add("paths.missing", Fail, "sudo mailctl setup", "%s does not exist", s.path)
			} else {
				f.add("paths.unreadable", Warn, "run doctor as root", "cannot inspect %s: %v", s.path, err)
			}
			continue
		}
		if fi.IsDir() != s.dir || fi.Mode()&fs.ModeSymlink != 0 {
			f.add("paths.type", Fail, "move it away and run `sudo mailctl setup`", "%s is not a plain %s", s.path, map[bool]string{true: "directory", false: "file"}[s.dir])
			continue
		}
		if got := fi.Mode().Perm(); got != s.mode {
			sev := Warn
			if s.strict && got&^s.mode != 0 {
				sev = Fail
			}
			f.add("paths.mode", sev, fmt.Sprintf("sudo chmod %04o %s", s.mode, s.path), "%s has mode %04o, expected %04o", s.path, got, s.mode)
		}
		if uid, ok := owner(fi); ok && env.Root && uid != 0 {
			f.add("paths.owner", Fail, "sudo chown root: "+s.path, "%s belongs to uid %d, expected root", s.path, uid)
		}
	}
	checkSocketPlace(f, cfg)
	if fi, err := os.Lstat(cfg.Paths.Socket); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			f.add("paths.socket", Fail, "stop the daemon, move "+cfg.Paths.Socket+" away, start it", "%s is not a socket", cfg.Paths.Socket)
		} else if fi.Mode().Perm() != 0o666 {
			f.add("paths.socket", Warn, "restart the daemon, which sets 0666 when it listens: "+protocol.RestartLine(),
				"the control socket %s has mode %04o: users other than root cannot reach the daemon (it authorizes each caller itself)", cfg.Paths.Socket, fi.Mode().Perm())
		}
	}
	if len(*f) == before {
		f.add("paths.ok", OK, "", "state, registry, queue, mailboxes and key directories have the right modes")
	}
}

// checkSocketPlace finds where another user can take the control socket's
// path: a socket there of another owner than the state directory's (root's
// for mailctl serve, the user's own for mailctl dev), which answers every
// client as the daemon would, or a directory others may write to, where a
// user can put one while the daemon is stopped (and the daemon then
// refuses to start, taking it for another daemon's). Clients refuse such a
// socket (protocol.Dial); this says why they do, and how to move it.
func checkSocketPlace(f *findings, cfg *config.Config) {
	sfi, err := os.Lstat(cfg.Paths.StateDir)
	if err != nil {
		return
	}
	want, ok := owner(sfi)
	if !ok {
		return
	}
	sock := cfg.Paths.Socket
	if fi, err := os.Lstat(sock); err == nil {
		if uid, ok := owner(fi); ok && uid != want {
			f.add("paths.socket_taken", Fail, "stop whatever of uid "+fmt.Sprint(uid)+" listens there, remove "+sock+", move paths.socket into a directory only root writes (the default, "+protocol.DefaultSocket+"), and restart the daemon",
				"the control socket %s belongs to uid %d, not to the daemon's user (uid %d): another user's process may be answering clients in the daemon's place", sock, uid, want)
		}
	}
	dir := filepath.Dir(sock)
	if dfi, err := os.Stat(dir); err == nil {
		uid, ok := owner(dfi)
		if dfi.Mode().Perm()&0o022 != 0 || (ok && uid != want && uid != 0) {
			f.add("paths.socket_dir", Warn, "set paths.socket to a directory only the daemon's user writes (the default, "+protocol.DefaultSocket+")",
				"the control socket's directory %s (mode %04o, uid %d) lets other users create the socket while the daemon is stopped, to answer clients in its place or keep it from starting", dir, dfi.Mode().Perm(), uid)
		}
		// Root's daemon serves every user (it authorizes each caller
		// itself); a dev instance's folder is its user's alone. A folder
		// a group other than root's may enter is an operator's choice of
		// who may.
		perm := dfi.Mode().Perm()
		groupIn := false
		if st, ok := dfi.Sys().(*syscall.Stat_t); ok {
			groupIn = perm&0o010 != 0 && st.Gid != 0
		}
		if want == 0 && perm&0o001 == 0 && !groupIn {
			f.add("paths.socket_closed", Fail, "sudo chmod 0755 "+protocol.ShellQuote(dir),
				"the control socket's directory %s has mode %04o: users other than root cannot reach the daemon", dir, perm)
		}
	}
}

// checkListeners verifies SMTP answers on the configured addresses.
func checkListeners(ctx context.Context, f *findings, cfg *config.Config, env Env) {
	if len(cfg.SMTP.Listen) == 0 {
		// A host behind front MTAs takes its mail over LMTP only.
		lmtp := slices.Clone(cfg.LMTP.ListenTCP)
		if cfg.SMTP.LMTPSocket != "" {
			lmtp = append(lmtp, cfg.SMTP.LMTPSocket)
		}
		if len(lmtp) > 0 {
			f.add("smtp.lmtp_only", OK, "", "no SMTP listener (smtp.listen is empty): mail arrives over LMTP on %s from the front MTAs", strings.Join(lmtp, ", "))
			return
		}
		f.add("smtp.no_listener", Fail, "set smtp.listen = [\":25\"] (or LMTP for front MTAs: smtp.lmtp_socket, lmtp.listen_tcp) and restart",
			"neither SMTP nor LMTP is configured: no mail can arrive")
		return
	}
	listening := env.Port25Listening
	if listening == nil {
		listening = func() bool {
			for _, a := range probeAddrs(cfg) {
				if _, err := probeSMTP(ctx, a, cfg.Hostname, false); err == nil {
					return true
				}
			}
			return false
		}
	}
	if listening() {
		f.add("smtp.port25", OK, "", "SMTP answers on %s", strings.Join(cfg.SMTP.Listen, ", "))
		return
	}
	f.add("smtp.port25", Fail, protocol.StartCommand()+"; check `ss -ltnp 'sport = :25'` for another MTA holding the port",
		"nothing answers SMTP on %s: the internet cannot deliver mail here", strings.Join(cfg.SMTP.Listen, ", "))
}
