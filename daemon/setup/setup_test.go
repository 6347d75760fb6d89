package setup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/outbound/dkim"
)

var fixedNow = func() time.Time { return time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC) }

func baseOpts(root string) Options {
	return Options{
		Root:           root,
		Domain:         "Example.TEST",
		Hostname:       "mx.example.test",
		SelfSigned:     true,
		TrustedSenders: []string{"boss@example.org", "*@example.test"},
		SMTPListen:     []string{"127.0.0.1:2525"},
		Now:            fixedNow,
		LocalAddrs:     func() ([]net.IP, error) { return []net.IP{net.ParseIP("198.51.100.7")}, nil },
		Command: func(ctx context.Context, name string, args ...string) error {
			return fmt.Errorf("unexpected command %s %v", name, args)
		},
	}
}

func run(t *testing.T, o Options) string {
	t.Helper()
	var out bytes.Buffer
	if err := Run(context.Background(), o, &out); err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	return out.String()
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestFreshInstall(t *testing.T) {
	root := t.TempDir()
	out := run(t, baseOpts(root))
	cfg, err := config.Load(ConfigPath(root))
	if err != nil {
		t.Fatalf("written config does not load: %v", err)
	}
	if cfg.Hostname != "mx.example.test" || len(cfg.Domains) != 1 || cfg.Domains[0] != "example.test" {
		t.Errorf("config hostname/domains = %q %v", cfg.Hostname, cfg.Domains)
	}
	if got := cfg.SMTP.Listen; len(got) != 1 || got[0] != "127.0.0.1:2525" {
		t.Errorf("smtp.listen = %v", got)
	}
	if cfg.Paths.StateDir != filepath.Join(root, "var/lib/mailctl") || cfg.Paths.Socket != filepath.Join(root, "run/mailctl/mailctl.sock") {
		t.Errorf("paths not under --root: %+v", cfg.Paths)
	}
	if got := cfg.Trust.TrustedSenders; len(got) != 2 || got[0] != "boss@example.org" {
		t.Errorf("trusted senders = %v", got)
	}
	if m := mode(t, ConfigPath(root)); m != 0o640 {
		t.Errorf("config mode %o, want 640", m)
	}
	for _, d := range Dirs(cfg) {
		if m := mode(t, d.Path); m != d.Mode {
			t.Errorf("%s mode %o, want %o", d.Path, m, d.Mode)
		}
	}
	keys, err := dkim.LoadKeys(cfg.Paths.DKIMDir)
	if err != nil || len(keys) != 2 {
		t.Fatalf("keys %v, %v", keys, err)
	}
	algs := map[string]string{}
	for _, k := range keys {
		algs[k.Algorithm] = k.Selector
		if m := mode(t, k.Path); m != 0o600 {
			t.Errorf("%s mode %o, want 600", k.Path, m)
		}
	}
	if algs["ed25519"] != "ed202611" || algs["rsa"] != "rsa202611" {
		t.Errorf("selectors = %v", algs)
	}
	if m := mode(t, cfg.SMTP.TLSKey); m != 0o600 {
		t.Errorf("TLS key mode %o", m)
	}
	certPEM, err := os.ReadFile(cfg.SMTP.TLSCert)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil || cert.VerifyHostname("mx.example.test") != nil {
		t.Errorf("self-signed certificate unusable: %v", err)
	}
	checkDNS(t, out, keys)
}

// checkDNS parses the printed records as a zone and checks each one.
func checkDNS(t *testing.T, out string, keys []*dkim.Key) {
	t.Helper()
	_, zone, ok := strings.Cut(out, "Publish these DNS records (zone-file syntax):\n")
	if !ok {
		t.Fatalf("no DNS section in:\n%s", out)
	}
	zone, _, _ = strings.Cut(zone, "\nThen run")
	zp := dns.NewZoneParser(strings.NewReader(zone), "", "")
	txt := map[string]string{}
	var mx, a []string
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		switch r := rr.(type) {
		case *dns.MX:
			mx = append(mx, r.Hdr.Name+" "+r.Mx)
		case *dns.A:
			a = append(a, r.A.String())
		case *dns.TXT:
			for _, s := range r.Txt {
				if len(s) > 255 {
					t.Errorf("TXT string of %d bytes for %s", len(s), r.Hdr.Name)
				}
			}
			txt[r.Hdr.Name] = strings.Join(r.Txt, "")
		}
	}
	if err := zp.Err(); err != nil {
		t.Fatalf("DNS output does not parse: %v\n%s", err, zone)
	}
	if len(mx) != 1 || mx[0] != "example.test. mx.example.test." {
		t.Errorf("MX = %v", mx)
	}
	if len(a) != 1 || a[0] != "198.51.100.7" {
		t.Errorf("A = %v", a)
	}
	want := map[string]string{
		"example.test.":            "v=spf1 mx -all",
		"_dmarc.example.test.":     "v=DMARC1; p=quarantine; rua=mailto:postmaster@example.test",
		"_smtp._tls.example.test.": "v=TLSRPTv1; rua=mailto:postmaster@example.test",
	}
	for _, k := range keys {
		want[k.Selector+"._domainkey.example.test."] = k.TXTValue()
	}
	for name, v := range want {
		if txt[name] != v {
			t.Errorf("TXT %s = %q, want %q", name, txt[name], v)
		}
	}
}

