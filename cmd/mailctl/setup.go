package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"golang.org/x/sys/unix"

	"github.com/mailctl/mailctl/daemon/setup"
)

func init() {
	register(&command{name: "setup", group: "operate", summary: "prepare this host: config, keys, directories, unit, DNS records", run: cmdSetup})
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func cmdSetup(args []string) int {
	fs := newFlagSet("setup", "setup [--non-interactive --domain D --hostname H] [flags]", `Prepares this host for mailctl: writes /etc/mailctl/config.toml (only if there is
none), creates the directories with their owners and modes, generates DKIM keys
(Ed25519 and RSA), a self-signed certificate if asked, the catch-all user, installs
and enables the systemd unit, and prints the DNS records to publish.

Without --non-interactive it asks for what the flags do not give. Running it again
is safe: an existing config and existing keys are kept, missing pieces are added.`)
	var o setup.Options
	var trusted, listen stringList
	nonInteractive := fs.Bool("non-interactive", false, "never prompt; missing answers are errors")
	fs.StringVar(&o.Domain, "domain", "", "mail domain (the part after @)")
	fs.StringVar(&o.Hostname, "hostname", "", "this host's name, its MX (default mx.DOMAIN)")
	fs.StringVar(&o.TLSCert, "tls-cert", "", "TLS certificate (PEM, full chain) for STARTTLS")
	fs.StringVar(&o.TLSKey, "tls-key", "", "TLS private key (PEM)")
	fs.BoolVar(&o.SelfSigned, "self-signed", false, "generate a self-signed certificate for the host name")
	fs.Var(&trusted, "trusted-sender", "trusted sender address or pattern like *@example.com (repeatable)")
	fs.StringVar(&o.CatchAll, "catch-all", "", "mailbox and system user receiving mail for unknown local parts")
	fs.StringVar(&o.Root, "root", "", "install under this prefix (tests, packaging); no unit, no users")
	fs.Var(&listen, "smtp-listen", "SMTP listen address host:port (repeatable; default 0.0.0.0:25 and [::]:25)")
	fs.StringVar(&o.Socket, "socket", "", "control socket path (default /run/mailctl/mailctl.sock)")
	fs.BoolVar(&o.CreateUsers, "create-users", false, "create missing system users even with --root")
	fs.BoolVar(&o.NoUnit, "no-unit", false, "do not install or enable the systemd unit")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(fs, "unexpected argument %q", fs.Arg(0))
	}
	o.TrustedSenders, o.SMTPListen = trusted, listen
	o.Interactive = !*nonInteractive
	o.In = os.Stdin
	if o.Root == "" && os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "mailctl setup: run as root (sudo mailctl setup), or give --root DIR to install under a prefix")
		return 4
	}
	if o.Interactive && !isTerminal(os.Stdin) {
		fmt.Fprintln(stderr, "mailctl setup: stdin is not a terminal; reading answers from it")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := setup.Run(ctx, o, stdout); err != nil {
		return failure(fs, err)
	}
	return 0
}
