package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/mailctl/mailctl/daemon"
	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/protocol"
)

func init() {
	register(&command{name: "serve", group: "daemon", summary: "run the mailctl daemon (as root, under systemd)", run: cmdServe})
	register(&command{name: "reload", group: "daemon", summary: "make the running daemon re-read its config (the unit's ExecReload)", run: cmdReload})
	register(&command{name: "dev", group: "daemon", summary: "run the whole daemon unprivileged with all state in one folder", run: cmdDev})
}

// configPath picks the config file: the flag, then $MAILCTL_CONFIG, then the default.
func configPath(flagValue string) string {
	return cmp.Or(flagValue, os.Getenv("MAILCTL_CONFIG"), config.DefaultPath)
}

// newLogger logs to stderr, at debug level when debug is set.
func newLogger(debug bool) *slog.Logger {
	level := slog.LevelInfo
	if debug {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func cmdServe(args []string) int {
	fs := newFlagSet("serve", "serve [--config PATH] [--cpu-profile DIR]", `Runs the mailctl daemon in the foreground: the control socket, SMTP and LMTP
listeners, the outbound queue and hooks. It normally runs as root under systemd
(systemd/mailctl.service). SIGHUP reloads the config, the DKIM keys and the TLS
certificate (a bad config is reported and the running one kept); a renewed
certificate is also taken at the next handshake after its files change.
SIGTERM drains and exits.

--cpu-profile writes the daemon's CPU profile, in pprof's format, to a new
file in DIR (serve-TIME-*.pprof, named on stderr) when it stops: for go tool
pprof, and for the profile-guided build (bench/pgo.sh makes
cmd/mailctl/default.pgo from such profiles).`)
	cfgFlag := fs.String("config", "", "config file (default $MAILCTL_CONFIG, then "+config.DefaultPath+")")
	debug := fs.Bool("debug", false, "log at debug level")
	cpuProfile := fs.String("cpu-profile", "", "write the CPU profile to a new file in `DIR` when the daemon stops")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *cpuProfile != "" {
		file, stop, err := startCPUProfile(*cpuProfile, time.Now())
		if err != nil {
			return failure(fs, err)
		}
		fmt.Fprintf(stderr, "mailctl serve: the CPU profile goes to %s when the daemon stops\n", file)
		defer func() {
			if err := stop(); err != nil {
				fmt.Fprintf(stderr, "mailctl serve: cpu profile: %v\n", err)
			}
		}()
	}
	path := configPath(*cfgFlag)
	cfg, err := config.Load(path)
	if err != nil {
		return failure(fs, err)
	}
	log := newLogger(*debug)
	d, err := daemon.New(cfg, daemon.Options{Version: version, Logger: log, Ready: notifySystemd})
	if err != nil {
		return failure(fs, err)
	}
	return runDaemon(d, path, log, nil)
}

// runDaemon runs d until SIGTERM or SIGINT, reloading on SIGHUP. explain,
// when set, may say instead of the daemon's error what the user can do.
func runDaemon(d *daemon.Daemon, cfgPath string, log *slog.Logger, explain func() string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		for s := range sigs {
			if s == syscall.SIGHUP {
				d.Reload(cfgPath) // logs and records the outcome (mailctl reload reports it)
				continue
			}
			log.Info("stopping", "signal", s.String())
			cancel()
			return
		}
	}()
	if err := d.Run(ctx); err != nil {
		if explain != nil {
			if s := explain(); s != "" {
				fmt.Fprintln(stderr, s)
				return 1
			}
		}
		// Under systemd each line is a journal entry, and the error may
		// quote a name from a mailbox tree: it stays one line.
		fmt.Fprintf(stderr, "mailctl: %s\n", inert(err.Error()))
		return 1
	}
	return 0
}

// notifySystemd tells systemd (Type=notify) that the listeners are up.
func notifySystemd() {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return
	}
	if addr[0] == '@' {
		addr = "\x00" + addr[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return
	}
	defer conn.Close()
	conn.Write([]byte("READY=1"))
}

func cmdDev(args []string) int {
	fs := newFlagSet("dev", "dev [--dir DIR] [--smtp ADDR] [--domain DOMAIN] [--mailbox NAME] [--trust PATTERN]... [--deliver]", `Runs the whole daemon as the current user with every file under DIR, SMTP on a
loopback port and a mailbox for you. No root, DNS or domain needed. Ctrl-C stops it.

Outbound mail to other domains is captured in the mailbox "captured" (owned by
you) unless --deliver is given. Mail from this instance's own mailboxes (which
the daemon signs) and from senders matching --trust is trusted and fires hooks;
mail from swaks or the internet is not. A copy of the binary is kept at
DIR/bin/mailctl so the printed lines work after dev stops.

SIGHUP, or mailctl reload PID, re-reads DIR/config.toml as serve re-reads its
config (edit it to try a setting; dev writes it again from its flags at every
start).`)
	dir := fs.String("dir", ".mailctl-dev", "folder for all state: config, keys, store, queue, socket, bin/mailctl")
	smtp := fs.String("smtp", "127.0.0.1:2525", "SMTP listen address")
	domain := fs.String("domain", "mailctl.test", "mail domain")
	mailbox := fs.String("mailbox", "agent", "mailbox to create for the current user")
	var trusted stringList
	fs.Var(&trusted, "trust", "trusted sender pattern, repeatable, added to *@DOMAIN (mail between this instance's mailboxes)")
	deliver := fs.Bool("deliver", false, "deliver outbound mail to the real recipients' MX instead of the captured mailbox")
	debug := fs.Bool("debug", false, "log at debug level")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	// --trust adds senders: mail between the dev mailboxes stays trusted,
	// so the hooks that fire on it keep firing.
	if own := "*@" + *domain; !slices.Contains(trusted, own) {
		trusted = append(stringList{own}, trusted...)
	}
	if host, _, err := net.SplitHostPort(*smtp); err == nil {
		if ip := net.ParseIP(host); (ip == nil && host != "localhost") || (ip != nil && !ip.IsLoopback()) {
			fmt.Fprintf(stderr, "mailctl dev: warning: --smtp %s is not a loopback address: anyone who can reach it can send mail into this dev server\n", *smtp)
		}
	}
	cfg, err := daemon.DevConfig(daemon.DevOptions{Dir: *dir, SMTP: *smtp, Domain: *domain, Mailbox: *mailbox, Trusted: trusted})
	if errors.Is(err, os.ErrPermission) {
		// The default folder is relative: started from a folder the user
		// cannot write (/, another user's checkout), dev cannot make it;
		// a --dir given may be another user's dev folder.
		where := "run it from a folder you can write, or name one"
		if dirGiven(fs) {
			where = "name a folder of your own"
		}
		return failure(fs, fmt.Errorf("%w: %s: mailctl dev --dir ~/mailctl-dev", err, where))
	}
	if err != nil {
		return failure(fs, err)
	}
	log := newLogger(*debug)
	capture := ""
	if !*deliver {
		capture = "captured"
	}
	d, err := daemon.New(cfg, daemon.Options{Version: version, Logger: log, Capture: capture, Dev: true})
	if err != nil {
		return failure(fs, err)
	}
	for _, name := range []string{*mailbox, capture} {
		if name == "" {
			continue
		}
		if err := d.EnsureMailbox(name, uint32(os.Getuid()), uint32(os.Getgid())); err != nil {
			return failure(fs, err)
		}
	}
	sock := cfg.Paths.Socket
	root := filepath.Dir(cfg.File)
	self, err := stableCopy(filepath.Join(root, "bin", "mailctl"))
	if err != nil {
		return failure(fs, fmt.Errorf("keeping a copy of the binary: %w", err))
	}
	outbound := "captured in the mailbox \"captured\" (--deliver sends for real)"
	// The banner's send: to another domain, which lands in captured; with
	// --deliver, to the mailbox itself, as a line to paste must not mail
	// a stranger (nor say "captured" of mail that goes out).
	sendTo := `--to bob@example.org --subject hello --body "captured, not sent"`
	if capture == "" {
		outbound = "delivered to the recipients' MX (--deliver)"
		sendTo = fmt.Sprintf(`--to %s --subject hello --body "delivered here, to yourself"`, d.Address(*mailbox))
	}
	sq, mq := protocol.ShellQuote(sock), protocol.ShellQuote(self)
	wireHead, wireFlag := devWireLine(os.Geteuid())
	banner := func() {
		// The address bound, which differs from --smtp's for port 0.
		smtpAddr := *smtp
		if a := d.SMTPAddrs(); len(a) == 1 {
			smtpAddr = a[0]
		}
		fmt.Fprintf(stdout, `mailctl dev is running (Ctrl-C to stop).

  mailbox   %s  (owned by you)
  socket    %s
  SMTP      %s
  state     %s
  config    %s  (written from the flags at every start; to apply an edit now: %s reload %d)
  binary    %s  (a copy that outlives this run)
  outbound  %s
  trusted   %s  %s

Try it (each line works on its own, in any shell):
  MAILCTL_SOCKET=%s %s mailboxes list
  swaks --server %s --to %s --from someone@example.com --header "Subject: hello"
  MAILCTL_SOCKET=%s %s mail list --mailbox %s
  MAILCTL_SOCKET=%s %s send --from %s %s

%s
  MAILCTL_SOCKET=%s %s agents setup claude-code%s
`, d.Address(*mailbox), sock, smtpAddr, root, cfg.File, mq, os.Getpid(), self, outbound, strings.Join(trusted, " "), devHooksNote(os.Geteuid()),
			sq, mq, smtpAddr, d.Address(*mailbox), sq, mq, *mailbox, sq, mq, *mailbox, sendTo, wireHead, sq, mq, wireFlag)
	}
	d.SetReady(banner)
	// SIGHUP (mailctl reload PID) re-reads DIR/config.toml, as serve does
	// its config; dev writes that file from its flags at every start.
	return runDaemon(d, cfg.File, log, func() string { return devListenHint(*smtp) })
}

// dirGiven reports whether --dir was on the command line.
func dirGiven(fs *flag.FlagSet) (given bool) {
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "dir" })
	return given
}

