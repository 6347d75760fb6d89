package main

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/smtp"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testcert"
	"github.com/mailctl/mailctl/internal/testproc"
	"github.com/mailctl/mailctl/protocol"
)

// deployHook is the certbot deploy hook docs/setup.md gives, as written.
func deployHook(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/setup.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllSubmatch(doc, -1) {
		if bytes.Contains(m[1], []byte("renewal-hooks/deploy/mailctl")) {
			return string(m[1])
		}
	}
	t.Fatal("docs/setup.md has no deploy hook (a ```sh block naming renewal-hooks/deploy/mailctl)")
	return ""
}

// certbotDir lays out what certbot keeps for one lineage: numbered files in
// archive/ and links to the newest in live/.
type certbotDir struct {
	root, name string
	n          int
}

func (c *certbotDir) lineage() string { return filepath.Join(c.root, "live", c.name) }

// issue writes the next version of the lineage, as a renewal does.
func (c *certbotDir) issue(t *testing.T, pair tls.Certificate) {
	t.Helper()
	c.n++
	archive, live := filepath.Join(c.root, "archive", c.name), c.lineage()
	for _, d := range []string{archive, live} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	certPEM, keyPEM := testcert.PEM(t, pair)
	for base, data := range map[string][]byte{"fullchain": certPEM, "privkey": keyPEM} {
		file := filepath.Join(archive, fmt.Sprintf("%s%d.pem", base, c.n))
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(live, base+".pem")
		os.Remove(link)
		if err := os.Symlink(file, link); err != nil {
			t.Fatal(err)
		}
	}
}

// servedCert is what a STARTTLS client gets from addr.
func servedCert(t *testing.T, addr string) *x509.Certificate {
	t.Helper()
	c, err := smtp.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.StartTLS(&tls.Config{InsecureSkipVerify: true}); err != nil {
		t.Fatal(err)
	}
	st, _ := c.TLSConnectionState()
	c.Quit()
	return st.PeerCertificates[0]
}

func fp(c *x509.Certificate) string { return fmt.Sprintf("%x", sha256.Sum256(c.Raw)) }

