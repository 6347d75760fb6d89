package dkim

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	msgdkim "github.com/emersion/go-msgauth/dkim"

	"github.com/mailctl/mailctl/daemon/outbound/compose"
	"github.com/mailctl/mailctl/internal/pycheck"
	"github.com/mailctl/mailctl/protocol"
)

// testKeys generates one Ed25519 and one RSA key (RSA generation is slow, so
// the pair is made once per test binary).
var (
	keysOnce sync.Once
	keysDir  string
	keysErr  error
	keysVal  []*Key
)

func testKeys(t testing.TB) []*Key {
	t.Helper()
	keysOnce.Do(func() {
		keysDir, keysErr = os.MkdirTemp("", "outbound-dkim-")
		if keysErr != nil {
			return
		}
		if _, keysErr = GenerateKey(keysDir, "ed1", "ed25519"); keysErr != nil {
			return
		}
		if _, keysErr = GenerateKey(keysDir, "rsa1", "rsa"); keysErr != nil {
			return
		}
		keysVal, keysErr = LoadKeys(keysDir)
	})
	if keysErr != nil {
		t.Fatal(keysErr)
	}
	return keysVal
}

func TestMain(m *testing.M) {
	code := m.Run()
	if keysDir != "" {
		os.RemoveAll(keysDir)
	}
	os.Exit(code)
}

// txtRecords maps "<sel>._domainkey.<domain>" to the published value.
func txtRecords(domain string, keys []*Key) map[string]string {
	m := map[string]string{}
	for _, k := range keys {
		m[k.Selector+"._domainkey."+domain] = k.TXTValue()
	}
	return m
}

func signedTestMessage(t testing.TB) []byte {
	t.Helper()
	c, err := compose.Build(compose.Input{FromName: "Agent Smith", FromAddress: "agent@example.com", Domain: "example.com", Now: time.Now(),
		Args: protocol.SendArgs{To: []string{"bob@remote.test"}, Cc: []string{"carol@remote.test"}, Subject: "Quarterly report – ünïcode", Body: "# Report\n\nAll **good**.\n"}})
	if err != nil {
		t.Fatal(err)
	}
	signed, err := Sign(c.Raw, "example.com", testKeys(t))
	if err != nil {
		t.Fatal(err)
	}
	return signed
}

func goVerify(t *testing.T, msg []byte, txt map[string]string) []*msgdkim.Verification {
	t.Helper()
	vs, err := msgdkim.VerifyWithOptions(bytes.NewReader(msg), &msgdkim.VerifyOptions{LookupTXT: func(name string) ([]string, error) {
		if v, ok := txt[strings.TrimSuffix(name, ".")]; ok {
			return []string{v}, nil
		}
		return nil, os.ErrNotExist
	}})
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

func TestKeyFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dkim")
	k, err := GenerateKey(dir, "s1", "ed25519")
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(k.Path)
	dst, _ := os.Stat(dir)
	if st.Mode().Perm() != 0o600 || dst.Mode().Perm() != 0o700 {
		t.Fatalf("modes: key %v dir %v, want 0600/0700", st.Mode().Perm(), dst.Mode().Perm())
	}
	pem, _ := os.ReadFile(k.Path)
	if !bytes.HasPrefix(pem, []byte("-----BEGIN PRIVATE KEY-----")) {
		t.Fatalf("not PKCS#8 PEM: %.40q", pem)
	}
	if _, err := GenerateKey(dir, "s1", "rsa"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("overwrote an existing key: %v", err)
	}
	if after, _ := os.ReadFile(k.Path); !bytes.Equal(after, pem) {
		t.Fatal("key file changed")
	}
	for _, bad := range []struct{ sel, alg string }{{"../x", "ed25519"}, {"a.b", "ed25519"}, {"ok", "dsa"}, {"", "rsa"}} {
		if _, err := GenerateKey(dir, bad.sel, bad.alg); err == nil {
			t.Errorf("GenerateKey(%q, %q) accepted", bad.sel, bad.alg)
		}
	}
	os.WriteFile(filepath.Join(dir, "README"), []byte("not a key"), 0o600)
	if keys, err := LoadKeys(dir); err != nil || len(keys) != 1 || keys[0].Selector != "s1" || keys[0].Algorithm != "ed25519" {
		t.Fatalf("LoadKeys: %v %+v", err, keys)
	}
	os.WriteFile(filepath.Join(dir, "broken.key"), []byte("garbage"), 0o600)
	if _, err := LoadKeys(dir); err == nil || !strings.Contains(err.Error(), "broken.key") {
		t.Fatalf("a broken key must be an error naming it, got %v", err)
	}
	if keys, err := LoadKeys(filepath.Join(dir, "missing")); err != nil || len(keys) != 0 {
		t.Fatalf("missing dir: %v %v", keys, err)
	}
}

