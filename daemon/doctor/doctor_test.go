package doctor

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/outbound/dkim"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/daemon/setup"
	"github.com/mailctl/mailctl/internal/fakemx"
	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/internal/testbin"
	"github.com/mailctl/mailctl/internal/testcert"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// install is a clean host under a temporary root: what setup makes, one
// registered mailbox owned by the test's user, and DNS that matches.
type install struct {
	root string
	cfg  *config.Config
	keys []*dkim.Key
	dns  *resolver.Map
	env  Env
}

var (
	templateOnce sync.Once
	templateRoot string
	templateErr  error
)

// newInstall copies one install made by setup (RSA key generation is slow)
// into a fresh root, rewriting the paths in its config.
func newInstall(t *testing.T) *install {
	t.Helper()
	templateOnce.Do(func() {
		templateRoot, templateErr = os.MkdirTemp("", "doctor-template-")
		if templateErr != nil {
			return
		}
		templateErr = setup.Run(context.Background(), setup.Options{
			Root: templateRoot, Domain: "example.test", Hostname: "mx.example.test", SelfSigned: true,
			SMTPListen: []string{"127.0.0.1:2525"},
			LocalAddrs: func() ([]net.IP, error) { return nil, nil },
		}, &bytes.Buffer{})
	})
	if templateErr != nil {
		t.Fatal(templateErr)
	}
	root := t.TempDir()
	err := filepath.WalkDir(templateRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(templateRoot, p)
		dst := filepath.Join(root, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			if err := os.MkdirAll(dst, 0o700); err != nil {
				return err
			}
			return os.Chmod(dst, fi.Mode().Perm())
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if rel == strings.TrimPrefix(config.DefaultPath, "/") {
			data = bytes.ReplaceAll(data, []byte(templateRoot), []byte(root))
			if os.Geteuid() != 0 {
				// The role mailboxes setup declares for root become the
				// test user's, whose folders this test can own.
				data = bytes.ReplaceAll(data, []byte(`owner = "root"`), []byte(fmt.Sprintf("owner = %q", myUserName(t))))
			}
		}
		return os.WriteFile(dst, data, fi.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
	in := &install{root: root}
	if in.cfg, err = config.Load(setup.ConfigPath(root)); err != nil {
		t.Fatal(err)
	}
	if in.keys, err = dkim.LoadKeys(in.cfg.Paths.DKIMDir); err != nil {
		t.Fatal(err)
	}
	// A mailbox created over the socket: registry entry plus folders.
	reg := filepath.Join(in.cfg.Paths.RegistryDir(), "mailboxes", "agent.json")
	if err := os.WriteFile(reg, []byte(fmt.Sprintf(`{"name":"agent","owner_uid":%d,"owner_gid":%d}`, os.Getuid(), os.Getgid())), 0o600); err != nil {
		t.Fatal(err)
	}
	names := []string{"agent"}
	for _, m := range in.cfg.Mailboxes {
		names = append(names, m.Name) // the daemon creates declared mailboxes' folders
	}
	for _, name := range names {
		mb := filepath.Join(in.cfg.Paths.MailboxesDir(), name)
		for _, f := range store.Folders {
			if err := os.MkdirAll(filepath.Join(mb, f), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		os.Chmod(mb, 0o700)
	}
	m := &resolver.Map{}
	m.SetIP("mx.example.test", "192.0.2.10")
	m.PTR = map[string][]string{"192.0.2.10": {"mx.example.test."}}
	m.SetMX("example.test", &net.MX{Host: "mx.example.test.", Pref: 10})
	m.SetTXT("example.test", "v=spf1 mx -all")
	m.SetTXT("_dmarc.example.test", "v=DMARC1; p=quarantine")
	for _, k := range in.keys {
		// Published split in two strings, as DNS hands long records back.
		v := k.TXTValue()
		m.SetTXT(k.Selector+"._domainkey.example.test", v[:len(v)/2]+v[len(v)/2:])
	}
	in.dns = m
	in.env = Env{
		Resolver:        m,
		Root:            os.Geteuid() == 0,
		SocketAnswers:   func() (string, error) { return "1.2.3", nil },
		ClientVersion:   "1.2.3",
		Port25Listening: func() bool { return true },
		Now:             func() time.Time { return time.Now() },
		LocalAddrs:      func() ([]net.IP, error) { return []net.IP{net.ParseIP("192.0.2.10")}, nil },
		// A daemon serving what the files hold, read when asked.
		ServedCertificate: func(context.Context) (*x509.Certificate, error) {
			pair, err := tls.LoadX509KeyPair(in.cfg.SMTP.TLSCert, in.cfg.SMTP.TLSKey)
			if err != nil {
				return nil, err
			}
			return x509.ParseCertificate(pair.Certificate[0])
		},
	}
	return in
}

func myUserName(t *testing.T) string {
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}

func TestMain(m *testing.M) {
	code := m.Run()
	if templateRoot != "" {
		os.RemoveAll(templateRoot)
	}
	testbin.Cleanup() // the mailctl TestOwnerWrongFixRuns runs
	os.Exit(code)
}

func (in *install) check(t *testing.T) []protocol.Finding {
	t.Helper()
	_, f := CheckFile(context.Background(), in.cfg.File, in.env)
	return f
}

func TestCleanInstall(t *testing.T) {
	in := newInstall(t)
	f := in.check(t)
	for _, x := range f {
		if x.Severity == Fail || x.Severity == Warn {
			t.Errorf("clean install: %s %s: %s", x.Severity, x.ID, x.Message)
		}
	}
	if Failed(f) {
		t.Error("Failed() on a clean install")
	}
	ids := map[string]bool{}
	for _, x := range f {
		ids[x.ID] = true
	}
	for _, id := range []string{"dns.ptr", "dns.host", "config.ok", "daemon.up", "paths.ok", "dkim.keys", "dkim.dns", "mailbox.ok", "role.ok", "queue.ok", "smtp.port25", "dns.mx", "dns.spf", "dns.dmarc", "tls.cert"} {
		if !ids[id] {
			t.Errorf("no %s finding on a clean install", id)
		}
	}
}

func keyOf(in *install, alg string) *dkim.Key {
	for _, k := range in.keys {
		if k.Algorithm == alg {
			return k
		}
	}
	return nil
}

func TestSeededFaults(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rootOnly bool
		seed     func(t *testing.T, in *install)
		id, sev  string
	}{
		{"wrong key mode", false, func(t *testing.T, in *install) {
			os.Chmod(keyOf(in, "ed25519").Path, 0o644)
		}, "secret.insecure", Fail},
		{"readable relay password", false, func(t *testing.T, in *install) {
			pw := filepath.Join(in.root, "etc/mailctl/relay.pw")
			os.WriteFile(pw, []byte("s3cret"), 0o644)
			appendFile(t, in.cfg.File, fmt.Sprintf("\n[relay]\nhost = \"smtp.relay.test\"\nusername = \"u\"\npassword_file = %q\n", pw))
		}, "secret.insecure", Fail},
		{"missing relay password", false, func(t *testing.T, in *install) {
			appendFile(t, in.cfg.File, fmt.Sprintf("\n[relay]\nhost = \"smtp.relay.test\"\nusername = \"u\"\npassword_file = %q\n", filepath.Join(in.root, "nope")))
		}, "secret.missing", Fail},
		{"relay CA file without a certificate", false, func(t *testing.T, in *install) {
			ca := filepath.Join(in.root, "etc/mailctl/ca.pem")
			os.WriteFile(ca, []byte("junk"), 0o644)
			appendFile(t, in.cfg.File, fmt.Sprintf("\n[relay]\nhost = \"smtp.relay.test\"\nca_file = %q\n", ca))
		}, "relay.ca_file", Fail},
		{"key of another user", true, func(t *testing.T, in *install) {
			os.Chown(keyOf(in, "rsa").Path, 65534, 65534)
		}, "secret.insecure", Fail},
		{"key as a link into a directory anyone can write in", false, func(t *testing.T, in *install) {
			k := keyOf(in, "rsa").Path
			open := filepath.Join(filepath.Dir(k), "open")
			os.Mkdir(open, 0o700)
			os.Chmod(open, 0o777)
			os.Rename(k, filepath.Join(open, "real.key"))
			os.Symlink(filepath.Join(open, "real.key"), k)
		}, "secret.insecure", Fail},
		{"missing mailbox folder", false, func(t *testing.T, in *install) {
			os.Remove(filepath.Join(in.cfg.Paths.MailboxesDir(), "agent", "sent"))
		}, "mailbox.folder_missing", Warn},
		{"wrong mailbox owner", true, func(t *testing.T, in *install) {
			os.Chown(filepath.Join(in.cfg.Paths.MailboxesDir(), "agent"), 65534, 65534)
		}, "mailbox.owner_wrong", Fail},
		{"DKIM record mismatch", false, func(t *testing.T, in *install) {
			other, err := dkim.GenerateKey(t.TempDir(), "x", "ed25519")
			if err != nil {
				t.Fatal(err)
			}
			in.dns.SetTXT(keyOf(in, "ed25519").Selector+"._domainkey.example.test", other.TXTValue())
		}, "dkim.dns_mismatch", Fail},
		{"daemon down", false, func(t *testing.T, in *install) {
			in.env.SocketAnswers = func() (string, error) { return "", errors.New("connection refused") }
		}, "daemon.down", Fail},
		{"bad config key", false, func(t *testing.T, in *install) {
			appendFile(t, in.cfg.File, "\n[smtp2]\nlisten = []\n")
		}, "config.unknown_key", Fail},
		{"config syntax", false, func(t *testing.T, in *install) {
			appendFile(t, in.cfg.File, "\nhostname = \n")
		}, "config.parse", Fail},
		{"version drift", false, func(t *testing.T, in *install) { in.env.ClientVersion = "1.3.0" }, "daemon.version_drift", Warn},
		{"declared mailbox not made yet", false, func(t *testing.T, in *install) {
			appendFile(t, in.cfg.File, fmt.Sprintf("\n[[mailboxes]]\nname = \"later\"\nowner = %q\n", myUserName(t)))
		}, "mailbox.missing", Warn},
		// The daemon does not serve it (its owner is not a user): the fix
		// is the user, not the reload mailbox.missing suggests.
		{"declared mailbox of a user who does not exist", false, func(t *testing.T, in *install) {
			appendFile(t, in.cfg.File, "\n[[mailboxes]]\nname = \"catchall\"\nowner = \"mailctl-no-such-user\"\n")
		}, "mailbox.owner_unknown", Fail},
		{"orphaned mailbox", false, func(t *testing.T, in *install) {
			os.Mkdir(filepath.Join(in.cfg.Paths.MailboxesDir(), "ghost"), 0o700)
		}, "mailbox.orphaned", Warn},
		{"damaged queue journal", false, func(t *testing.T, in *install) {
			os.MkdirAll(in.cfg.Paths.QueueDir(), 0o700)
			os.WriteFile(filepath.Join(in.cfg.Paths.QueueDir(), "journal"), []byte("{not a journal"), 0o600)
		}, "queue.damaged", Fail},
		{"set-aside queue items", false, func(t *testing.T, in *install) {
			os.MkdirAll(filepath.Join(in.cfg.Paths.QueueDir(), "corrupt"), 0o700)
			os.WriteFile(filepath.Join(in.cfg.Paths.QueueDir(), "corrupt", "q2.json"), nil, 0o600)
		}, "queue.corrupt", Warn},
		{"world-readable queue", false, func(t *testing.T, in *install) {
			os.Chmod(in.cfg.Paths.QueueDir(), 0o755)
		}, "paths.mode", Fail},
		{"missing key", false, func(t *testing.T, in *install) {
			for _, k := range in.keys {
				os.Remove(k.Path)
			}
		}, "dkim.missing", Fail},
		{"port 25 closed", false, func(t *testing.T, in *install) {
			in.env.Port25Listening = func() bool { return false }
		}, "smtp.port25", Fail},
		{"LMTP only", false, func(t *testing.T, in *install) {
			noSMTPListen(t, in.cfg.File)
			appendFile(t, in.cfg.File, "\n[lmtp]\nlisten_tcp = [\"10.0.0.5:24\"]\nallow_from = [\"10.0.0.1\"]\n")
			in.env.Port25Listening = func() bool { return false }
		}, "smtp.lmtp_only", OK},
		{"no listener at all", false, func(t *testing.T, in *install) { noSMTPListen(t, in.cfg.File) }, "smtp.no_listener", Fail},
		{"no MX", false, func(t *testing.T, in *install) { delete(in.dns.MX, "example.test") }, "dns.mx", Fail},
		{"MX elsewhere", false, func(t *testing.T, in *install) {
			in.dns.SetMX("example.test", &net.MX{Host: "mx.other.test.", Pref: 10})
		}, "dns.mx", Fail},
		{"no SPF", false, func(t *testing.T, in *install) { in.dns.SetTXT("example.test", "google-site-verification=x") }, "dns.spf", Warn},
		{"two SPF", false, func(t *testing.T, in *install) { in.dns.SetTXT("example.test", "v=spf1 mx -all", "v=spf1 a -all") }, "dns.spf", Fail},
		{"no DMARC", false, func(t *testing.T, in *install) { delete(in.dns.TXT, "_dmarc.example.test") }, "dns.dmarc", Warn},
		{"DKIM unpublished", false, func(t *testing.T, in *install) {
			delete(in.dns.TXT, keyOf(in, "rsa").Selector+"._domainkey.example.test")
		}, "dkim.dns_missing", Warn},
		{"DNS failing", false, func(t *testing.T, in *install) { in.dns.Fail = map[string]bool{"_dmarc.example.test": true} }, "dns.dmarc", Warn},
		{"no reverse DNS", false, func(t *testing.T, in *install) { in.dns.PTR = nil }, "dns.ptr", Warn},
		{"A record elsewhere", false, func(t *testing.T, in *install) { in.dns.SetIP("mx.example.test", "198.51.100.1") }, "dns.host_address", Warn},
		{"no A record", false, func(t *testing.T, in *install) { in.dns.IP = nil }, "dns.host", Fail},
		{"readable TLS key", false, func(t *testing.T, in *install) { os.Chmod(in.cfg.SMTP.TLSKey, 0o644) }, "secret.insecure", Fail},
		{"expired certificate", false, func(t *testing.T, in *install) {
			in.env.Now = func() time.Time { return time.Now().AddDate(11, 0, 0) }
		}, "tls.expired", Fail},
		{"private socket", false, func(t *testing.T, in *install) {
			ln, err := net.Listen("unix", in.cfg.Paths.Socket)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			os.Chmod(in.cfg.Paths.Socket, 0o600)
		}, "paths.socket", Warn},
		{"socket of another user", true, func(t *testing.T, in *install) {
			ln, err := net.Listen("unix", in.cfg.Paths.Socket)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			os.Chmod(in.cfg.Paths.Socket, 0o666)
			os.Lchown(in.cfg.Paths.Socket, 65534, 65534) // as a user's process that bound it
		}, "paths.socket_taken", Fail},
		{"socket in a shared directory", false, func(t *testing.T, in *install) {
			os.Chmod(filepath.Dir(in.cfg.Paths.Socket), 0o1777)
		}, "paths.socket_dir", Warn},
		// A daemon started by hand with umask 077 by a release that made
		// the directory under it: the socket is 0666, but no user reached it,
		// and doctor said paths.ok.
		{"socket directory closed to users", true, func(t *testing.T, in *install) {
			os.MkdirAll(filepath.Dir(in.cfg.Paths.Socket), 0o700)
			os.Chmod(filepath.Dir(in.cfg.Paths.Socket), 0o700)
		}, "paths.socket_closed", Fail},
		{"planted symlink folder", false, func(t *testing.T, in *install) {
			p := filepath.Join(in.cfg.Paths.MailboxesDir(), "agent", "inbox")
			os.Remove(p)
			os.Symlink("/etc", p)
		}, "mailbox.folder_type", Fail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.rootOnly && os.Geteuid() != 0 {
				t.Skip("seeding a wrong owner needs root (chown)")
			}
			in := newInstall(t)
			tc.seed(t, in)
			f := in.check(t)
			var found *protocol.Finding
			for i := range f {
				if f[i].ID == tc.id && f[i].Severity == tc.sev {
					found = &f[i]
				}
			}
			if found == nil {
				t.Fatalf("no %s %s finding in %+v", tc.sev, tc.id, f)
			}
			if found.Severity == Fail && found.Fix == "" {
				t.Errorf("%s has no fix", tc.id)
			}
			if tc.sev == Fail && !Failed(f) {
				t.Error("Failed() is false")
			}
		})
	}
}

// TestSocketDirOpenToAGroupIsNotClosed: a socket folder only root may
// enter fails (paths.socket_closed, TestSeededFaults); one a group other
// than root's may enter is the operator's choice of who reaches the
// daemon, and is not reported.
func TestSocketDirOpenToAGroupIsNotClosed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving the socket's folder to a group needs root (chown)")
	}
	in := newInstall(t)
	dir := filepath.Dir(in.cfg.Paths.Socket)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 0, 65534); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	for _, f := range in.check(t) {
		if f.ID == "paths.socket_closed" {
			t.Errorf("a socket folder its group may enter was reported: %+v", f)
		}
	}
	if err := os.Chown(dir, 0, 0); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range in.check(t) {
		found = found || f.ID == "paths.socket_closed"
	}
	if !found {
		t.Error("a socket folder only root's group may enter was not reported")
	}
}

