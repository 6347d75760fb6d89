package daemon

import (
	"errors"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/internal/testwait"
)

// TestDeliveryCAFileThatIsAFIFO points delivery.ca_file at a FIFO: start-up
// and reload must refuse it, not wait for a writer.
func TestDeliveryCAFileThatIsAFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "ca.pem")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			unix.Close(fd)
		}
	})
	done := make(chan error, 1)
	go func() {
		_, err := loadCAFile(fifo)
		done <- err
	}()
	var err error
	testwait.For(t, "reading a delivery.ca_file that is a FIFO to return", func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	if !errors.Is(err, safeio.ErrNotRegular) {
		t.Errorf("ca_file a FIFO: %v, want it refused as not a regular file", err)
	}
}
