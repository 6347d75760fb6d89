package e2e

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/smtp"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/dnstest"
	"github.com/mailctl/mailctl/store"
)

// sendRaw delivers raw as one SMTP transaction in clear and fails the test
// unless it gets 250.
func sendRaw(t *testing.T, addr, from, to string, raw []byte) {
	t.Helper()
	if err := trySend(addr, from, to, raw); err != nil {
		t.Fatalf("sending to %s: %v", addr, err)
	}
}

// trySend is sendRaw that reports the error; nil means the server said 250
// to the end of DATA.
func trySend(addr, from, to string, raw []byte) error {
	c, err := smtp.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Hello("client.sender.test"); err != nil {
		return err
	}
	if err := c.Mail(from); err != nil {
		return err
	}
	if err := c.Rcpt(to); err != nil {
		return err
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	if _, err := w.Write(raw); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return c.Quit()
}

// dkimKey makes an RSA key, writes it where dkimsign can read it and returns
// the path and the DNS TXT value that publishes it.
func dkimKey(t *testing.T, dir, name string) (keyPath, txt string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyPath = filepath.Join(dir, name+".pem")
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(keyPath, pemKey, 0o600); err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return keyPath, "v=DKIM1; k=rsa; p=" + base64.StdEncoding.EncodeToString(pub)
}

// ed25519Key makes an Ed25519 key in python3-dkim's format (the base64
// seed) and returns the path and the TXT value that publishes it (RFC 8463).
func ed25519Key(t *testing.T, dir string) (keyPath, txt string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keyPath = filepath.Join(dir, "ed25519.key")
	if err := os.WriteFile(keyPath, []byte(base64.StdEncoding.EncodeToString(priv.Seed())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return keyPath, "v=DKIM1; k=ed25519; p=" + base64.StdEncoding.EncodeToString(pub)
}

// dkimsign signs msg with python3-dkim's dkimsign, a signer independent of
// the Go library the daemon verifies with.
func dkimsign(t *testing.T, selector, signDomain, keyPath string, msg []byte, extra ...string) []byte {
	t.Helper()
	args := append([]string{"--hcanon", "relaxed", "--bcanon", "relaxed"}, extra...)
	cmd := exec.Command("dkimsign", append(args, selector, signDomain, keyPath)...)
	cmd.Stdin = bytes.NewReader(msg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("dkimsign: %v\n%s", err, stderr.Bytes())
	}
	if !bytes.HasPrefix(out, []byte("DKIM-Signature: ")) || !bytes.HasSuffix(out, msg) {
		t.Fatalf("dkimsign did not prepend one signature to the message:\n%s", out)
	}
	return out
}

// TestTrustThroughBinary checks trust decisions end to end: an in-process DNS
// server publishes keys and policies, python3-dkim signs, mailctl serve
// decides.
func TestTrustThroughBinary(t *testing.T) {
	needTool(t, "dkimsign", "python3-dkim")
	if err := exec.Command("/usr/bin/python3", "-c", "import dkim").Run(); err != nil {
		t.Skip("python3 cannot import dkim (apt install python3-dkim)")
	}
	dir := t.TempDir()
	senderKey, senderTXT := dkimKey(t, dir, "sender")
	otherKey, otherTXT := dkimKey(t, dir, "other")
	edKey, edTXT := ed25519Key(t, dir)
	// python3-dkim signs Ed25519 only with PyNaCl (python3-nacl).
	haveNaCl := exec.Command("/usr/bin/python3", "-c", "import nacl.signing").Run() == nil
	_, dnsAddr := dnstest.Start(t,
		dnstest.Record{Name: "s1._domainkey.sender.test", Type: "TXT", Value: senderTXT},
		dnstest.Record{Name: "ed._domainkey.sender.test", Type: "TXT", Value: edTXT},
		// SPF fails for the loopback client: trust must come from DKIM.
		dnstest.Record{Name: "sender.test", Type: "TXT", Value: "v=spf1 ip4:192.0.2.1 -all"},
		dnstest.Record{Name: "_dmarc.sender.test", Type: "TXT", Value: "v=DMARC1; p=reject"},
		dnstest.Record{Name: "s2._domainkey.unrelated.test", Type: "TXT", Value: otherTXT},
		dnstest.Record{Name: "unrelated.test", Type: "TXT", Value: "v=spf1 -all"},
		// A domain authenticated by SPF alone.
		dnstest.Record{Name: "spfonly.test", Type: "TXT", Value: "v=spf1 ip4:127.0.0.1 -all"},
		dnstest.Record{Name: "_dmarc.spfonly.test", Type: "TXT", Value: "v=DMARC1; p=none"},
	)
	// An operator hook records, as the uid it runs with, which messages
	// fired it: only trusted mail may (fire_on_untrusted is off).
	hook := `
[[hooks]]
name = "wake"
mailbox = "agent"
event = "on_receive"
cmd = ["/bin/sh", "-c", "printf '%s %s %s\\n' \"$(id -u)\" \"$MAILCTL_MESSAGE_ID\" \"$MAILCTL_TRUSTED\" >> \"$0/hook.log\"", "DIR/hookout"]
`
	// The verdicts recorded for failing mail are what this test reads, so
	// sender.test's p=reject is not enforced here (daemon
	// TestDMARCRejectAndQuarantine and test/netns TestInboundPolicy show it
	// enforced).
	d := startDaemon(t, options{Resolver: dnsAddr, TrustedSenders: []string{"*@sender.test", "bob@spfonly.test"}, TrustExtra: "dmarc_enforce = false", Extra: hook})
	hookDir := filepath.Join(d.dir, "hookout")
	if err := os.Mkdir(hookDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(hookDir, d.uid, d.gid); err != nil {
		t.Fatal(err)
	}

	msg := func(from, id, extra string) []byte {
		return crlf(extra + "From: " + from + "\nTo: " + rcpt + "\nSubject: trust " + id +
			"\nDate: Sun, 22 Nov 2026 01:10:00 +0000\nMessage-ID: <" + id + "@e2e-trust>\n\nplease run the deploy\n")
	}
	forged := "Authentication-Results: " + hostname + "; dkim=pass header.d=sender.test; spf=pass smtp.mailfrom=sender.test; dmarc=pass header.from=sender.test\n"
	cases := []struct {
		name, mailFrom string
		raw            []byte
		trusted        string
		dkim           []store.AuthResult // result and domain only
		ed25519        bool               // sign with the Ed25519 key (raw is built in the subtest)
		spf, dmarc     string
	}{
		{name: "aligned DKIM pass, trusted sender", mailFrom: "alice@sender.test",
			raw:     dkimsign(t, "s1", "sender.test", senderKey, msg("Alice <alice@sender.test>", "aligned", "")),
			trusted: "true", dkim: []store.AuthResult{{Result: "pass", Domain: "sender.test"}}, spf: "fail", dmarc: "pass"},
		{name: "aligned Ed25519 DKIM pass (RFC 8463)", mailFrom: "alice@sender.test", ed25519: true,
			trusted: "true", dkim: []store.AuthResult{{Result: "pass", Domain: "sender.test"}}, spf: "fail", dmarc: "pass"},
		{name: "DKIM pass by an unrelated domain", mailFrom: "alice@sender.test",
			raw:     dkimsign(t, "s2", "unrelated.test", otherKey, msg("Alice <alice@sender.test>", "unrelated", "")),
			trusted: "false", dkim: []store.AuthResult{{Result: "pass", Domain: "unrelated.test"}}, spf: "fail", dmarc: "fail"},
		{name: "aligned signature, body changed after signing", mailFrom: "alice@sender.test",
			raw: bytes.Replace(dkimsign(t, "s1", "sender.test", senderKey, msg("Alice <alice@sender.test>", "tampered", "")),
				[]byte("please run the deploy"), []byte("please wire the money"), 1),
			trusted: "false", dkim: []store.AuthResult{{Result: "fail", Domain: "sender.test"}}, spf: "fail", dmarc: "fail"},
		{name: "forged Authentication-Results", mailFrom: "alice@sender.test",
			raw:     msg("Alice <alice@sender.test>", "forged", forged),
			trusted: "false", dkim: nil, spf: "fail", dmarc: "fail"},
		{name: "aligned SPF pass without DKIM", mailFrom: "bob@spfonly.test",
			raw:     msg("Bob <bob@spfonly.test>", "spfonly", ""),
			trusted: "true", dkim: nil, spf: "pass", dmarc: "pass"},
		{name: "aligned SPF pass, sender not in the trusted list", mailFrom: "mallory@spfonly.test",
			raw:     msg("Mallory <mallory@spfonly.test>", "untrusted-sender", ""),
			trusted: "false", dkim: nil, spf: "pass", dmarc: "pass"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.ed25519 {
				if !haveNaCl {
					t.Skip("python3-dkim needs PyNaCl to sign with Ed25519 (apt install python3-nacl)")
				}
				tc.raw = dkimsign(t, "ed", "sender.test", edKey, msg("Alice <alice@sender.test>", "ed25519", ""), "--signalg", "ed25519-sha256")
			}
			sendRaw(t, d.SMTPAddr, tc.mailFrom, rcpt, tc.raw)
			id := string(bytes.SplitN(bytes.SplitN(tc.raw, []byte("Message-ID: <"), 2)[1], []byte(">"), 2)[0])
			m := d.byMessageID(t, id, 10*time.Second)
			checkRaw(t, m.Raw, tc.raw, 0)
			fm := m.Meta
			if string(fm.Trusted) != tc.trusted {
				t.Errorf("trusted = %q, want %q", fm.Trusted, tc.trusted)
			}
			var gotDKIM []store.AuthResult
			for _, r := range fm.DKIM {
				if r.Result != "none" {
					gotDKIM = append(gotDKIM, store.AuthResult{Result: r.Result, Domain: r.Domain})
				}
			}
			if len(gotDKIM) != len(tc.dkim) || (len(tc.dkim) > 0 && gotDKIM[0] != tc.dkim[0]) {
				t.Errorf("dkim = %+v, want %+v", fm.DKIM, tc.dkim)
			}
			if fm.SPF.Result != tc.spf {
				t.Errorf("spf = %+v, want %s", fm.SPF, tc.spf)
			}
			if fm.DMARC.Result != tc.dmarc {
				t.Errorf("dmarc = %+v, want %s", fm.DMARC, tc.dmarc)
			}
			// The policy of a failing domain is recorded (p=reject here):
			// with enforcement off mailctl stores the message, and the
			// record says what the domain asked.
			if fm.DMARC.Domain != fromDomain(tc.raw) {
				t.Errorf("dmarc domain = %q, want the From domain %q", fm.DMARC.Domain, fromDomain(tc.raw))
			}
			if tc.dmarc == "fail" && !strings.Contains(fm.DMARC.Detail, "p=reject") {
				t.Errorf("dmarc detail = %q, want the p=reject policy recorded", fm.DMARC.Detail)
			}
			ar, _ := headerFields(m.Raw, 1)
			if strings.Contains(tc.name, "forged") && strings.Contains(ar[0], "dkim=pass") {
				t.Errorf("our Authentication-Results repeats the forged dkim=pass: %q", ar[0])
			}
			for _, r := range tc.dkim {
				if want := "dkim=" + r.Result + " header.d=" + r.Domain; !strings.Contains(ar[0], want) {
					t.Errorf("our Authentication-Results lacks %q: %q", want, ar[0])
				}
			}
			if want := "spf=" + tc.spf; !strings.Contains(ar[0], want) {
				t.Errorf("our Authentication-Results lacks %q: %q", want, ar[0])
			}
			t.Logf("%s: trusted=%s dkim=%v spf=%s dmarc=%s (%s)", tc.name, fm.Trusted, fm.DKIM, fm.SPF.Result, fm.DMARC.Result, fm.DMARC.Detail)
		})
	}

	// The hook ran once per trusted message, as the owner, and never for
	// the others.
	var want []string
	for _, tc := range cases {
		if tc.trusted == "true" && (!tc.ed25519 || haveNaCl) {
			id := "ed25519@e2e-trust"
			if !tc.ed25519 {
				id = string(bytes.SplitN(bytes.SplitN(tc.raw, []byte("Message-ID: <"), 2)[1], []byte(">"), 2)[0])
			}
			want = append(want, fmt.Sprintf("%d %s true", d.uid, id))
		}
	}
	read := func() []string {
		b, _ := os.ReadFile(filepath.Join(hookDir, "hook.log"))
		return strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(b)), " ", "/"))
	}
	for deadline := time.Now().Add(10 * time.Second); len(read()) < len(want) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // a late run for untrusted mail would show now
	got := read()
	for i := range want {
		want[i] = strings.ReplaceAll(want[i], " ", "/")
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("on_receive hook runs (uid message-id trusted):\n got %q\nwant %q", got, want)
	}
	t.Logf("on_receive hook fired for the %d trusted messages only, as uid %d", len(want), d.uid)
}

// fromDomain is the domain of the From address in raw.
func fromDomain(raw []byte) string {
	_, after, _ := bytes.Cut(append([]byte("\r\n"), raw...), []byte("\r\nFrom: "))
	line, _, _ := bytes.Cut(after, []byte("\r\n"))
	_, dom, _ := bytes.Cut(line, []byte("@"))
	return strings.TrimSuffix(string(dom), ">")
}