type fileState struct {
	mode  fs.FileMode
	sum   [32]byte
	mtime time.Time
}

func snapshot(t *testing.T, root string) map[string]fileState {
	t.Helper()
	m := map[string]fileState{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := d.Info()
		st := fileState{mode: fi.Mode(), mtime: fi.ModTime()}
		if d.Type().IsRegular() {
			data, _ := os.ReadFile(p)
			st.sum = sha256.Sum256(data)
		}
		m[p] = st
		return nil
	})
	return m
}

func TestRerunChangesNothing(t *testing.T) {
	root := t.TempDir()
	run(t, baseOpts(root))
	before := snapshot(t, root)
	// Different answers on the second run must not rewrite anything.
	o := baseOpts(root)
	o.Domain, o.SelfSigned = "other.test", false
	o.TrustedSenders, o.SMTPListen = []string{"boss@example.org"}, []string{"127.0.0.1:25"}
	out := run(t, o)
	after := snapshot(t, root)
	if len(before) != len(after) {
		t.Errorf("file count %d → %d", len(before), len(after))
	}
	for p, b := range before {
		if a, ok := after[p]; !ok || a != b {
			t.Errorf("%s changed on re-run: %+v → %+v", p, b, a)
		}
	}
	if strings.Contains(out, "created ") {
		t.Errorf("second run created something:\n%s", out)
	}
	if !strings.Contains(out, "--trusted-sender, --smtp-listen ignored with an existing config") {
		t.Errorf("ignored flags not reported:\n%s", out)
	}
	if !strings.Contains(out, "--domain other.test ignored") {
		t.Errorf("ignored --domain not reported:\n%s", out)
	}
}

// TestRerunWithTheSameAnswersIgnoresNothing: setup.md's certbot section runs
// setup again with the --tls-cert and --tls-key the config already names;
// flags that would change nothing are not reported as ignored, as if the
// operator's answer had been thrown away.
func TestRerunWithTheSameAnswersIgnoresNothing(t *testing.T) {
	root := t.TempDir()
	run(t, baseOpts(root))
	o := baseOpts(root)
	o.SelfSigned = false
	o.TLSCert, o.TLSKey = filepath.Join(root, "etc/mailctl/tls/cert.pem"), filepath.Join(root, "etc/mailctl/tls/key.pem")
	o.Hostname = "MX.example.test."
	o.TrustedSenders = []string{"*@EXAMPLE.test", "boss@example.org"}
	out := run(t, o)
	if strings.Contains(out, "ignored") {
		t.Errorf("a re-run with the config's own answers reports them ignored:\n%s", out)
	}
}

