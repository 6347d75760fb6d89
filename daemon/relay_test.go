package daemon

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/fakemx"
	"github.com/mailctl/mailctl/internal/testcert"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// relayScene is a smarthost whose certificate a private CA signed, reached
// as relay.corp.test on a port the test picks, and the files a daemon
// needs to use it: the CA (relay.ca_file) and the password.
type relayScene struct {
	relay  *fakemx.Server
	dns    *resolver.Map
	dm     *fakemx.DialMap
	ca     *testcert.CA
	caFile string
	pwFile string
}

const relayPassword = "s3cret"

// newRelayScene starts the relay: STARTTLS, or implicit TLS when implicit,
// answering for port, with AUTH PLAIN as relayuser/relayPassword. cert is
// what it serves (nil: one the scene's CA issues for relay.corp.test).
func newRelayScene(t *testing.T, port int, implicit bool, cert *tls.Certificate) *relayScene {
	t.Helper()
	s := &relayScene{dns: &resolver.Map{}, dm: &fakemx.DialMap{}, ca: testcert.NewCA(t)}
	if cert == nil {
		c := s.ca.Issue(t, "relay.corp.test")
		cert = &c
	}
	tlsCfg := &tls.Config{Certificates: []tls.Certificate{*cert}}
	if implicit {
		s.relay = fakemx.NewImplicit(t, "127.0.0.1", tlsCfg)
	} else {
		s.relay = fakemx.New(t, "127.0.0.1", tlsCfg)
	}
	s.relay.RequireAuth(relayPassword)
	s.dns.SetIP("relay.corp.test", "127.0.0.71")
	s.dm.Set(fmt.Sprintf("127.0.0.71:%d", port), s.relay.Addr)
	dir := testusers.SharedDir(t)
	s.caFile, s.pwFile = filepath.Join(dir, "corp-ca.pem"), filepath.Join(dir, "relay.pw")
	if err := os.WriteFile(s.caFile, s.ca.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	s.setPassword(t, relayPassword)
	return s
}

func (s *relayScene) setPassword(t *testing.T, pw string) {
	t.Helper()
	if err := os.WriteFile(s.pwFile, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// config is the [relay] table for the scene, with more lines.
func (s *relayScene) config(port int, more string) string {
	return fmt.Sprintf("[relay]\nhost = \"relay.corp.test\"\nport = %d\nusername = \"relayuser\"\npassword_file = %q\nca_file = %q\n%s\n",
		port, s.pwFile, s.caFile, more)
}

func (s *relayScene) start(t *testing.T, port int, more string) *testDaemon {
	t.Helper()
	td := startDaemonWith(t, s.config(port, more), Options{Resolver: s.dns, Dial: s.dm.Dial})
	td.ensureMine(t, "alice")
	return td
}

func sendOne(t *testing.T, td *testDaemon, to string) protocol.SendResult {
	t.Helper()
	var res protocol.SendResult
	if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "alice", To: []string{to}, Subject: "via the relay", Body: "hello"}, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Recipients) != 1 {
		t.Fatalf("recipients %+v", res.Recipients)
	}
	return res
}

// TestRelayStartTLSWithPrivateCA: a relay on a port of its own with
// STARTTLS and AUTH, whose certificate a private CA signed, trusted through
// relay.ca_file alone (no SSL_CERT_FILE, no system store).
func TestRelayStartTLSWithPrivateCA(t *testing.T) {
	s := newRelayScene(t, 2587, false, nil)
	td := s.start(t, 2587, "")
	res := sendOne(t, td, "friend@remote.test")
	if r := res.Recipients[0]; r.Status != "delivered" || r.TLS != "verified" {
		t.Fatalf("through the relay: %+v", r)
	}
	msgs := s.relay.Messages()
	if len(msgs) != 1 || msgs[0].User != "relayuser" || !msgs[0].TLS || msgs[0].Rcpts[0] != "friend@remote.test" {
		t.Fatalf("the relay saw %+v", msgs)
	}
}

// TestRelayImplicitTLSOnAnotherPort: relay.tls = "implicit" speaks TLS from
// the first byte on a port that is not 465.
func TestRelayImplicitTLSOnAnotherPort(t *testing.T) {
	s := newRelayScene(t, 4650, true, nil)
	td := s.start(t, 4650, "tls = \"implicit\"")
	res := sendOne(t, td, "friend@remote.test")
	if r := res.Recipients[0]; r.Status != "delivered" || r.TLS != "verified" {
		t.Fatalf("implicit TLS on 4650: %+v", r)
	}
	if msgs := s.relay.Messages(); len(msgs) != 1 || msgs[0].User != "relayuser" || !msgs[0].TLS {
		t.Fatalf("the relay saw %+v", msgs)
	}
}

// TestRelayWrongPasswordReportsTheTLS: a refused password defers the mail,
// and the recipient's status says the TLS it went over (verified), not none.
func TestRelayWrongPasswordReportsTheTLS(t *testing.T) {
	s := newRelayScene(t, 2587, false, nil)
	s.setPassword(t, "wrong")
	td := s.start(t, 2587, "")
	r := sendOne(t, td, "friend@remote.test").Recipients[0]
	if r.Status != "deferred" || !strings.Contains(r.Detail, "relay authentication failed") || r.TLS != "verified" {
		t.Fatalf("wrong password: %+v; want deferred, the authentication failure, tls verified", r)
	}
	if len(s.relay.Messages()) != 0 {
		t.Fatal("the relay took mail without authentication")
	}
}

// TestRelayWrongCertificateGetsNoPassword: a relay whose certificate the
// CA in ca_file did not sign is never sent AUTH; the mail waits.
func TestRelayWrongCertificateGetsNoPassword(t *testing.T) {
	other := testcert.NewCA(t).Issue(t, "relay.corp.test")
	s := newRelayScene(t, 2587, false, &other)
	td := s.start(t, 2587, "")
	r := sendOne(t, td, "friend@remote.test").Recipients[0]
	if r.Status != "deferred" || !strings.Contains(r.Detail, "does not verify") {
		t.Fatalf("wrong certificate: %+v; want deferred, certificate does not verify", r)
	}
	if len(s.relay.Messages()) != 0 {
		t.Fatal("delivered through a relay whose certificate does not verify")
	}
}

// TestReadableRelayPasswordRefused: a password file others can read stops
// the daemon from starting, and a reload once it became readable is
// refused, each naming the file and the chmod that fixes it.
func TestReadableRelayPasswordRefused(t *testing.T) {
	s := newRelayScene(t, 2587, false, nil)
	os.Chmod(s.pwFile, 0o644)
	dir := testusers.SharedDir(t)
	path := filepath.Join(dir, "config.toml")
	text := "hostname = \"mx.example.test\"\ndomains = [\"example.test\"]\n" + s.config(2587, "") +
		fmt.Sprintf("[paths]\nstate_dir = %q\nsocket = %q\ndkim_dir = %q\n", filepath.Join(dir, "state"), filepath.Join(dir, "run", "mailctl.sock"), filepath.Join(dir, "dkim"))
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(cfg, Options{Logger: quietLogger(t), Resolver: s.dns})
	if err == nil || !strings.Contains(err.Error(), "relay.password_file: "+s.pwFile+" has mode 0644") || !strings.Contains(err.Error(), "chmod 600 "+s.pwFile) {
		t.Fatalf("start with a readable password file: %v", err)
	}

	os.Chmod(s.pwFile, 0o600)
	td := s.start(t, 2587, "")
	os.Chmod(s.pwFile, 0o640)
	if err := td.Reload(td.cfg.File); err == nil || !strings.Contains(err.Error(), "chmod 600 "+s.pwFile) {
		t.Fatalf("reload with a readable password file: %v", err)
	}
	// A DKIM key that became readable is refused the same way.
	os.Chmod(s.pwFile, 0o600)
	if err := EnsureDevKeys(td.cfg.Paths.DKIMDir); err != nil {
		t.Fatal(err)
	}
	keys, _ := filepath.Glob(filepath.Join(td.cfg.Paths.DKIMDir, "*.key"))
	if len(keys) == 0 {
		t.Fatal("no DKIM key")
	}
	os.Chmod(keys[0], 0o644)
	if err := td.Reload(td.cfg.File); err == nil || !strings.Contains(err.Error(), "paths.dkim_dir: "+keys[0]) {
		t.Fatalf("reload with a readable DKIM key: %v", err)
	}
}
