package trust

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/emersion/go-msgauth/dkim"

	"github.com/mailctl/mailctl/daemon/resolver"
)

// Keys are generated once per test binary: RSA-2048 generation is the slow
// part of these tests.
var (
	keysOnce sync.Once
	edKey    ed25519.PrivateKey
	rsaKey   *rsa.PrivateKey
	evilKey  ed25519.PrivateKey
)

func keys(t testing.TB) {
	t.Helper()
	keysOnce.Do(func() {
		var err error
		if _, edKey, err = ed25519.GenerateKey(rand.Reader); err != nil {
			panic(err)
		}
		if _, evilKey, err = ed25519.GenerateKey(rand.Reader); err != nil {
			panic(err)
		}
		if rsaKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
	})
}

// dkimTXT is the DNS record publishing pub (RFC 6376 §3.6.1, RFC 8463).
func dkimTXT(t testing.TB, pub crypto.PublicKey) string {
	t.Helper()
	switch k := pub.(type) {
	case ed25519.PublicKey:
		return "v=DKIM1; k=ed25519; p=" + base64.StdEncoding.EncodeToString(k)
	case *rsa.PublicKey:
		der, err := x509.MarshalPKIXPublicKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return "v=DKIM1; k=rsa; p=" + base64.StdEncoding.EncodeToString(der)
	}
	t.Fatalf("unknown key type %T", pub)
	return ""
}

func sign(t testing.TB, msg []byte, domain, selector string, key crypto.Signer) []byte {
	t.Helper()
	var out bytes.Buffer
	err := dkim.Sign(&out, bytes.NewReader(msg), &dkim.SignOptions{
		Domain:                 domain,
		Selector:               selector,
		Signer:                 key,
		HeaderCanonicalization: dkim.CanonicalizationRelaxed,
		BodyCanonicalization:   dkim.CanonicalizationRelaxed,
		HeaderKeys:             []string{"From", "To", "Subject", "Date", "Message-ID"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// message builds a CRLF message with the given From line(s) and extra
// header lines.
func message(from string, extra ...string) []byte {
	var b strings.Builder
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	if from != "" {
		b.WriteString("From: " + from + "\r\n")
	}
	b.WriteString("To: agent@mx.test\r\n")
	b.WriteString("Subject: deploy the release\r\n")
	b.WriteString("Date: Sun, 22 Nov 2026 01:00:00 +0000\r\n")
	b.WriteString("Message-ID: <1@trusted.test>\r\n")
	b.WriteString("\r\n")
	b.WriteString("Please run the deploy.\r\n")
	return []byte(b.String())
}

// IPs the test world uses.
var (
	trustedIP = net.ParseIP("192.0.2.10")
	evilIP    = net.ParseIP("203.0.113.5")
)

// world is the DNS of the test domains:
//   - trusted.test: DMARC p=reject, SPF allows trustedIP, keys ed/rsa;
//     mx.trusted.test has an SPF record for HELO checks.
//   - example.com: DMARC p=none (relaxed); mail.example.com has a key.
//   - strict.test: DMARC p=quarantine adkim=s aspf=s; mail.strict.test has
//     a key and an SPF record.
//   - evil.test: an attacker's own domain with a valid key and SPF.
func world(t testing.TB) *resolver.Map {
	t.Helper()
	keys(t)
	m := &resolver.Map{}
	m.SetTXT("trusted.test", "v=spf1 ip4:192.0.2.10 -all")
	m.SetTXT("_dmarc.trusted.test", "v=DMARC1; p=reject")
	m.SetTXT("ed._domainkey.trusted.test", dkimTXT(t, edKey.Public()))
	m.SetTXT("rsa._domainkey.trusted.test", dkimTXT(t, rsaKey.Public()))
	m.SetTXT("mx.trusted.test", "v=spf1 ip4:192.0.2.10 -all")

	m.SetTXT("_dmarc.example.com", "v=DMARC1; p=none")
	m.SetTXT("ed._domainkey.mail.example.com", dkimTXT(t, edKey.Public()))

	m.SetTXT("_dmarc.strict.test", "v=DMARC1; p=quarantine; adkim=s; aspf=s")
	m.SetTXT("ed._domainkey.mail.strict.test", dkimTXT(t, edKey.Public()))
	m.SetTXT("mail.strict.test", "v=spf1 ip4:192.0.2.10 -all")

	m.SetTXT("evil.test", "v=spf1 ip4:203.0.113.5 -all")
	m.SetTXT("ed._domainkey.evil.test", dkimTXT(t, evilKey.Public()))
	return m
}

func parseIP(s string) net.IP { return net.ParseIP(s) }