func TestRerunRepairsWithoutRegenerating(t *testing.T) {
	root := t.TempDir()
	run(t, baseOpts(root))
	cfg, _ := config.Load(ConfigPath(root))
	keys, _ := dkim.LoadKeys(cfg.Paths.DKIMDir)
	var ed, rsa *dkim.Key
	for _, k := range keys {
		if k.Algorithm == "ed25519" {
			ed = k
		} else {
			rsa = k
		}
	}
	edBefore, _ := os.ReadFile(ed.Path)
	os.Remove(rsa.Path)
	os.RemoveAll(cfg.Paths.QueueDir())
	os.Chmod(cfg.Paths.MailboxesDir(), 0o777)
	o := baseOpts(root)
	o.Now = func() time.Time { return fixedNow().AddDate(0, 1, 0) }
	out := run(t, o)
	edAfter, _ := os.ReadFile(ed.Path)
	if !bytes.Equal(edBefore, edAfter) {
		t.Error("existing Ed25519 key was rewritten")
	}
	keys, _ = dkim.LoadKeys(cfg.Paths.DKIMDir)
	if len(keys) != 2 || keys[1].Selector != "rsa202612" {
		t.Errorf("missing RSA key not added under a new selector: %v", keys)
	}
	if m := mode(t, cfg.Paths.QueueDir()); m != 0o700 {
		t.Errorf("queue dir not recreated 0700: %o", m)
	}
	if m := mode(t, cfg.Paths.MailboxesDir()); m != 0o711 {
		t.Errorf("mailboxes dir mode not repaired: %o", m)
	}
	if !strings.Contains(out, "kept     DKIM key ed202611") {
		t.Errorf("output does not say the key was kept:\n%s", out)
	}
}

func TestBrokenConfigIsNeverReplaced(t *testing.T) {
	root := t.TempDir()
	path := ConfigPath(root)
	os.MkdirAll(filepath.Dir(path), 0o755)
	bad := []byte("hostname = \"mx.example.test\"\ndomains = [\"example.test\"]\nsmtp_listen = 1\n")
	os.WriteFile(path, bad, 0o640)
	var out bytes.Buffer
	err := Run(context.Background(), baseOpts(root), &out)
	if err == nil || !strings.Contains(err.Error(), "smtp_listen") {
		t.Fatalf("error %v does not name the bad key", err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, bad) {
		t.Error("broken config was modified")
	}
}

func TestInteractive(t *testing.T) {
	root := t.TempDir()
	o := Options{Root: root, Interactive: true, Now: fixedNow, NoUnit: true,
		In:         strings.NewReader("example.test\n\nself-signed\nme@example.org, *@example.test\n"),
		LocalAddrs: func() ([]net.IP, error) { return nil, nil }}
	out := run(t, o)
	cfg, err := config.Load(ConfigPath(root))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Hostname != "mx.example.test" || cfg.SMTP.TLSCert == "" || len(cfg.Trust.TrustedSenders) != 2 {
		t.Errorf("answers not applied: %q %q %v", cfg.Hostname, cfg.SMTP.TLSCert, cfg.Trust.TrustedSenders)
	}
	if !strings.Contains(out, "Mail domain") || !strings.Contains(out, PlaceholderIPv4) {
		t.Errorf("prompts or placeholders missing:\n%s", out)
	}
	// Stdin closing early is an error that says how to script setup.
	o.Root, o.In = t.TempDir(), strings.NewReader("")
	if err := Run(context.Background(), o, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "--non-interactive") {
		t.Errorf("closed stdin: %v", err)
	}
}

func TestInvalidAnswers(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"no domain", func(o *Options) { o.Domain = "" }, "--domain is required"},
		{"bad domain", func(o *Options) { o.Domain = "not a domain" }, "not a domain name"},
		{"bad host", func(o *Options) { o.Hostname = "-x" }, "not a host name"},
		{"cert without key", func(o *Options) { o.SelfSigned, o.TLSCert = false, "/c.pem" }, "go together"},
		{"both tls", func(o *Options) { o.TLSCert, o.TLSKey = "/c", "/k" }, "either --self-signed"},
		{"bad listen", func(o *Options) { o.SMTPListen = []string{"25"} }, "not host:port"},
		{"bad catch-all", func(o *Options) { o.CatchAll = "../etc" }, "--catch-all"},
		{"quote in sender", func(o *Options) { o.TrustedSenders = []string{"a\"@b"} }, "--trusted-sender"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			o := baseOpts(root)
			tc.edit(&o)
			err := Run(context.Background(), o, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if _, err := os.Stat(ConfigPath(root)); err == nil {
				t.Error("a config was written despite the error")
			}
		})
	}
}

func TestExampleConfigParses(t *testing.T) {
	data, err := os.ReadFile("../../packaging/config.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := config.Parse(data); err != nil {
		t.Fatalf("packaging/config.example.toml: %v", err)
	}
}

