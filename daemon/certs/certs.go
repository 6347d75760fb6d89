// Package certs reads the daemon's TLS certificate and key: the key as a
// secret (safeio.ReadSecret), the certificate chain bounded.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"os"

	"github.com/mailctl/mailctl/internal/safeio"
)

// maxChain bounds the certificate file: a leaf and its intermediates in PEM
// are a few KiB.
const maxChain = 1 << 20

// LoadPair reads a PEM certificate chain and its private key and checks
// that they belong together.
func LoadPair(certFile, keyFile string) (tls.Certificate, error) {
	keyPEM, err := safeio.ReadSecret(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("smtp.tls_key: %w", err)
	}
	certPEM, err := readChain(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("smtp.tls_cert: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("smtp.tls_cert %s and smtp.tls_key %s: %w", certFile, keyFile, err)
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return tls.Certificate{}, fmt.Errorf("smtp.tls_cert %s: %w", certFile, err)
		}
	}
	return pair, nil
}

func readChain(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxChain+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxChain {
		return nil, fmt.Errorf("%s is larger than %d KiB: point smtp.tls_cert at the PEM certificate chain", path, maxChain>>10)
	}
	return b, nil
}
