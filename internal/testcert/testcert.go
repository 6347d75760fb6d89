// Package testcert gives tests a throwaway self-signed certificate, made by
// the code that makes `mailctl setup --self-signed`'s (setup.SelfSigned),
// and a throwaway certificate authority that issues server certificates.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/setup"
)

// New returns a certificate for hosts (names or IP addresses) and a pool
// that trusts it.
func New(tb testing.TB, hosts ...string) (tls.Certificate, *x509.CertPool) {
	tb.Helper()
	certPEM, keyPEM := pems(tb, hosts)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return cert, pool
}

// Files writes a certificate for hosts into dir as cert.pem and key.pem and
// returns their paths.
func Files(tb testing.TB, dir string, hosts ...string) (certFile, keyFile string) {
	tb.Helper()
	certPEM, keyPEM := pems(tb, hosts)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		tb.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		tb.Fatal(err)
	}
	return certFile, keyFile
}

func pems(tb testing.TB, hosts []string) (certPEM, keyPEM []byte) {
	tb.Helper()
	certPEM, keyPEM, err := setup.SelfSigned(time.Now(), hosts...)
	if err != nil {
		tb.Fatal(err)
	}
	return certPEM, keyPEM
}

// CA is a throwaway certificate authority: a private CA such as a company
// relay's certificate chains to.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

// NewCA makes a certificate authority valid from a day ago for a year.
func NewCA(tb testing.TB) *CA {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial(tb), Subject: pkix.Name{CommonName: "mailctl test CA"},
		NotBefore: time.Now().Add(-24 * time.Hour), NotAfter: time.Now().AddDate(1, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return &CA{Cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// PEM is the CA's certificate, as a ca_file holds it.
func (ca *CA) PEM() []byte { return ca.pem }

// Pool is a pool that trusts the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// IssuePEM is Issue as files hold it: certPEM the chain (the certificate,
// then the CA's), keyPEM its PKCS#8 key, and the certificate.
func (ca *CA) IssuePEM(tb testing.TB, hosts ...string) (certPEM, keyPEM []byte, leaf *x509.Certificate) {
	tb.Helper()
	c := ca.Issue(tb, hosts...)
	c.Certificate = append(c.Certificate, ca.Cert.Raw)
	certPEM, keyPEM = PEM(tb, c)
	return certPEM, keyPEM, c.Leaf
}

// Issue makes a server certificate for hosts (names or IP addresses)
// signed by the CA, valid for 90 days as Let's Encrypt's are; the chain
// served carries the leaf only.
func (ca *CA) Issue(tb testing.TB, hosts ...string) tls.Certificate {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial(tb), Subject: pkix.Name{CommonName: hosts[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(0, 0, 90),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

func serial(tb testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// PEM encodes a certificate chain and its private key as certbot writes
// them (fullchain.pem, privkey.pem in PKCS#8).
func PEM(tb testing.TB, c tls.Certificate) (certPEM, keyPEM []byte) {
	tb.Helper()
	for _, der := range c.Certificate {
		certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	der, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		tb.Fatal(err)
	}
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})

}

// TLS is the tls.Certificate of IssuePEM's output.
func TLS(tb testing.TB, certPEM, keyPEM []byte) tls.Certificate {
	tb.Helper()
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}
