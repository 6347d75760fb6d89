package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/mailctl/mailctl/daemon"
	"github.com/mailctl/mailctl/daemon/config"
)

func init() {
	register(&command{name: "serve", group: "daemon", summary: "run the mailctl daemon (as root, under systemd)", run: cmdServe})
	register(&command{name: "dev", group: "daemon", summary: "run the whole daemon unprivileged with all state in one folder", run: cmdDev})
}

// configPath picks the config file: the flag, then $MAILCTL_CONFIG, then the default.
func configPath(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if env := os.Getenv("MAILCTL_CONFIG"); env != "" {
		return env
	}
	return config.DefaultPath
}

func newLogger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func cmdServe(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfgFlag := fs.String("config", "", "config file (default $MAILCTL_CONFIG, then "+config.DefaultPath+")")
	debug := fs.Bool("debug", false, "log at debug level")
	setUsage(fs, "serve [--config PATH]", `Runs the mailctl daemon in the foreground: the control socket, SMTP and LMTP
listeners, the outbound queue and hooks. It normally runs as root under systemd
(systemd/mailctl.service). SIGHUP reloads the config (a bad config is reported
and the running one kept); SIGTERM drains and exits.`)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	path := configPath(*cfgFlag)
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mailctl serve: %v\n", err)
		return 1
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := newLogger(level)
	d, err := daemon.New(cfg, daemon.Options{Version: version, Logger: log, Ready: notifySystemd})
	if err != nil {
		fmt.Fprintf(os.Stderr, "mailctl serve: %v\n", err)
		return 1
	}
	return runDaemon(d, path, log)
}

// runDaemon runs d until SIGTERM or SIGINT, reloading on SIGHUP.
func runDaemon(d *daemon.Daemon, cfgPath string, log *slog.Logger) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		for s := range sigs {
			if s == syscall.SIGHUP {
				if cfgPath != "" {
					d.Reload(cfgPath)
				}
				continue
			}
			log.Info("stopping", "signal", s.String())
			cancel()
			return
		}
	}()
	if err := d.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "mailctl: %v\n", err)
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
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	dir := fs.String("dir", ".mailctl-dev", "folder for all state: config, keys, store, queue, socket")
	smtp := fs.String("smtp", "127.0.0.1:2525", "SMTP listen address")
	domain := fs.String("domain", "mailctl.test", "mail domain")
	mailbox := fs.String("mailbox", "agent", "mailbox to create for the current user")
	debug := fs.Bool("debug", false, "log at debug level")
	setUsage(fs, "dev [--dir DIR] [--smtp ADDR] [--domain DOMAIN] [--mailbox NAME]", `Runs the whole daemon as the current user with every file under DIR, SMTP on a
loopback port and a mailbox for you. No root, DNS or domain needed. Ctrl-C stops it.`)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	cfg, err := daemon.DevConfig(daemon.DevOptions{Dir: *dir, SMTP: *smtp, Domain: *domain, Mailbox: *mailbox})
	if err != nil {
		fmt.Fprintf(os.Stderr, "mailctl dev: %v\n", err)
		return 1
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := newLogger(level)
	d, err := daemon.New(cfg, daemon.Options{Version: version, Logger: log})
	if err != nil {
		fmt.Fprintf(os.Stderr, "mailctl dev: %v\n", err)
		return 1
	}
	if err := daemon.PrepareDev(d, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "mailctl dev: %v\n", err)
		return 1
	}
	if err := d.EnsureMailbox(*mailbox, uint32(os.Getuid()), uint32(os.Getgid())); err != nil {
		fmt.Fprintf(os.Stderr, "mailctl dev: %v\n", err)
		return 1
	}
	sock := cfg.Paths.Socket
	self, _ := os.Executable()
	if self == "" {
		self = "mailctl"
	}
	banner := func() {
		fmt.Printf(`mailctl dev is running (Ctrl-C to stop).

  mailbox   %s  (owned by you)
  socket    %s
  SMTP      %s
  state     %s

Try it:
  export MAILCTL_SOCKET=%s
  mailctl mailboxes list
  swaks --server %s --to %s --from someone@example.com --header "Subject: hello"

Wire it into an agent (Claude Code):
  claude mcp add mailctl --env MAILCTL_SOCKET=%s -- %s mcp
`, d.Address(*mailbox), sock, *smtp, filepath.Dir(cfg.Paths.StateDir), sock, *smtp, d.Address(*mailbox), sock, self)
	}
	d.SetReady(banner)
	return runDaemon(d, "", log)
}
