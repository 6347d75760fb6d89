package dane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// issue makes a certificate for names, signed by parent (self-signed when
// nil), valid from notBefore for a day.
func issue(t testing.TB, cn string, names []string, isCA bool, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, notBefore time.Time) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn}, DNSNames: names,
		NotBefore: notBefore, NotAfter: notBefore.Add(24 * time.Hour), BasicConstraintsValid: true, IsCA: isCA,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

// recordFor is the TLSA record of c with the given parameters.
func recordFor(c *x509.Certificate, usage, selector, mtype uint8) Record {
	sel := c.Raw
	if selector == SelectorSPKI {
		sel = c.RawSubjectPublicKeyInfo
	}
	data := sel
	switch mtype {
	case MatchSHA256:
		h := sha256.Sum256(sel)
		data = h[:]
	case MatchSHA512:
		h := sha512.Sum512(sel)
		data = h[:]
	}
	return Record{Usage: usage, Selector: selector, MatchingType: mtype, Data: append([]byte(nil), data...)}
}

// TestVerify attacks the matcher: the right key passes in every selector
// and matching type; another key, a record for the CA used as DANE-EE, a
// DANE-TA record whose CA did not sign the leaf or whose chain names
// another host, and PKIX usages do not.
func TestVerify(t *testing.T) {
	now := time.Now()
	ca, caKey := issue(t, "Test CA", nil, true, nil, nil, now.Add(-time.Hour))
	leaf, _ := issue(t, "mx.example.test", []string{"mx.example.test"}, false, ca, caKey, now.Add(-time.Hour))
	other, otherKey := issue(t, "Other CA", nil, true, nil, nil, now.Add(-time.Hour))
	stranger, _ := issue(t, "mx.example.test", []string{"mx.example.test"}, false, other, otherKey, now.Add(-time.Hour))
	expired, _ := issue(t, "old", []string{"elsewhere.test"}, false, nil, nil, now.Add(-48*time.Hour))
	names := []string{"mx.example.test"}
	chain := []*x509.Certificate{leaf, ca}

	ok := []struct {
		name  string
		chain []*x509.Certificate
		rec   Record
	}{
		{"DANE-EE 3 1 1", chain, recordFor(leaf, 3, 1, 1)},
		{"DANE-EE 3 0 1", chain, recordFor(leaf, 3, 0, 1)},
		{"DANE-EE 3 1 2", chain, recordFor(leaf, 3, 1, 2)},
		{"DANE-EE 3 1 0", chain, recordFor(leaf, 3, 1, 0)},
		{"DANE-EE ignores name and expiry", []*x509.Certificate{expired}, recordFor(expired, 3, 1, 1)},
		{"DANE-TA 2 1 1", chain, recordFor(ca, 2, 1, 1)},
		{"DANE-TA 2 0 1", chain, recordFor(ca, 2, 0, 1)},
	}
	for _, tc := range ok {
		if err := Verify(tc.chain, []Record{tc.rec}, names, now); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	bad := []struct {
		name  string
		chain []*x509.Certificate
		recs  []Record
	}{
		{"another key (3 1 1)", []*x509.Certificate{stranger, other}, []Record{recordFor(leaf, 3, 1, 1)}},
		{"the CA's key as DANE-EE", chain, []Record{recordFor(ca, 3, 1, 1)}},
		{"DANE-TA of a CA that did not sign the leaf", []*x509.Certificate{stranger, other, ca}, []Record{recordFor(ca, 2, 1, 1)}},
		{"DANE-TA for another name", chain, []Record{recordFor(ca, 2, 1, 1)}},
		{"DANE-TA CA not in the chain", []*x509.Certificate{leaf}, []Record{recordFor(ca, 2, 1, 1)}},
		{"PKIX-EE is not for SMTP", chain, []Record{recordFor(leaf, 1, 1, 1)}},
		{"PKIX-TA is not for SMTP", chain, []Record{recordFor(ca, 0, 1, 1)}},
		{"truncated digest", chain, []Record{{3, 1, 1, recordFor(leaf, 3, 1, 1).Data[:16]}}},
		{"unknown matching type", chain, []Record{{3, 1, 9, recordFor(leaf, 3, 1, 1).Data}}},
		{"no certificate", nil, []Record{recordFor(leaf, 3, 1, 1)}},
	}
	for _, tc := range bad {
		n := names
		if tc.name == "DANE-TA for another name" {
			n = []string{"mx.other.test"}
		}
		if err := Verify(tc.chain, tc.recs, n, now); err == nil {
			t.Errorf("%s: verified", tc.name)
		}
	}
	// A wrong record next to a right one: any usable match is enough.
	if err := Verify(chain, []Record{recordFor(stranger, 3, 1, 1), recordFor(leaf, 3, 1, 1)}, names, now); err != nil {
		t.Errorf("one matching record among two: %v", err)
	}
	if err := Verify(chain, []Record{recordFor(stranger, 3, 1, 1)}, names, now); !errors.Is(err, ErrNoMatch) {
		t.Errorf("mismatch error %v, want ErrNoMatch", err)
	}
}

// TestParseTLSA: the AD bit decides Secure; NXDOMAIN is a secure "none"
// when authenticated; SERVFAIL is a failed lookup, not an absence.
func TestParseTLSA(t *testing.T) {
	name := "_25._tcp.mx.example.test"
	reply := func(rcode int, ad bool, rrs ...dns.RR) *dns.Msg {
		q := new(dns.Msg)
		q.SetQuestion(dns.Fqdn(name), dns.TypeTLSA)
		m := new(dns.Msg)
		m.SetReply(q)
		m.Rcode, m.AuthenticatedData, m.Answer = rcode, ad, rrs
		return m
	}
	tlsa := &dns.TLSA{Hdr: dns.RR_Header{Name: dns.Fqdn(name), Rrtype: dns.TypeTLSA, Class: dns.ClassINET, Ttl: 60},
		Usage: 3, Selector: 1, MatchingType: 1, Certificate: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
	l, err := ParseTLSA(name, reply(dns.RcodeSuccess, true, tlsa))
	if err != nil || !l.Secure || len(l.Records) != 1 || !l.Records[0].Usable() || l.Records[0].String() != "3 1 1 "+tlsa.Certificate {
		t.Errorf("secure answer: %+v %v", l, err)
	}
	if l, err := ParseTLSA(name, reply(dns.RcodeSuccess, false, tlsa)); err != nil || l.Secure {
		t.Errorf("answer without AD: %+v %v", l, err)
	}
	if l, err := ParseTLSA(name, reply(dns.RcodeNameError, true)); err != nil || !l.Secure || len(l.Records) != 0 {
		t.Errorf("authenticated NXDOMAIN: %+v %v", l, err)
	}
	if _, err := ParseTLSA(name, reply(dns.RcodeServerFailure, false)); !errors.Is(err, ErrLookup) {
		t.Errorf("SERVFAIL: %v, want ErrLookup", err)
	}
	other := *tlsa
	other.Hdr.Name = "_25._tcp.elsewhere.test."
	if l, _ := ParseTLSA(name, reply(dns.RcodeSuccess, true, &other)); len(l.Records) != 0 {
		t.Errorf("a record for another name was taken: %+v", l)
	}
}
