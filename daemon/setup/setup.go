// Package setup prepares a host for mailctl: it writes the config, creates the
// directories with their owners and modes, generates DKIM keys, optionally a
// self-signed certificate and the catch-all user, installs the systemd unit
// and prints the DNS records to publish. Running it again is safe: what exists
// is kept, what is missing is added, and keys are never regenerated.
package setup

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// Options are the answers setup needs. Empty fields are asked for when
// Interactive is set, and are errors otherwise.
type Options struct {
	// Root installs under a prefix (tests, packaging); empty is the real host.
	Root string
	// Interactive prompts on Out and reads answers from In.
	Interactive bool
	In          io.Reader

	Domain         string
	Hostname       string
	TLSCert        string // existing certificate and key, or
	TLSKey         string
	SelfSigned     bool // generate a self-signed certificate for Hostname
	TrustedSenders []string
	CatchAll       string   // mailbox (and system user) receiving mail for unknown local parts
	SMTPListen     []string // default 0.0.0.0:25 and [::]:25
	Socket         string   // default /run/mailctl/mailctl.sock (under Root)
	// CreateUsers creates missing system users even under Root.
	CreateUsers bool
	// InstallUnit installs and enables the systemd unit. Run sets it when
	// Root is empty and systemd is running, unless NoUnit is set.
	NoUnit bool

	// Seams for tests; nil means the real thing.
	Now        func() time.Time
	LocalAddrs func() ([]net.IP, error)
	Command    func(ctx context.Context, name string, args ...string) error
	SystemdUp  func() bool
	// DaemonPID is the process id of the daemon answering on socket, 0
	// when none does.
	DaemonPID func(ctx context.Context, socket string) int

	// unitPrefix lets tests install the unit under a temporary directory.
	unitPrefix string
}

// ConfigPath is where setup writes the config for opts.Root.
func ConfigPath(root string) string { return filepath.Join(root, config.DefaultPath) }

func (o *Options) defaults() {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.LocalAddrs == nil {
		o.LocalAddrs = PublicAddrs
	}
	if o.Command == nil {
		o.Command = runCommand
	}
	if o.SystemdUp == nil {
		o.SystemdUp = protocol.SystemdRuns
	}
	if o.DaemonPID == nil {
		o.DaemonPID = protocol.PIDAt
	}
	if o.In == nil {
		o.In = os.Stdin
	}
}

