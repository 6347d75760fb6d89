package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/outbound/dkim"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/daemon/setup"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// DevOptions configure the embedded default that `mailctl dev` runs.
type DevOptions struct {
	Dir     string // all state lives here
	SMTP    string // SMTP listen address
	Domain  string
	Mailbox string
	// Trusted are the trusted_senders patterns written to the dev config.
	Trusted []string
}

// DevConfig builds the configuration of `mailctl dev`: every path under
// dir, SMTP on a loopback port, one domain, no root needed.
func DevConfig(o DevOptions) (*config.Config, error) {
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	// A dev instance already running in dir holds the lock: refuse here,
	// before the config it re-reads on SIGHUP, its certificate or its keys
	// are rewritten from this start's flags. (New takes the lock for good.)
	lock, err := acquireLock(filepath.Join(dir, "mailctl.sock"))
	if err != nil {
		return nil, err
	}
	lock.Close()
	c := &config.Config{
		Hostname: "localhost",
		Domains:  []string{o.Domain},
		Paths: config.Paths{
			StateDir: filepath.Join(dir, "state"),
			Socket:   filepath.Join(dir, "mailctl.sock"),
			DKIMDir:  filepath.Join(dir, "dkim"),
		},
		SMTP:  config.SMTP{Listen: []string{o.SMTP}},
		Trust: config.Trust{TrustedSenders: o.Trusted},
	}
	cert, key, err := setup.EnsureSelfSigned(filepath.Join(dir, "tls"), "localhost", "127.0.0.1", "::1", o.Domain)
	if err != nil {
		return nil, fmt.Errorf("dev certificate: %w", err)
	}
	c.SMTP.TLSCert, c.SMTP.TLSKey = cert, key
	if err := EnsureDevKeys(c.Paths.DKIMDir); err != nil {
		return nil, err
	}
	// Validation and defaults run through the same path as a config file.
	text, err := configText(c)
	if err != nil {
		return nil, err
	}
	parsed, err := config.Parse(text)
	if err != nil {
		return nil, fmt.Errorf("dev config: %w", err)
	}
	if err := store.WriteFileAtomic(filepath.Join(dir, "config.toml"), text, 0o600); err != nil {
		return nil, err
	}
	parsed.File = filepath.Join(dir, "config.toml")
	return parsed, nil
}

func configText(c *config.Config) ([]byte, error) {
	return []byte(fmt.Sprintf(protocol.DevConfigHeader+` at %s; rewritten from its flags at every start.
hostname = %q
domains = [%q]

[paths]
state_dir = %q
socket = %q
dkim_dir = %q

[smtp]
listen = [%q]
tls_cert = %q
tls_key = %q

# Mail whose From is authenticated and matches one of these is trusted="true",
# and only trusted mail fires hooks. Mail between this instance's mailboxes is
# authenticated (the daemon signs it); mail from swaks or the internet is not.
# Set with mailctl dev --trust PATTERN (repeatable).
[trust]
trusted_senders = [%s]
`, time.Now().UTC().Format(time.RFC3339), c.Hostname, c.Domains[0], c.Paths.StateDir, c.Paths.Socket, c.Paths.DKIMDir,
		c.SMTP.Listen[0], c.SMTP.TLSCert, c.SMTP.TLSKey, quoteList(c.Trust.TrustedSenders))), nil
}

func quoteList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// EnsureMailbox creates a registry mailbox for uid if it does not exist yet
// (used by `mailctl dev` for the current user's mailbox).
func (d *Daemon) EnsureMailbox(name string, uid, gid uint32) error {
	return d.ctl.EnsureMailbox(name, uid, gid)
}

// Address is the mail address of a mailbox on this daemon's primary domain.
func (d *Daemon) Address(name string) string { return name + "@" + d.cfg().PrimaryDomain() }

// SetReady replaces the function called once the daemon's listeners are up.
func (d *Daemon) SetReady(f func()) { d.opts.Ready = f }

// EnsureDevKeys generates an Ed25519 and an RSA DKIM key in dir unless keys
// are already there, so dev mail is signed the way production mail is.
func EnsureDevKeys(dir string) error {
	keys, err := dkim.LoadKeys(dir)
	if len(keys) > 0 {
		return nil
	}
	if _, bad := errors.AsType[*safeio.SecretError](err); bad {
		return fmt.Errorf("dev DKIM key: %w", err)
	}
	for _, k := range []struct{ sel, alg string }{{"dev-ed25519", "ed25519"}, {"dev-rsa", "rsa"}} {
		if _, err := dkim.GenerateKey(dir, k.sel, k.alg); err != nil {
			return fmt.Errorf("dev DKIM key: %w", err)
		}
	}
	return nil
}

// devKeyRecords answers the DKIM key records of a dev instance's domains
// from its own keys, and asks r everything else. A dev instance has no DNS of
// its own, so without them its signatures on mail between its own mailboxes
// read as permerror (no key) while that mail is trusted, submitted over the
// socket by a mailbox whose owner the daemon knows by uid: the checks now
// find what they find on a host whose records are published (dkim=pass,
// aligned).
type devKeyRecords struct {
	resolver.Resolver
	txt map[string]string // selector._domainkey.domain → the record
}

func (r devKeyRecords) LookupTXT(ctx context.Context, name string) ([]string, error) {
	if v, ok := r.txt[strings.ToLower(strings.TrimSuffix(name, "."))]; ok {
		return []string{v}, nil
	}
	return r.Resolver.LookupTXT(ctx, name)
}

// withDevKeyRecords is r answering the records of the keys in cfg's DKIM
// directory for each of cfg's domains; r itself when there are none.
func withDevKeyRecords(r resolver.Resolver, cfg *config.Config) resolver.Resolver {
	keys, err := dkim.LoadKeys(cfg.Paths.DKIMDir)
	if err != nil || len(keys) == 0 {
		return r
	}
	txt := map[string]string{}
	for _, dom := range cfg.Domains {
		for _, k := range keys {
			txt[strings.ToLower(k.Selector+"._domainkey."+dom)] = k.TXTValue()
		}
	}
	return devKeyRecords{Resolver: r, txt: txt}
}