// devHooksNote says on the banner's trusted line what trusted mail does:
// fire hooks, unless dev runs as root, whose mailboxes' hooks never run.
func devHooksNote(euid int) string {
	if euid == 0 {
		return "(hooks never run as root, so none fires here: run mailctl dev as an ordinary user for hooks)"
	}
	return "(trusted mail fires hooks)"
}

// devWireLine is the heading of the banner's agent wiring and what its
// `agents setup` line ends with. agents setup refuses root (agents act as
// their own user), so a dev run as root prints the line that only shows
// the snippet, which root can run, rather than one that fails.
func devWireLine(euid int) (head, flag string) {
	if euid == 0 {
		return `Wire it into an agent (as root, agents setup only prints Claude Code's "mailctl mcp" entry: agents act as their own user, so run mailctl dev as the agent's user to have it written):`, " --print"
	}
	return `Wire it into an agent (writes "mailctl mcp" into Claude Code's user config; agents setup --help lists others):`, ""
}

// stableCopy copies the running binary to dst (atomically) unless it is dst,
// so that lines printed by dev and harness configs written by `agents setup`
// name a binary that survives `go run` deleting its own.
func stableCopy(dst string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	if r, err := filepath.EvalSymlinks(self); err == nil {
		self = r
	}
	if self == dst {
		return dst, nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", err
	}
	src, err := os.Open(self)
	if err != nil {
		return "", err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".mailctl-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	_, err = io.Copy(tmp, src)
	if err == nil {
		err = tmp.Chmod(0o755)
	}
	if err = errors.Join(err, tmp.Close()); err != nil {
		return "", err
	}
	return dst, os.Rename(tmp.Name(), dst)
}

// devListenHint says what to do about the listener errors people hit first,
// in place of the daemon's error, whose fix (change smtp.listen) is a key
// dev writes again from --smtp at every start; "" for any other error.
// The command is given both ways a newcomer runs dev: mailctl on the PATH,
// or go run in the source tree (README's line).
func devListenHint(addr string) string {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		ln.Close()
		return ""
	}
	again := func(smtp string) string {
		return fmt.Sprintf("mailctl dev --smtp %s (from the source tree: go run ./cmd/mailctl dev --smtp %s)", smtp, smtp)
	}
	_, port, _ := net.SplitHostPort(addr)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Sprintf("mailctl dev: %s is taken by another program, or another mailctl dev (`ss -ltnp 'sport = :%s'` shows which); pick a free port: %s", addr, port, again(freeDevPort()))
	case errors.Is(err, syscall.EACCES):
		return fmt.Sprintf("mailctl dev: listening on %s needs root (ports below 1024 are privileged); dev needs no root: %s", addr, again("127.0.0.1:2525"))
	}
	return ""
}

// freeDevPort is the first loopback port from 2526 that nothing listens on,
// so the suggested line works when pasted.
func freeDevPort() string {
	for p := 2526; p < 2600; p++ {
		a := fmt.Sprintf("127.0.0.1:%d", p)
		if ln, err := net.Listen("tcp", a); err == nil {
			ln.Close()
			return a
		}
	}
	return "127.0.0.1:0"
}