// TestOwnerWrongFixRuns: the fix doctor names for a mailbox given to
// another user is a command the operator pastes; run as written (without
// sudo: the test is root), it gives the mailbox back, and doctor finds
// nothing more. "chown -R UID:" was refused by chown ("invalid spec").
// The mailbox's present owner put in it a hard link to a root file (where
// fs.protected_hardlinks is 0) and a symbolic link to another: chown -R
// would have given the first away; the fix (`mailctl mailboxes give`, on
// the PATH) leaves both root's.
func TestOwnerWrongFixRuns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("seeding a wrong owner needs root (chown)")
	}
	in := newInstall(t)
	// The mailbox is registered for a user other than root, so that what
	// the fix gives that user is not root's already.
	const owner = 64999
	reg := filepath.Join(in.cfg.Paths.RegistryDir(), "mailboxes", "agent.json")
	if err := os.WriteFile(reg, []byte(fmt.Sprintf(`{"name":"agent","owner_uid":%d,"owner_gid":%d}`, owner, owner)), 0o600); err != nil {
		t.Fatal(err)
	}
	box := filepath.Join(in.cfg.Paths.MailboxesDir(), "agent")
	// The folder is the daemon's, which stamps the mailboxes folder at
	// every start.
	if err := formats.WriteStamp(filepath.Join(in.cfg.Paths.MailboxesDir(), formats.StampName), formats.KindMailboxes, formats.Mailboxes, "test"); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	secret, target := filepath.Join(outside, "shadow"), filepath.Join(outside, "target")
	for _, p := range []string{secret, target} {
		if err := os.WriteFile(p, []byte("root's"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mail := filepath.Join(box, "inbox", "m.eml")
	if err := os.WriteFile(mail, []byte("Subject: s\r\n\r\nb\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(secret, filepath.Join(box, "inbox", "planted.eml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(box, "inbox", "link.eml")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{box, filepath.Join(box, "inbox"), mail} {
		if err := os.Lchown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	var fixes []string
	for _, x := range in.check(t) {
		if x.ID == "mailbox.owner_wrong" {
			fixes = append(fixes, x.Fix)
		}
	}
	if len(fixes) == 0 {
		t.Fatal("no mailbox.owner_wrong finding")
	}
	bin, err := testbin.Mailctl()
	if err != nil {
		t.Fatal(err)
	}
	for _, fix := range fixes {
		sh := exec.Command("sh", "-c", strings.TrimPrefix(fix, "sudo "))
		sh.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
		out, err := sh.CombinedOutput()
		if err != nil {
			t.Fatalf("fix %q: %v: %s", fix, err, out)
		}
	}
	for _, x := range in.check(t) {
		if x.ID == "mailbox.owner_wrong" {
			t.Errorf("after the fix: %s: %s", x.Message, x.Fix)
		}
	}
	if st, err := os.Stat(mail); err != nil || st.Sys().(*syscall.Stat_t).Uid != owner {
		t.Errorf("the mailbox's mail was not given to its owner (%v)", err)
	}
	for _, p := range []string{secret, target} {
		if st, err := os.Stat(p); err != nil || st.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("the fix gave %s, a file outside the mailbox the owner linked to, away (%v)", p, err)
		}
	}
}

// TestFolderMissingFixNamesTheExpectedOwner: a mailbox given to another
// user and missing a folder gets two fixes; the folder's names the owner
// the mailbox should have, not the one its directory has now, whose
// folders the repair would make.
func TestFolderMissingFixNamesTheExpectedOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("seeding a wrong owner needs root (chown)")
	}
	in := newInstall(t)
	box := filepath.Join(in.cfg.Paths.MailboxesDir(), "agent")
	want, err := os.Stat(box)
	if err != nil {
		t.Fatal(err)
	}
	uid := want.Sys().(*syscall.Stat_t).Uid
	os.Chown(box, 65534, 65534)
	os.Remove(filepath.Join(box, "sent"))
	var fix string
	for _, x := range in.check(t) {
		if x.ID == "mailbox.folder_missing" {
			fix = x.Fix
		}
	}
	if !strings.Contains(fix, fmt.Sprintf("--owner %d ", uid)) {
		t.Fatalf("the missing folder's fix is %q, want it for uid %d", fix, uid)
	}
}

// noSMTPListen empties smtp.listen in the config file.
func noSMTPListen(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^listen = \[.*\]$`)
	if !re.Match(data) {
		t.Fatalf("no listen line in %s", path)
	}
	if err := os.WriteFile(path, re.ReplaceAll(data, []byte("listen = []")), 0o644); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString(s)
}

func TestBadConfigStillChecksTheRest(t *testing.T) {
	in := newInstall(t)
	appendFile(t, in.cfg.File, "\nsmtp_lisen = 1\n")
	cfg, f := CheckFile(context.Background(), in.cfg.File, in.env)
	if cfg != nil {
		t.Error("a broken config returned a config")
	}
	if len(f) == 0 || f[0].ID != "config.unknown_key" || !strings.Contains(f[0].Message, "smtp_lisen") {
		t.Fatalf("first finding %+v does not name the bad key", f[0])
	}
	for _, x := range f {
		if x.ID == "daemon.up" {
			return
		}
	}
	t.Error("other checks did not run after the config failed")
}

// TestBadValueStillChecksTheFilesValues: operations.md has the operator
// test a new config with doctor before a reload. A value the config refuses
// (metrics.listen on a public address) is the one failure: the rest is
// checked against the file's own paths, socket, certificate and mailboxes,
// not the defaults, which named a running daemon down, the state and keys
// missing, no TLS and no postmaster, each with a fix to act on.
func TestBadValueStillChecksTheFilesValues(t *testing.T) {
	in := newInstall(t)
	appendFile(t, in.cfg.File, "\n[metrics]\nlisten = \"0.0.0.0:9325\"\n")
	cfg, f := CheckFile(context.Background(), in.cfg.File, in.env)
	if cfg != nil {
		t.Error("a config that does not load returned a config")
	}
	if len(f) == 0 || f[0].ID != "config.parse" || !strings.Contains(f[0].Message, "metrics.listen") {
		t.Fatalf("first finding %+v does not name the bad value", f)
	}
	ids := map[string]bool{}
	for _, x := range f[1:] {
		ids[x.ID] = true
		if x.Severity == Fail || x.Severity == Warn {
			t.Errorf("%s %s: %s", x.Severity, x.ID, x.Message)
		}
	}
	for _, id := range []string{"daemon.up", "paths.ok", "dkim.keys", "tls.cert", "role.ok"} {
		if !ids[id] {
			t.Errorf("no %s finding: the rest was not checked against the file", id)
		}
	}
	if ids["config.ok"] {
		t.Error("config.ok next to config.parse")
	}
}

func TestMissingConfig(t *testing.T) {
	_, f := CheckFile(context.Background(), filepath.Join(t.TempDir(), "nope.toml"), Env{})
	if f[0].ID != "config.missing" || f[0].Fix != "sudo mailctl setup" {
		t.Errorf("got %+v", f[0])
	}
}

// TestListenerDial: the listener probe is an SMTP session that ends with
// QUIT, so the daemon logs it as a short session, not a reset connection.
func TestListenerDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	said := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write([]byte("220 mx.example.test ESMTP\r\n"))
		line, _ := bufio.NewReader(c).ReadString('\n')
		c.Write([]byte("221 bye\r\n"))
		said <- line
	}()
	in := newInstall(t)
	in.env.Port25Listening = nil
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	in.cfg.SMTP.Listen = []string{"0.0.0.0:" + port}
	var f findings
	checkListeners(context.Background(), &f, in.cfg, in.env)
	if f[0].Severity != OK {
		t.Errorf("listening port reported %+v", f[0])
	}
	if line := testwait.Recv(t, "the listener probe to connect and say something", said); line != "QUIT\r\n" {
		t.Errorf("the probe said %q, want QUIT", line)
	}
	ln.Close()
	f = nil
	checkListeners(context.Background(), &f, in.cfg, in.env)
	if f[0].Severity != Fail {
		t.Errorf("closed port reported %+v", f[0])
	}
}

func TestSortPutsFailuresFirst(t *testing.T) {
	f := []protocol.Finding{{ID: "a", Severity: OK}, {ID: "b", Severity: Warn}, {ID: "c", Severity: Fail}, {ID: "d", Severity: Info}}
	Sort(f)
	var got []string
	for _, x := range f {
		got = append(got, x.ID)
	}
	if strings.Join(got, "") != "cbda" {
		t.Errorf("order %v", got)
	}
}

func FuzzTagValue(f *testing.F) {
	f.Add("v=DKIM1; k=rsa; p=MIIB IjAN", "p")
	f.Add("p=;", "p")
	f.Add(";;==;", "")
	f.Fuzz(func(t *testing.T, rec, tag string) {
		v, ok := tagValue(rec, tag)
		if ok && strings.ContainsAny(v, " \t\n") {
			t.Errorf("value %q keeps whitespace", v)
		}
	})
}

// TestSecretFindingNamesFileAndFix: doctor reports a readable relay
// password as the daemon refuses it: the key, the file and the chmod.
func TestSecretFindingNamesFileAndFix(t *testing.T) {
	in := newInstall(t)
	pw := filepath.Join(in.root, "etc/mailctl/relay.pw")
	os.WriteFile(pw, []byte("s3cret"), 0o644)
	appendFile(t, in.cfg.File, fmt.Sprintf("\n[relay]\nhost = \"smtp.relay.test\"\nusername = \"u\"\npassword_file = %q\n", pw))
	var got []protocol.Finding
	for _, x := range in.check(t) {
		if x.ID == "secret.insecure" {
			got = append(got, x)
		}
	}
	if len(got) != 1 {
		t.Fatalf("secret findings %+v, want one", got)
	}
	chmod := "chmod 600 " + pw
	if os.Geteuid() == 0 {
		chmod = "sudo " + chmod
	}
	if !strings.Contains(got[0].Message, "relay.password_file: "+pw+" has mode 0644") || got[0].Fix != "run `"+chmod+"`" {
		t.Errorf("finding %q, fix %q; want the key, the file, its mode and `%s`", got[0].Message, got[0].Fix, chmod)
	}
}

// TestServedCertificate: doctor judges the certificate the daemon serves,
// fetched with STARTTLS from the listener (root's doctor), against the
// file: a renewal the daemon did not take into use is a failure, and the
// expiry is the served certificate's.
func TestServedCertificate(t *testing.T) {
	in := newInstall(t)
	fileCert, err := tls.LoadX509KeyPair(in.cfg.SMTP.TLSCert, in.cfg.SMTP.TLSKey)
	if err != nil {
		t.Fatal(err)
	}
	ca := testcert.NewCA(t)
	stale := ca.Issue(t, "mx.example.test")
	in.env.Now = func() time.Time { return stale.Leaf.NotAfter.Add(-24 * time.Hour) } // the served one expires tomorrow
	in.env.ServedCertificate = nil
	for _, tc := range []struct {
		name     string
		serve    tls.Certificate
		want     []string // finding ids
		inMsg    string
		severity string
	}{
		{"the file's", fileCert, []string{"tls.cert"}, "served on 127.0.0.1:", OK},
		{"another", stale, []string{"tls.served_differs", "tls.expiring"}, "other than the one in " + in.cfg.SMTP.TLSCert, Fail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mx := fakemx.New(t, "127.0.0.1", &tls.Config{Certificates: []tls.Certificate{tc.serve}})
			_, port, _ := net.SplitHostPort(mx.Addr)
			in.cfg.SMTP.Listen = []string{"0.0.0.0:" + port}
			var f findings
			checkTLS(context.Background(), &f, in.cfg, in.env)
			var ids []string
			for _, x := range f {
				ids = append(ids, x.ID)
			}
			if strings.Join(ids, ",") != strings.Join(tc.want, ",") || f[0].Severity != tc.severity || !strings.Contains(f[0].Message, tc.inMsg) {
				t.Fatalf("findings %+v, want %v, the first %s saying %q", f, tc.want, tc.severity, tc.inMsg)
			}
			if mx.Conns() != 1 {
				t.Errorf("%d probe connections, want 1", mx.Conns())
			}
		})
	}
	// A listener that answers but whose STARTTLS fails is a finding.
	mx := fakemx.New(t, "127.0.0.1", &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return nil, errors.New("no") }})
	_, port, _ := net.SplitHostPort(mx.Addr)
	in.cfg.SMTP.Listen = []string{"127.0.0.1:" + port}
	var f findings
	checkTLS(context.Background(), &f, in.cfg, in.env)
	if f[0].ID != "tls.starttls" || f[0].Severity != Fail {
		t.Fatalf("a failing STARTTLS: %+v", f)
	}
}

// TestMisspelledKeyChecksTheFilesValues: with one unknown key the other
// checks run on what the file says, not on the defaults, which would report
// no TLS, missing role mailboxes and the file's mailboxes as orphans.
func TestMisspelledKeyChecksTheFilesValues(t *testing.T) {
	in := newInstall(t)
	appendFile(t, in.cfg.File, "\nsmtp_lisen = 1\n")
	_, f := CheckFile(context.Background(), in.cfg.File, in.env)
	if len(f) == 0 || f[0].ID != "config.unknown_key" {
		t.Fatalf("first finding %+v is not the unknown key", f)
	}
	for _, x := range f {
		switch x.ID {
		case "tls.none", "mailbox.orphaned", "role.missing", "config.ok":
			t.Errorf("a misspelled key gave %s: %s", x.ID, x.Message)
		}
	}
}
