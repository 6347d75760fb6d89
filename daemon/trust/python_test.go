package trust

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/dnstest"
)

// pySign signs with python3-dkim (the library behind Debian's dkimsign), an
// implementation independent of the one Check verifies with.
const pySign = `
import dkim, sys
key = open(sys.argv[1], 'rb').read()
msg = sys.stdin.buffer.read()
sig = dkim.sign(msg, sys.argv[3].encode(), sys.argv[2].encode(), key,
    canonicalize=(b'relaxed', b'simple'), length=(sys.argv[4] == 'l'),
    include_headers=[b'from', b'to', b'subject', b'date', b'message-id'])
sys.stdout.buffer.write(sig + msg)
`

func pythonDKIM(t *testing.T) string {
	t.Helper()
	const py = "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skip("independent signer unavailable: /usr/bin/python3 missing (install python3-dkim)")
	}
	if out, err := exec.Command(py, "-c", "import dkim").CombinedOutput(); err != nil {
		t.Skipf("independent signer unavailable: python3 cannot import dkim (install python3-dkim): %s", bytes.TrimSpace(out))
	}
	return py
}

func TestIndependentSigner(t *testing.T) {
	t.Parallel() // waits on DNS deadlines or Python; the rest of the package need not wait with it
	py := pythonDKIM(t)
	keys(t)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key.pem")
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)})
	if err := os.WriteFile(keyFile, pemKey, 0o600); err != nil {
		t.Fatal(err)
	}
	signWithPython := func(t *testing.T, msg []byte, domain string, length ...bool) []byte {
		t.Helper()
		l := "-"
		if len(length) > 0 && length[0] {
			l = "l"
		}
		cmd := exec.Command(py, "-c", pySign, keyFile, domain, "rsa", l)
		cmd.Stdin = bytes.NewReader(msg)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("python dkim.sign: %v: %s", err, stderr.String())
		}
		return out
	}

	m := world(t)
	m.SetTXT("rsa._domainkey.evil.test", dkimTXT(t, rsaKey.Public()))
	c := &Checker{Resolver: m}

	t.Run("aligned signature is trusted", func(t *testing.T) {
		raw := signWithPython(t, message("Boss <boss@trusted.test>"), "trusted.test")
		got := c.Check(context.Background(), Input{RemoteIP: evilIP, Helo: "relay.test", MailFrom: "x@relay.test", Raw: raw})
		assertResult(t, got, want{spf: "none", dkim: []string{"pass"}, dkimDomains: []string{"trusted.test"}, dmarc: "pass", aligned: true, trusted: "true", policy: "reject"})
	})
	t.Run("unrelated signer with a trusted From is not", func(t *testing.T) {
		raw := signWithPython(t, message("Boss <boss@trusted.test>"), "evil.test")
		got := c.Check(context.Background(), Input{RemoteIP: evilIP, Helo: "relay.test", MailFrom: "x@relay.test", Raw: raw})
		assertResult(t, got, want{spf: "none", dkim: []string{"pass"}, dkimDomains: []string{"evil.test"}, dmarc: "fail", aligned: false, trusted: "false", policy: "reject"})
	})
	t.Run("body changed after signing", func(t *testing.T) {
		raw := signWithPython(t, message("boss@trusted.test"), "trusted.test")
		raw = append(raw, []byte("P.S. and send the keys.\r\n")...)
		got := c.Check(context.Background(), Input{RemoteIP: evilIP, Helo: "relay.test", MailFrom: "x@relay.test", Raw: raw})
		assertResult(t, got, want{spf: "none", dkim: []string{"fail"}, dmarc: "fail", aligned: false, trusted: "false", policy: "reject"})
	})
	t.Run("body length tag l= is refused", func(t *testing.T) {
		raw := signWithPython(t, message("boss@trusted.test"), "trusted.test", true)
		if !bytes.Contains(raw, []byte(" l=")) && !bytes.Contains(raw, []byte(";l=")) && !bytes.Contains(raw, []byte("; l=")) {
			t.Fatalf("signer did not add l=: %s", raw)
		}
		raw = append(raw, []byte("P.S. unsigned text.\r\n")...)
		got := c.Check(context.Background(), Input{RemoteIP: evilIP, Helo: "relay.test", MailFrom: "x@relay.test", Raw: raw})
		assertResult(t, got, want{spf: "none", dkim: []string{"fail"}, dmarc: "fail", aligned: false, trusted: "false", policy: "reject"})
	})
}

// TestDkimsignCLI signs with Debian's dkimsign command (python3-dkim) using
// Ed25519, and verifies through a real DNS server.
func TestDkimsignCLI(t *testing.T) {
	t.Parallel() // waits on DNS deadlines or Python; the rest of the package need not wait with it
	pythonDKIM(t)
	bin, err := exec.LookPath("dkimsign")
	if err != nil {
		t.Skip("dkimsign not installed (python3-dkim)")
	}
	keys(t)
	keyFile := filepath.Join(t.TempDir(), "ed.key")
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(edKey.Seed())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--signalg", "ed25519-sha256", "ed", "trusted.test", keyFile)
	cmd.Stdin = bytes.NewReader(message("Boss <boss@trusted.test>"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("dkimsign: %v: %s", err, stderr.String())
	}
	_, addr := dnstest.Start(t,
		dnstest.Record{Name: "ed._domainkey.trusted.test", Type: "TXT", Value: dkimTXT(t, edKey.Public())},
		dnstest.Record{Name: "_dmarc.trusted.test", Type: "TXT", Value: "v=DMARC1; p=reject"},
	)
	c := &Checker{Resolver: resolver.New(addr, time.Second), Timeout: 5 * time.Second}
	got := c.Check(context.Background(), Input{RemoteIP: evilIP, Helo: "relay.test", MailFrom: "x@relay.test", Raw: raw})
	assertResult(t, got, want{spf: "none", dkim: []string{"pass"}, dkimDomains: []string{"trusted.test"}, dmarc: "pass", aligned: true, trusted: "true", policy: "reject"})
}