// TestCatchAllUserAsRoot creates a throwaway system user through setup and
// checks the catch-all mailbox belongs to it.
func TestCatchAllUserAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating users and chowning needs root")
	}
	if _, err := exec.LookPath("useradd"); err != nil {
		t.Skip("useradd not installed")
	}
	name := fmt.Sprintf("mctlca%d", os.Getpid()%100000)
	t.Cleanup(func() { exec.Command("userdel", name).Run() })
	root := t.TempDir()
	o := baseOpts(root)
	o.CatchAll, o.CreateUsers, o.Command = name, true, runCommand
	run(t, o)
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatalf("user not created: %v", err)
	}
	cfg, _ := config.Load(ConfigPath(root))
	if cfg.CatchAll != name || cfg.Mailbox(name) == nil {
		t.Errorf("catch-all not declared: %q", cfg.CatchAll)
	}
	fi, err := os.Stat(filepath.Join(cfg.Paths.MailboxesDir(), name, "inbox"))
	if err != nil {
		t.Fatal(err)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; fmt.Sprint(uid) != u.Uid {
		t.Errorf("inbox owned by %d, want %s", uid, u.Uid)
	}
	st, _ := os.Stat(ConfigPath(root))
	if st.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Error("config not owned by root")
	}
	// Second run: the user exists, nothing is created.
	if out := run(t, o); strings.Contains(out, "created ") {
		t.Errorf("re-run created something:\n%s", out)
	}
}

func TestCatchAllUnderRootSkipsUsers(t *testing.T) {
	root := t.TempDir()
	o := baseOpts(root)
	o.CatchAll = "nosuchuser-mctl"
	out := run(t, o)
	if !strings.Contains(out, "not created under --root") {
		t.Errorf("missing user not reported:\n%s", out)
	}
}

func TestInstallsAndEnablesUnit(t *testing.T) {
	root := t.TempDir()
	o := baseOpts(root)
	o.unitPrefix = root
	o.SystemdUp = func() bool { return true }
	var calls []string
	o.Command = func(ctx context.Context, name string, args ...string) error {
		calls = append(calls, name+" "+strings.Join(args, " "))
		return nil
	}
	run(t, o)
	unit, err := os.ReadFile(filepath.Join(root, "etc/systemd/system/mailctl.service"))
	if err != nil {
		t.Fatal(err)
	}
	self, _ := os.Executable()
	if !bytes.Contains(unit, []byte("ExecStart="+self+" serve")) {
		t.Errorf("unit does not start this binary (%s)", self)
	}
	if got := strings.Join(calls, "; "); got != "systemctl daemon-reload; systemctl enable --now mailctl.service" {
		t.Errorf("commands: %s", got)
	}
	// With the packaged unit present, nothing is written to /etc.
	root2 := t.TempDir()
	o = baseOpts(root2)
	o.unitPrefix, o.SystemdUp, calls = root2, func() bool { return true }, nil
	o.Command = func(ctx context.Context, name string, args ...string) error {
		calls = append(calls, name)
		return nil
	}
	os.MkdirAll(filepath.Join(root2, "usr/lib/systemd/system"), 0o755)
	os.WriteFile(filepath.Join(root2, "usr/lib/systemd/system/mailctl.service"), []byte("[Unit]\n"), 0o644)
	run(t, o)
	if _, err := os.Stat(filepath.Join(root2, "etc/systemd/system/mailctl.service")); err == nil {
		t.Error("unit copied to /etc although the package installed one")
	}
	if len(calls) != 2 {
		t.Errorf("systemctl not called: %v", calls)
	}
	// Without systemd, setup says how to start the daemon.
	o = baseOpts(t.TempDir())
	o.unitPrefix, o.SystemdUp = o.Root, func() bool { return false }
	if out := run(t, o); !strings.Contains(out, "mailctl serve") {
		t.Errorf("no hint without systemd:\n%s", out)
	}
	// Run again there with the daemon it started running, it said to start
	// one more; it names the one running and how to reload it.
	o.DaemonPID = func(context.Context, string) int { return 4242 }
	if out := run(t, o); !strings.Contains(out, "(process 4242) runs on; `sudo mailctl reload 4242`") || strings.Contains(out, "start the daemon yourself") {
		t.Errorf("setup again beside a running daemon without systemd:\n%s", out)
	}
}

