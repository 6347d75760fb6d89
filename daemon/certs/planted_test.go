package certs

import (
	"errors"
	"os"
	"testing"

	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/internal/testcert"
	"github.com/mailctl/mailctl/internal/testwait"
)

// TestCertificateFileThatIsAFIFO loads a pair whose certificate file is a
// FIFO: start-up and reload must refuse it, not wait for a writer.
func TestCertificateFileThatIsAFIFO(t *testing.T) {
	ca := testcert.NewCA(t)
	_, key := pemOf(t, ca.Issue(t, "mx.example.test"))
	f := newFiles(t)
	f.put(t, nil, key)
	testwait.FIFO(t, f.cert)
	err := testwait.Returns(t, "loading a certificate that is a FIFO", func() error {
		_, err := LoadPair(f.cert, f.key)
		return err
	})
	if !errors.Is(err, safeio.ErrNotRegular) {
		t.Errorf("certificate a FIFO: %v, want it refused as not a regular file", err)
	}
	os.Remove(f.cert)
}