// waitLog waits until the daemon's log holds want n times (the daemon
// handles a signal on its own schedule).
func waitLog(t *testing.T, logs *testproc.Output, want string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for strings.Count(logs.String(), want) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not log %q %d times:\n%s", want, n, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCertbotDeployHook runs docs/setup.md's certbot deploy hook, the part
// after certbot, against `mailctl serve`: the first certificate before the
// daemon starts, then a renewal while it runs, whose `systemctl reload
// mailctl` is `mailctl reload PID` (the unit's ExecReload). The served
// certificate changes to the renewed one. Then the doctor the operator runs
// (root: from the files, with --config; a user: from the daemon) sees the
// served certificate, and a key the reload left waiting for a restart, and
// its probes leave no WARN line in the daemon's log.
func TestCertbotDeployHook(t *testing.T) {
	if _, err := exec.LookPath("install"); err != nil {
		t.Skip("the hook needs coreutils' install")
	}
	dir, err := os.MkdirTemp("", "mccb") // a short path for the socket
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	tlsDir, pidFile, bin := filepath.Join(dir, "tls"), filepath.Join(dir, "serve.pid"), filepath.Join(dir, "bin")
	hook := filepath.Join(dir, "deploy-hook")
	if err := os.WriteFile(hook, []byte(strings.ReplaceAll(deployHook(t), "/etc/mailctl/tls", tlsDir)), 0o755); err != nil {
		t.Fatal(err)
	}
	// systemctl as the unit answers it: is-active while serve runs, and
	// reload through the unit's ExecReload.
	os.MkdirAll(bin, 0o755)
	systemctl := fmt.Sprintf(`#!/bin/sh
case "$*" in
"is-active --quiet mailctl") test -s %[1]q ;;
"reload mailctl") MAILCTL_AS_BINARY=1 exec %[2]q reload "$(cat %[1]q)" ;;
*) echo "systemctl $*: not in this test" >&2; exit 1 ;;
esac
`, pidFile, os.Args[0])
	if err := os.WriteFile(filepath.Join(bin, "systemctl"), []byte(systemctl), 0o755); err != nil {
		t.Fatal(err)
	}
	cb := &certbotDir{root: filepath.Join(dir, "letsencrypt"), name: "mx.example.com"}
	runHook := func() {
		t.Helper()
		cmd := exec.Command(hook)
		cmd.Env = append(os.Environ(), "RENEWED_LINEAGE="+cb.lineage(), "PATH="+bin+":"+os.Getenv("PATH"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("the deploy hook: %v\n%s", err, out)
		}
	}
	ca := testcert.NewCA(t)
	first, renewed := ca.Issue(t, "mx.example.com"), ca.Issue(t, "mx.example.com")
	cb.issue(t, first)
	runHook() // by hand, as docs/setup.md says for the first certificate

	smtpAddr := freePort(t)
	sock := filepath.Join(dir, "mailctl.sock")
	cfgPath := serveConfig(t, dir, smtpAddr,
		fmt.Sprintf("tls_cert = %q", filepath.Join(tlsDir, "cert.pem")), fmt.Sprintf("tls_key = %q", filepath.Join(tlsDir, "key.pem")))
	serve := exec.Command(os.Args[0], "serve", "--config", cfgPath)
	serve.Env = append(os.Environ(), "MAILCTL_AS_BINARY=1")
	var logs testproc.Output
	serve.Stderr = &logs
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			serve.Process.Kill()
			serve.Wait()
		}
	})
	os.WriteFile(pidFile, []byte(fmt.Sprint(serve.Process.Pid)), 0o644)
	waitLog(t, &logs, "mailctl daemon ready", 1)
	if got := servedCert(t, smtpAddr); fp(got) != fp(first.Leaf) {
		t.Fatalf("serving %s, want the first certificate %s", fp(got), fp(first.Leaf))
	}

	cb.issue(t, renewed)
	runHook() // as certbot does after the renewal
	waitLog(t, &logs, `msg="config reloaded"`, 1)
	if got := servedCert(t, smtpAddr); fp(got) != fp(renewed.Leaf) {
		t.Fatalf("after the hook: serving %s, want the renewed certificate %s\n%s", fp(got), fp(renewed.Leaf), logs.String())
	}
	waitLog(t, &logs, "fingerprint="+fp(renewed.Leaf), 1) // "TLS certificate now in use"

	// A key that needs a restart, changed and reloaded: doctor says so,
	// as root from the files (and the daemon), as a user from the daemon.
	f, _ := os.OpenFile(cfgPath, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("[delivery]\nretry_for = \"4d\"\n")
	f.Close()
	if _, e, code := mailctl(t, nil, "reload", fmt.Sprint(serve.Process.Pid)); code != 0 {
		t.Fatalf("reload: %s", e)
	}
	waitLog(t, &logs, `msg="config reloaded"`, 2)
	args, env := []string{"doctor", "--json"}, []string{"MAILCTL_SOCKET=" + sock}
	if os.Geteuid() == 0 {
		args, env = append(args, "--config", cfgPath), nil
	}
	out, e, _ := mailctl(t, env, args...)
	var r struct {
		Source   string             `json:"source"`
		Findings []protocol.Finding `json:"findings"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("doctor --json: %v\n%s%s", err, out, e)
	}
	found := map[string]protocol.Finding{}
	for _, x := range r.Findings {
		found[x.ID] = x
	}
	if p := found["config.restart_pending"]; !strings.Contains(p.Message, "delivery.retry_for") {
		t.Errorf("doctor (%s) does not report config.restart_pending for delivery.retry_for: %+v", r.Source, r.Findings)
	}
	if c := found["tls.cert"]; c.Severity != "ok" || !strings.Contains(c.Message, fp(renewed.Leaf)) || !strings.Contains(c.Message, "served") {
		t.Errorf("doctor (%s) on the served certificate: %+v, want ok naming %s", r.Source, c, fp(renewed.Leaf))
	}

	// Stopped, the daemon has written every line: doctor's probes left no
	// WARN (the one WARN expected says the key waits for a restart).
	serve.Process.Signal(syscall.SIGTERM)
	serve.Wait()
	stopped = true
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "level=WARN") && !strings.Contains(line, "take effect only at the next restart") {
			t.Errorf("a WARN line in the daemon's log: %s", line)
		}
	}
	if n := strings.Count(logs.String(), "new TLS certificate refused"); n != 0 {
		t.Errorf("%d refusals of a good certificate:\n%s", n, logs.String())
	}
}