// TestDeclaresRoleMailboxes: setup gives postmaster and abuse to the
// operator, so reports and complaints never reach a user who claims the
// name first.
func TestDeclaresRoleMailboxes(t *testing.T) {
	root := t.TempDir()
	run(t, baseOpts(root))
	cfg, err := config.Load(ConfigPath(root))
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range config.RequiredRoleAddresses {
		m := cfg.Mailbox(role)
		if m == nil || m.Owner != "root" {
			t.Errorf("setup declared %s as %+v, want a mailbox owned by root", role, m)
		}
	}
}

// TestCrashLeftoversAreNotAConfig: a setup cut off while writing leaves a
// temporary file, never a partial config.toml; the next run writes a whole
// config and its result loads.
func TestCrashLeftoversAreNotAConfig(t *testing.T) {
	root := t.TempDir()
	path := ConfigPath(root)
	os.MkdirAll(filepath.Dir(path), 0o755)
	leftover := filepath.Join(filepath.Dir(path), ".tmp-config.toml-123")
	os.WriteFile(leftover, []byte("hostname = \"mx.exa"), 0o640)
	var out bytes.Buffer
	if err := Run(context.Background(), baseOpts(root), &out); err != nil {
		t.Fatalf("setup after a crash: %v\n%s", err, out.String())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := config.Parse(data); err != nil {
		t.Fatalf("written config does not load: %v", err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
		t.Errorf("config mode %v, want 0640", fi.Mode().Perm())
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-") && e.Name() != ".tmp-config.toml-123" {
			t.Errorf("setup left its own temporary file %s", e.Name())
		}
	}
}

// TestSuppliedKeyHeldToTheSecretRule: a --tls-key that the daemon would
// refuse (others can read it, named itself or through a link) stops setup
// before it writes anything, with the fix.
func TestSuppliedKeyHeldToTheSecretRule(t *testing.T) {
	src := t.TempDir()
	cert, key := filepath.Join(src, "cert.pem"), filepath.Join(src, "key.pem")
	certPEM, keyPEM, err := SelfSigned(time.Now(), "mx.example.test")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(cert, certPEM, 0o644)
	os.WriteFile(key, keyPEM, 0o644)
	link := filepath.Join(src, "privkey.pem")
	os.Symlink(key, link)
	for k, want := range map[string]string{key: "chmod 600 " + key, link: "chmod 600 " + link} {
		root := t.TempDir()
		o := baseOpts(root)
		o.SelfSigned, o.TLSCert, o.TLSKey = false, cert, k
		err := Run(context.Background(), o, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "--tls-key: "+k) || !strings.Contains(err.Error(), want) {
			t.Errorf("--tls-key %s: %v, want it refused saying %q", k, err, want)
		}
		if _, err := os.Stat(ConfigPath(root)); err == nil {
			t.Error("a config was written despite the refused key")
		}
	}
	os.Chmod(key, 0o600)
	root := t.TempDir()
	o := baseOpts(root)
	o.SelfSigned, o.TLSCert, o.TLSKey = false, cert, key
	if err := Run(context.Background(), o, &bytes.Buffer{}); err != nil {
		t.Fatalf("a private key: %v", err)
	}
}

// TestMissingKeySaysWhereToGetIt: setup.md's scripted line names
// /etc/mailctl/tls/key.pem, which exists only once the certbot section
// below has run; setup, run first as the page orders it, says so and
// offers --self-signed rather than a bare "no such file".
func TestMissingKeySaysWhereToGetIt(t *testing.T) {
	root := t.TempDir()
	o := baseOpts(root)
	o.SelfSigned = false
	o.TLSCert, o.TLSKey = filepath.Join(root, "tls/cert.pem"), filepath.Join(root, "tls/key.pem")
	err := Run(context.Background(), o, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "Renewing the certificate") || !strings.Contains(err.Error(), "--self-signed") {
		t.Errorf("setup with a missing key: %v, want it to say how to get one", err)
	}
	if _, err := os.Stat(ConfigPath(root)); err == nil {
		t.Error("a config was written without the key")
	}
}
