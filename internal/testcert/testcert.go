// Package testcert gives tests a throwaway self-signed certificate, made by
// the code that makes `mailctl setup --self-signed`'s (setup.SelfSigned).
package testcert

import (
	"crypto/tls"
	"crypto/x509"
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
