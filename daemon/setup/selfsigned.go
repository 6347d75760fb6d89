package setup

import (
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/mailctl/mailctl/internal/safeio"
)

// EnsureSelfSigned writes a self-signed certificate and key for hosts into
// dir (cert.pem, key.pem) unless both exist, and returns their paths. It is
// for `mailctl dev`: the certificate is the one `mailctl setup --self-signed`
// makes (SelfSigned), which peers that verify certificates will not
// trust, and delivery to us falls back accordingly.
func EnsureSelfSigned(dir string, hosts ...string) (certPath, keyPath string, err error) {
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_, errC := os.Stat(certPath)
	_, errK := os.Stat(keyPath)
	if errC == nil && errK == nil {
		return certPath, keyPath, nil
	}
	if !errors.Is(errC, os.ErrNotExist) && errC != nil {
		return "", "", errC
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	certPEM, keyPEM, err := SelfSigned(time.Now(), hosts...)
	if err != nil {
		return "", "", err
	}
	if err := safeio.WriteFile(keyPath, keyPEM, safeio.Options{Perm: 0o600}); err != nil {
		return "", "", err
	}
	if err := safeio.WriteFile(certPath, certPEM, safeio.Options{Perm: 0o644}); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}