var quotedRE = regexp.MustCompile(`"([^"]*)"`)

func TestTXTRecordSplitsAt255(t *testing.T) {
	for _, k := range testKeys(t) {
		rec := TXTRecord("example.com", k)
		prefix := k.Selector + "._domainkey.example.com. IN TXT ( "
		if !strings.HasPrefix(rec, prefix) || !strings.HasSuffix(rec, " )") {
			t.Fatalf("record shape: %s", rec)
		}
		var joined string
		parts := quotedRE.FindAllStringSubmatch(rec, -1)
		for _, p := range parts {
			s := p[1]
			if len(s) > 255 {
				t.Fatalf("string of %d bytes", len(s))
			}
			joined += s
		}
		if joined != k.TXTValue() {
			t.Fatalf("split record does not rejoin to the value")
		}
		if k.Algorithm == "rsa" && len(parts) < 2 {
			t.Fatalf("RSA-2048 value should need two strings: %s", rec)
		}
		if !strings.HasPrefix(k.TXTValue(), "v=DKIM1; k="+k.Algorithm+"; p=") {
			t.Fatalf("value %s", k.TXTValue())
		}
	}
}

func TestSignVerifiesWithGoMsgauth(t *testing.T) {
	keys := testKeys(t)
	signed := signedTestMessage(t)
	txt := txtRecords("example.com", keys)
	vs := goVerify(t, signed, txt)
	if len(vs) != 2 {
		t.Fatalf("%d signatures, want 2 (Ed25519 + RSA)", len(vs))
	}
	for _, v := range vs {
		if v.Err != nil {
			t.Errorf("signature %s: %v", v.Domain, v.Err)
		}
		for _, h := range []string{"from", "to", "cc", "subject", "date", "message-id", "mime-version", "content-type"} {
			n := 0
			for _, x := range v.HeaderKeys {
				if strings.EqualFold(x, h) {
					n++
				}
			}
			if n != 2 {
				t.Errorf("%s listed %d times in h=, want 2 (over-signed)", h, n)
			}
		}
	}
	tampers := map[string]func([]byte) []byte{
		"one body byte": func(b []byte) []byte { return bytes.Replace(b, []byte("good"), []byte("gooD"), 1) },
		"added Cc header": func(b []byte) []byte {
			return bytes.Replace(b, []byte("\r\nSubject:"), []byte("\r\nCc: evil@attacker.test\r\nSubject:"), 1)
		},
		"second From": func(b []byte) []byte {
			i := bytes.Index(b, []byte("\r\nFrom:"))
			return append(append(append([]byte{}, b[:i]...), []byte("\r\nFrom: ceo@example.com")...), b[i:]...)
		},
	}
	for name, tamper := range tampers {
		for _, v := range goVerify(t, tamper(signed), txt) {
			if v.Err == nil {
				t.Errorf("%s: signature still verifies", name)
			}
		}
	}
}

func TestSignVerifiesWithPythonDKIM(t *testing.T) {
	pycheck.Need(t, "dkim")
	pycheck.Need(t, "nacl") // python3-dkim needs it for Ed25519
	keys := testKeys(t)
	signed := signedTestMessage(t)
	txt := txtRecords("example.com", keys)
	bad := bytes.Replace(signed, []byte("good"), []byte("gooD"), 1)
	got := pycheck.VerifyDKIM(t, txt, 2, signed, bad)
	if !got[0][0] || !got[0][1] {
		t.Fatalf("python3-dkim verdicts %v, want [true true]", got[0])
	}
	if got[1][0] || got[1][1] {
		t.Fatalf("python3-dkim passed a modified body: %v", got[1])
	}
}
