package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/doctor"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/daemon/setup"
	"github.com/mailctl/mailctl/protocol"
)

func init() {
	register(&command{name: "doctor", group: "operate", summary: "check the host, keys, DNS and daemon; say what to fix", run: cmdDoctor})
}

func cmdDoctor(args []string) int {
	cf := newClientFlags("doctor", "doctor [--config PATH] [--json] [--socket PATH]", `Checks the config, DKIM keys, the files holding secrets (owner root, mode 0600),
owners and modes of every path, the daemon and its version, the SMTP listeners,
the TLS certificate the daemon serves (STARTTLS, compared with the file, and its
expiry), the published DNS (MX, SPF, DKIM, DMARC) against the local keys, the
queue and the mailboxes. Each finding has an id, a severity (ok, info, warn,
fail) and a fix.

As root the checks run here, plus what only the running daemon knows (config
keys waiting for a restart); any other user gets the checks the daemon runs
for it (its status verb), so no sudo is needed; root too when given --socket or
$MAILCTL_SOCKET and no config. A dev instance (mailctl dev) checks what matters
there, not owners, role addresses or DNS. Exits 1 when a check fails.`).withJSON()
	cf.fs.StringVar(&cf.config, "config", "", "config file (default $MAILCTL_CONFIG, then "+config.DefaultPath+"; root only)")
	cfgFlag := &cf.config
	if code, ok := parseFlags(cf.fs, args); !ok {
		return code
	}
	var findings []protocol.Finding
	source := "local"
	// Root checks the host's files, unless pointed at a daemon (a dev
	// instance's socket) and not at a config.
	askDaemon := *cfgFlag == "" && os.Getenv("MAILCTL_CONFIG") == "" && (cf.socket != "" || os.Getenv("MAILCTL_SOCKET") != "")
	if os.Geteuid() == 0 && !askDaemon {
		findings = doctorLocal(cf, configPath(*cfgFlag))
	} else {
		source = "daemon"
		findings = doctorRemote(cf)
	}
	if cf.json {
		printJSON(map[string]any{"source": source, "findings": findings, "failed": doctor.Failed(findings)})
	} else {
		printFindings(findings, source)
	}
	if doctor.Failed(findings) {
		return 1
	}
	return 0
}