func runCommand(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// step records what setup did, for the summary it prints.
type step struct {
	out io.Writer
}

func (s step) did(format string, args ...any) { fmt.Fprintf(s.out, "  created  "+format+"\n", args...) }
func (s step) kept(format string, args ...any) {
	fmt.Fprintf(s.out, "  kept     "+format+"\n", args...)
}
func (s step) note(format string, args ...any) {
	fmt.Fprintf(s.out, "  note     "+format+"\n", args...)
}

// Run prepares the host described by opts and writes what it did, then the
// DNS records to publish, to out.
func Run(ctx context.Context, opts Options, out io.Writer) error {
	opts.defaults()
	if opts.Root != "" {
		abs, err := filepath.Abs(opts.Root)
		if err != nil {
			return err
		}
		opts.Root = abs
	}
	st := step{out}
	cfgPath := ConfigPath(opts.Root)
	cfg, existing, err := loadExisting(cfgPath)
	if err != nil {
		return err
	}
	if existing {
		fmt.Fprintf(out, "Using the existing config %s (setup never rewrites it).\n", cfgPath)
		noteIgnoredFlags(&opts, cfg, cfgPath, st)
	} else if cfg, err = newConfig(&opts, cfgPath, out, st); err != nil {
		return err
	}
	if err := makeDirs(cfg, opts.Root, st); err != nil {
		return err
	}
	if err := ensureTLS(&opts, cfg, st); err != nil {
		return err
	}
	keys, err := ensureKeys(cfg, opts.Now(), st)
	if err != nil {
		return err
	}
	if err := ensureCatchAll(ctx, &opts, cfg, st); err != nil {
		return err
	}
	if err := ensureUnit(ctx, &opts, cfg, st); err != nil {
		return err
	}
	ips, _ := opts.LocalAddrs()
	fmt.Fprintf(out, "\nPublish these DNS records (zone-file syntax):\n\n")
	fmt.Fprint(out, DNSRecords(cfg, keys, ips))
	fmt.Fprintf(out, "\nThen run `mailctl doctor` to check the host and the published records.\n")
	return nil
}

// noteIgnoredFlags says, loudly, which flags would have changed the existing
// config and were therefore ignored.
func noteIgnoredFlags(opts *Options, cfg *config.Config, cfgPath string, st step) {
	if opts.Domain != "" && !cfg.IsLocalDomain(opts.Domain) {
		st.note("--domain %s ignored: the config lists %v; edit it by hand to add a domain", opts.Domain, cfg.Domains)
	}
	var ignored []string
	for _, f := range []struct {
		name string
		set  bool
	}{{"--hostname", opts.Hostname != "" && !strings.EqualFold(strings.TrimSuffix(opts.Hostname, "."), cfg.Hostname)},
		{"--tls-cert", opts.TLSCert != "" && opts.TLSCert != cfg.SMTP.TLSCert}, {"--tls-key", opts.TLSKey != "" && opts.TLSKey != cfg.SMTP.TLSKey},
		{"--self-signed", opts.SelfSigned && cfg.SMTP.TLSCert == ""},
		{"--trusted-sender", len(opts.TrustedSenders) > 0 && !sameSet(opts.TrustedSenders, cfg.Trust.TrustedSenders)},
		{"--catch-all", opts.CatchAll != "" && opts.CatchAll != cfg.CatchAll},
		{"--smtp-listen", len(opts.SMTPListen) > 0 && !sameSet(opts.SMTPListen, cfg.SMTP.Listen)},
		{"--socket", opts.Socket != "" && opts.Socket != cfg.Paths.Socket}} {
		if f.set {
			ignored = append(ignored, f.name)
		}
	}
	if len(ignored) > 0 {
		st.note("%s ignored with an existing config: edit %s to change it", strings.Join(ignored, ", "), cfgPath)
	}
}

// sameSet reports whether a and b hold the same values, in any order and
// case: a re-run with the answers the config already has changes nothing,
// so nothing of it is reported as ignored.
func sameSet(a, b []string) bool {
	norm := func(l []string) []string {
		out := make([]string, len(l))
		for i, v := range l {
			out[i] = strings.ToLower(strings.TrimSpace(v))
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	return slices.Equal(norm(a), norm(b))
}

// newConfig asks for what is missing when interactive, checks the answers
// and writes the first config.
func newConfig(opts *Options, cfgPath string, out io.Writer, st step) (*config.Config, error) {
	if opts.Interactive {
		if err := ask(opts, out); err != nil {
			return nil, err
		}
	}
	if err := validate(opts); err != nil {
		return nil, err
	}
	return writeConfig(opts, cfgPath, st)
}

// loadExisting reads the config at path if there is one. A config that does
// not parse stops setup: it must never be silently replaced.
func loadExisting(path string) (*config.Config, bool, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	cfg, err := config.Load(path)
	if err != nil {
		return nil, true, fmt.Errorf("%w\nfix the config (or move it away to start over), then run setup again", err)
	}
	return cfg, true, nil
}

func validate(o *Options) error {
	o.Domain = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(o.Domain), "."))
	o.Hostname = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(o.Hostname), "."))
	if o.Domain == "" {
		return errors.New("--domain is required: the mail domain, e.g. example.com")
	}
	if !config.ValidDomain(o.Domain) {
		return fmt.Errorf("--domain %q is not a domain name", o.Domain)
	}
	o.Hostname = cmp.Or(o.Hostname, "mx."+o.Domain)
	if !config.ValidDomain(o.Hostname) {
		return fmt.Errorf("--hostname %q is not a host name", o.Hostname)
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if o.SelfSigned && o.TLSCert != "" {
		return errors.New("choose either --self-signed or --tls-cert/--tls-key")
	}
	if o.TLSKey != "" {
		// The daemon would refuse to start with it; say so before
		// writing anything.
		if err := safeio.CheckSecret(o.TLSKey); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("--tls-key %s does not exist: get the certificate first (docs/setup.md, "+
				"\"Renewing the certificate\", copies certbot's into /etc/mailctl/tls/), or set up with --self-signed "+
				"and point smtp.tls_cert and smtp.tls_key at a CA certificate later", o.TLSKey)
		} else if err != nil {
			return fmt.Errorf("--tls-key: %w", err)
		}
	}
	if o.CatchAll != "" {
		if err := store.ValidMailboxName(o.CatchAll); err != nil {
			return fmt.Errorf("--catch-all: %w", err)
		}
	}
	for _, a := range o.SMTPListen {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("--smtp-listen %q is not host:port", a)
		}
	}
	for _, p := range o.TrustedSenders {
		if strings.ContainsAny(p, " \t\r\n\"") || !strings.Contains(p, "@") {
			return fmt.Errorf("--trusted-sender %q: use an address or a pattern like *@example.com", p)
		}
	}
	return nil
}

// ask fills empty answers from the operator.
func ask(o *Options, out io.Writer) error {
	r := bufio.NewReader(o.In)
	prompt := func(q, def string) (string, error) {
		if def != "" {
			fmt.Fprintf(out, "%s [%s]: ", q, def)
		} else {
			fmt.Fprintf(out, "%s: ", q)
		}
		line, err := r.ReadString('\n')
		if err != nil && !(errors.Is(err, io.EOF) && line != "") {
			if errors.Is(err, io.EOF) {
				return "", fmt.Errorf("no answer to %q (stdin closed): use --non-interactive with flags to script setup", q)
			}
			return "", err
		}
		return cmp.Or(strings.TrimSpace(line), def), nil
	}
	var err error
	if o.Domain == "" {
		if o.Domain, err = prompt("Mail domain (the part after @)", ""); err != nil {
			return err
		}
	}
	if o.Hostname == "" {
		def := "mx." + strings.ToLower(strings.TrimSpace(o.Domain))
		if o.Hostname, err = prompt("Host name of this server (its MX)", def); err != nil {
			return err
		}
	}
	if o.TLSCert == "" && !o.SelfSigned {
		a, err := prompt("TLS: path of a certificate, or \"self-signed\"", "self-signed")
		if err != nil {
			return err
		}
		if a == "self-signed" {
			o.SelfSigned = true
		} else {
			o.TLSCert = a
			if o.TLSKey, err = prompt("TLS: path of the private key", ""); err != nil {
				return err
			}
		}
	}
	if len(o.TrustedSenders) == 0 {
		a, err := prompt("Trusted senders, comma-separated (e.g. you@example.com, *@example.com)", "")
		if err != nil {
			return err
		}
		for _, p := range strings.Split(a, ",") {
			if p = strings.TrimSpace(p); p != "" {
				o.TrustedSenders = append(o.TrustedSenders, p)
			}
		}
	}
	return nil
}

// lookupUser resolves a user name or numeric uid.
func lookupUser(name string) (*user.User, error) {
	if u, err := user.Lookup(name); err == nil {
		return u, nil
	}
	return user.LookupId(name)
}
