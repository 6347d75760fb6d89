package setup

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/outbound/dkim"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
	"github.com/mailctl/mailctl/systemd"
)

// tomlString quotes s as a TOML basic string. JSON's escapes (\" \\ \n \uXXXX)
// are all valid TOML escapes.
func tomlString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func tomlList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = tomlString(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// renderConfig writes the config text for opts. Only what differs from the
// documented defaults is written, with comments saying where the rest is.
func renderConfig(o *Options) string {
	under := func(p string) string { return filepath.Join(o.Root, p) }
	var b strings.Builder
	fmt.Fprintf(&b, "# mailctl configuration, written by `mailctl setup` on %s.\n", o.Now().UTC().Format("2006-01-02"))
	b.WriteString("# Every key and its default is in docs/configuration.md; an unknown key is an error.\n")
	b.WriteString("# The daemon never rewrites this file. Reload after editing: systemctl reload mailctl\n\n")
	fmt.Fprintf(&b, "hostname = %s\n", tomlString(o.Hostname))
	fmt.Fprintf(&b, "domains = %s\n", tomlList([]string{o.Domain}))
	if o.CatchAll != "" {
		fmt.Fprintf(&b, "catch_all = %s\n", tomlString(o.CatchAll))
	}
	socket := cmp.Or(o.Socket, under(protocol.DefaultSocket))
	b.WriteString("\n[paths]\n")
	fmt.Fprintf(&b, "state_dir = %s\n", tomlString(under("/var/lib/mailctl")))
	fmt.Fprintf(&b, "socket = %s\n", tomlString(socket))
	fmt.Fprintf(&b, "dkim_dir = %s\n", tomlString(under("/etc/mailctl/dkim")))
	b.WriteString("\n[smtp]\n")
	listen := o.SMTPListen
	if len(listen) == 0 {
		listen = config.DefaultSMTPListen
	}
	fmt.Fprintf(&b, "listen = %s\n", tomlList(listen))
	cert, key := o.TLSCert, o.TLSKey
	if o.SelfSigned {
		cert, key = under("/etc/mailctl/tls/cert.pem"), under("/etc/mailctl/tls/key.pem")
	}
	if cert != "" {
		fmt.Fprintf(&b, "tls_cert = %s\ntls_key = %s\n", tomlString(cert), tomlString(key))
	} else {
		b.WriteString("# A copy of the certificate and key (certbot's deploy hook in docs/setup.md keeps it current):\n")
		b.WriteString("# tls_cert = \"/etc/mailctl/tls/cert.pem\"\n# tls_key = \"/etc/mailctl/tls/key.pem\"\n")
	}
	b.WriteString("\n[trust]\n")
	b.WriteString("# Authenticated mail from these senders is marked trusted; hooks fire on it.\n")
	fmt.Fprintf(&b, "trusted_senders = %s\n", tomlList(o.TrustedSenders))
	b.WriteString("\n# Operator-declared mailboxes cannot be deleted or changed by agents.\n")
	b.WriteString("# Agents create their own with `mailctl mailboxes create` or the mailbox_create tool.\n")
	if o.CatchAll != "" {
		fmt.Fprintf(&b, "[[mailboxes]]\nname = %s\nowner = %s\n", tomlString(o.CatchAll), tomlString(o.CatchAll))
	} else {
		b.WriteString("# [[mailboxes]]\n# name = \"agent\"\n# owner = \"agent\"\n")
	}
	b.WriteString("\n# Role addresses every domain must answer (RFC 5321, RFC 2142), kept for the operator:\n")
	b.WriteString("# their mail lands in the mailboxes' inbox folders under state_dir. Only root may create role mailboxes.\n")
	for _, role := range config.RequiredRoleAddresses {
		if role != o.CatchAll {
			fmt.Fprintf(&b, "[[mailboxes]]\nname = %s\nowner = \"root\"\n", tomlString(role))
		}
	}
	b.WriteString("\n# [metrics]\n# listen = \"127.0.0.1:9325\"\n")
	return b.String()
}

// writeConfig writes the config (root 0640) when there is none. It is created
// exclusively so a concurrent setup cannot clobber one.
func writeConfig(o *Options, path string, st step) (*config.Config, error) {
	text := renderConfig(o)
	cfg, err := config.Parse([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("the config setup generated does not validate (a bug in setup): %w", err)
	}
	cfg.File = path
	if err := mkdirMode(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	// A crash leaves the old state or the whole file, never a part that the
	// next run would keep; the file is linked into place, so a concurrent
	// setup's config is never replaced.
	if err := writeExclusive(path, []byte(text), 0o640); err != nil {
		return nil, fmt.Errorf("writing config: %w", err)
	}
	st.did("%s (0640)", path)
	return cfg, nil
}

// chownRoot gives path to root when setup runs as root; as another user (tests
// under --root) the file stays the caller's.
func chownRoot(path string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	if err := os.Lchown(path, 0, 0); err != nil {
		return fmt.Errorf("chown %s: %w", path, err)
	}
	return nil
}

// mkdirMode creates dir (and parents, 0755) and gives it mode, whatever
// the umask, without following a symlink in the last component, even one
// swapped in after the look (safeio's TestChmodDirFollowsNoLink).
func mkdirMode(dir string, mode os.FileMode) error {
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := safeio.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return err
		}
		if err := safeio.MkdirAll(dir, mode); err != nil {
			return err
		}
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%s exists and is not a directory", dir)
	}
	return safeio.ChmodDir(dir, mode)
}

// Dir is one directory setup creates, with its mode; Dirs lists them for
// doctor and the tests.
type Dir struct {
	Path string
	Mode os.FileMode
	// CreateOnly leaves an existing directory as it is: the socket may be
	// put in a shared directory such as /tmp whose mode is not ours.
	CreateOnly bool
}

// Dirs returns the directories of cfg and the modes they must have.
func Dirs(cfg *config.Config) []Dir {
	return []Dir{
		{cfg.Paths.StateDir, 0o711, false},
		{cfg.Paths.RegistryDir(), 0o700, false},
		{filepath.Join(cfg.Paths.RegistryDir(), "mailboxes"), 0o700, false},
		{filepath.Join(cfg.Paths.RegistryDir(), "hooks"), 0o700, false},
		{cfg.Paths.QueueDir(), 0o700, false},
		{cfg.Paths.MailboxesDir(), 0o711, false},
		{cfg.Paths.DKIMDir, 0o700, false},
		{filepath.Dir(cfg.Paths.Socket), 0o755, true},
	}
}

func makeDirs(cfg *config.Config, root string, st step) error {
	for _, d := range Dirs(cfg) {
		fi, err := os.Lstat(d.Path)
		if err == nil && fi.IsDir() && (d.CreateOnly || fi.Mode().Perm() == d.Mode) {
			continue
		}
		if err := mkdirMode(d.Path, d.Mode); err != nil {
			return fmt.Errorf("creating %s: %w", d.Path, err)
		}
		if err := chownRoot(d.Path); err != nil {
			return err
		}
		st.did("%s/ (%04o)", d.Path, d.Mode)
	}
	return nil
}

// ensureTLS generates the self-signed certificate the config names when it is
// missing. A certificate the operator supplied is checked for presence, and
// its key against the rule the daemon holds secrets to (a link, or a key
// others can read, would stop the daemon from starting).
func ensureTLS(o *Options, cfg *config.Config, st step) error {
	cert, key := cfg.SMTP.TLSCert, cfg.SMTP.TLSKey
	if cert == "" {
		st.note("no TLS certificate: STARTTLS is not offered until smtp.tls_cert and smtp.tls_key are set")
		return nil
	}
	_, errC := os.Stat(cert)
	_, errK := os.Lstat(key)
	if errC == nil && errK == nil {
		if err := safeio.CheckSecret(key); err != nil {
			return fmt.Errorf("smtp.tls_key: %w", err)
		}
		st.kept("%s", cert)
		return nil
	}
	selfSignedPath := filepath.Join(o.Root, "/etc/mailctl/tls/cert.pem")
	if cert != selfSignedPath {
		st.note("%s or %s is missing: the daemon cannot offer STARTTLS until they exist", cert, key)
		return nil
	}
	if err := mkdirMode(filepath.Dir(cert), 0o755); err != nil {
		return err
	}
	certPEM, keyPEM, err := SelfSigned(o.Now(), cfg.Hostname)
	if err != nil {
		return err
	}
	if err := writeExclusive(key, keyPEM, 0o600); err != nil {
		return err
	}
	if err := writeExclusive(cert, certPEM, 0o644); err != nil {
		return err
	}
	st.did("%s (self-signed for %s; replace it with a CA-issued certificate when you can)", cert, cfg.Hostname)
	return nil
}

func writeExclusive(path string, data []byte, mode os.FileMode) error {
	return safeio.WriteFile(path, data, safeio.Options{Perm: mode, NoReplace: true, Prepare: chownRootFile})
}

// chownRootFile gives f to root when setup runs as root (see chownRoot).
func chownRootFile(f *os.File) error {
	if os.Geteuid() != 0 {
		return nil
	}
	return f.Chown(0, 0)
}

// SelfSigned returns a PEM certificate and PKCS#8 key (ECDSA P-256) for
// hosts (names or IP addresses; the first is the subject), valid for ten
// years from now. Peers that verify certificates will not trust it.
func SelfSigned(now time.Time, hosts ...string) (certPEM, keyPEM []byte, err error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		return nil, nil, fmt.Errorf("creating certificate: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

// ensureKeys makes sure there is at least one Ed25519 and one RSA key; it
// never touches a key that exists.
func ensureKeys(cfg *config.Config, now time.Time, st step) ([]*dkim.Key, error) {
	keys, err := dkim.LoadKeys(cfg.Paths.DKIMDir)
	if err != nil {
		return nil, fmt.Errorf("%w (fix or move the broken key; setup does not replace keys)", err)
	}
	have := map[string]bool{}
	for _, k := range keys {
		have[k.Algorithm] = true
		st.kept("DKIM key %s (%s)", k.Selector, k.Algorithm)
	}
	month := now.UTC().Format("200601")
	for _, alg := range []struct{ name, prefix string }{{"ed25519", "ed"}, {"rsa", "rsa"}} {
		if have[alg.name] {
			continue
		}
		k, err := dkim.GenerateKey(cfg.Paths.DKIMDir, alg.prefix+month, alg.name)
		if err != nil {
			return nil, fmt.Errorf("generating the %s DKIM key: %w", alg.name, err)
		}
		st.did("DKIM key %s (%s) in %s", k.Selector, k.Algorithm, k.Path)
		keys = append(keys, k)
	}
	return keys, nil
}

// ensureCatchAll creates the catch-all system user and its mailbox folders.
// Under Root, users are only created with CreateUsers (tests must not add
// users to the host by accident).
func ensureCatchAll(ctx context.Context, o *Options, cfg *config.Config, st step) error {
	name := cfg.CatchAll
	if name == "" {
		return nil
	}
	owner := name
	if m := cfg.Mailbox(name); m != nil {
		owner = m.Owner
	}
	u, err := lookupUser(owner)
	if err != nil {
		if o.Root != "" && !o.CreateUsers {
			st.note("user %s does not exist; not created under --root (add --create-users)", owner)
			return nil
		}
		if os.Geteuid() != 0 {
			return fmt.Errorf("the catch-all user %s does not exist and only root can create it: run setup with sudo", owner)
		}
		if err := o.Command(ctx, "useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
			"--shell", "/usr/sbin/nologin", "--comment", "mailctl catch-all mailbox", owner); err != nil {
			return fmt.Errorf("creating the catch-all user: %w", err)
		}
		st.did("system user %s", owner)
		if u, err = lookupUser(owner); err != nil {
			return err
		}
	}
	if os.Geteuid() != 0 {
		st.note("not root: the mailbox folder of %s is left for the daemon to create", name)
		return nil
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	s, err := store.Open(cfg.Paths.MailboxesDir())
	if err != nil {
		return err
	}
	defer s.Close()
	created, err := s.Create(name, uid, gid)
	if err != nil {
		return fmt.Errorf("creating the catch-all mailbox: %w", err)
	}
	if created {
		st.did("mailbox %s owned by %s", filepath.Join(cfg.Paths.MailboxesDir(), name), owner)
	}
	return nil
}

// ensureUnit installs and enables the systemd unit on a real host.
func ensureUnit(ctx context.Context, o *Options, cfg *config.Config, st step) error {
	if (o.Root != "" && o.unitPrefix == "") || o.NoUnit {
		return nil
	}
	if !o.SystemdUp() {
		// Setup run again on such a host, with the daemon it started.
		if pid := o.DaemonPID(ctx, cfg.Paths.Socket); pid > 1 {
			st.note("systemd is not running: the daemon answering at %s (process %d) runs on; `sudo mailctl reload %d` makes it read what changed", cfg.Paths.Socket, pid, pid)
			return nil
		}
		st.note("systemd is not running: start the daemon yourself with `mailctl serve`")
		return nil
	}
	packaged := filepath.Join(o.unitPrefix, "/usr/lib/systemd/system/mailctl.service")
	if _, err := os.Stat(packaged); err != nil {
		local := filepath.Join(o.unitPrefix, "/etc/systemd/system/mailctl.service")
		if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
			return err
		}
		if _, err := os.Stat(local); errors.Is(err, fs.ErrNotExist) {
			// The unit names /usr/bin/mailctl; a binary installed elsewhere
			// (/usr/local/bin) must be the one systemd starts.
			unit := systemd.Unit
			if self, err := os.Executable(); err == nil && self != "/usr/bin/mailctl" {
				unit = strings.ReplaceAll(unit, "/usr/bin/mailctl", self)
			}
			if err := writeExclusive(local, []byte(unit), 0o644); err != nil {
				return err
			}
			st.did("%s", local)
		}
	}
	if err := o.Command(ctx, "systemctl", "daemon-reload"); err != nil {
		return err
	}
	if err := o.Command(ctx, "systemctl", "enable", "--now", "mailctl.service"); err != nil {
		return fmt.Errorf("%w\nsee `journalctl -u mailctl` and `mailctl doctor`", err)
	}
	st.did("systemd unit enabled and started (systemctl status mailctl)")
	return nil
}
