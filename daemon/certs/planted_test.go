package certs

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"

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
	if err := unix.Mkfifo(f.cert, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if fd, err := unix.Open(f.cert, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			unix.Close(fd)
		}
	})
	done := make(chan error, 1)
	go func() {
		_, err := LoadPair(f.cert, f.key)
		done <- err
	}()
	var err error
	testwait.For(t, "loading a certificate that is a FIFO to return", func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	if !errors.Is(err, safeio.ErrNotRegular) {
		t.Errorf("certificate a FIFO: %v, want it refused as not a regular file", err)
	}
	os.Remove(f.cert)
}