func doctorLocal(cf *clientFlags, path string) []protocol.Finding {
	server := ""
	// A file with a bad key or value still names the daemon's socket
	// (cf.dial reads it so) and resolver: doctor is how an edited config
	// is tested before a reload, beside the daemon running the one before.
	if cfg, err := config.LoadForChecks(path); err == nil {
		server = cfg.DNS.Resolver
	}
	// The daemon's status says what only the running daemon knows (keys
	// waiting for a restart); the files are checked here.
	var fromDaemon []protocol.Finding
	env := doctor.Env{
		Resolver: resolver.New(server, 5*time.Second),
		DNSSEC:   resolver.NewExchanger(server, 5*time.Second),
		Root:     true,
		SocketAnswers: func() (string, error) {
			var st protocol.Status
			c := clientFlags{socket: cf.socket, config: cf.config}
			if err := c.callTimeout(protocol.VerbStatus, nil, &st, 30*time.Second); err != nil {
				return "", err
			}
			fromDaemon = doctor.Runtime(st.Findings)
			return st.Server, nil
		},
		ClientVersion: version,
		LocalAddrs:    setup.PublicAddrs,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, f := doctor.CheckFile(ctx, path, env)
	f = append(f, fromDaemon...)
	doctor.Sort(f)
	return f
}

// doctorRemote asks the daemon, which runs the checks with its own rights.
func doctorRemote(cf *clientFlags) []protocol.Finding {
	// A config named (--config, $MAILCTL_CONFIG) is the one the user
	// means, not the default: what is said of a config names it. Only
	// another user than root gets here with one named, and the checks of
	// the file itself are root's.
	named := ""
	if cf.config != "" || os.Getenv("MAILCTL_CONFIG") != "" {
		named = configPath(cf.config)
	}
	sock, err := daemonSocket(cf.socket, cf.config)
	if err != nil {
		fix := "name the daemon's socket with --socket or $MAILCTL_SOCKET, or a config you can read"
		if named != "" {
			fix += "; the checks of " + named + " itself need root: sudo mailctl doctor --config " + named
		}
		return []protocol.Finding{{ID: "daemon.socket", Severity: doctor.Fail, Message: err.Error(), Fix: fix}}
	}
	cf.socket = sock // found once: the call below does not read the config again
	var st protocol.Status
	err = cf.callTimeout(protocol.VerbStatus, nil, &st, 60*time.Second)
	if protocol.CodeOf(err) == protocol.CodeForbidden {
		// status is open to every user: a refusal is the socket itself
		// closed to this one (another user's mailctl dev), which the
		// message says; restarting or upgrading would not change it.
		return []protocol.Finding{{ID: "daemon.socket", Severity: doctor.Fail, Message: err.Error(),
			Fix: "name a daemon your user may reach with --socket or $MAILCTL_SOCKET (your own mailctl dev's), or ask the operator: sudo mailctl doctor"}}
	}
	if err != nil && protocol.CodeOf(err) != protocol.CodeUnavailable && protocol.CodeOf(err) != protocol.CodeTimeout {
		return []protocol.Finding{{ID: "daemon.status", Severity: doctor.Fail,
			Message: fmt.Sprintf("the daemon refused the status request: %v", err),
			Fix:     "upgrade the daemon and restart it with " + protocol.RestartLine() + "; or run `sudo mailctl doctor`"}}
	}
	if err != nil {
		msg := fmt.Sprintf("the daemon did not answer the status request: %v", err)
		fix := protocol.StartCommand() + " (" + protocol.LogsHint() + "); `sudo mailctl doctor` checks the host without the daemon"
		if named != "" {
			// Not the service's default: the daemon of the file named,
			// which may not be the service's at all.
			fix = "start the daemon " + named + " configures (" + startCommand(named) + "); `sudo mailctl doctor --config " + protocol.ShellQuote(named) + "` checks it without the daemon"
		} else if _, serr := os.Stat(configPath("")); errors.Is(serr, fs.ErrNotExist) {
			// The unit does not start without a config (its
			// ConditionPathExists): setup comes first, and
			// `systemctl start` would do nothing.
			msg = "no daemon answers, and there is no " + configPath("") + ": the service cannot start before setup"
			fix = "this host is not set up: sudo mailctl setup (it writes " + configPath("") + " and starts the service); or try mailctl dev, no root needed"
		}
		return []protocol.Finding{{ID: "daemon.down", Severity: doctor.Fail, Message: msg, Fix: fix}}
	}
	f := append([]protocol.Finding(nil), st.Findings...)
	if st.Server != "" && st.Server != version {
		f = append(f, protocol.Finding{ID: "daemon.version_drift", Severity: doctor.Warn,
			Message: fmt.Sprintf("the daemon runs %s but this binary is %s", st.Server, version),
			Fix:     protocol.RestartLine()})
	}
	doctor.Sort(f)
	return f
}

func printFindings(f []protocol.Finding, source string) {
	counts := map[string]int{}
	for _, x := range f {
		counts[x.Severity]++
		// Findings quote what the host and DNS hold (records, paths).
		fmt.Fprintf(stdout, "%-4s  %-24s %s\n", inert(x.Severity), inert(x.ID), inert(x.Message))
		if x.Fix != "" && x.Severity != doctor.OK {
			fmt.Fprintf(stdout, "      %-24s fix: %s\n", "", inert(x.Fix))
		}
	}
	how := "checked locally"
	if source == "daemon" {
		how = "checked by the daemon for you"
		if len(f) == 1 {
			switch f[0].ID {
			case "daemon.down":
				how = "no daemon to check with"
			case "daemon.socket":
				// A daemon may run: this user cannot reach it.
				how = "no daemon this user can reach"
			}
		}
	}
	fmt.Fprintf(stdout, "\n%d fail, %d warn, %d ok (%s)\n", counts[doctor.Fail], counts[doctor.Warn], counts[doctor.OK], how)
}
