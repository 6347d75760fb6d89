package daemon

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/internal/testwait"
)

// TestDeliveryCAFileThatIsAFIFO points delivery.ca_file at a FIFO: start-up
// and reload must refuse it, not wait for a writer.
func TestDeliveryCAFileThatIsAFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "ca.pem")
	testwait.FIFO(t, fifo)
	err := testwait.Returns(t, "reading a delivery.ca_file that is a FIFO", func() error {
		_, err := loadCAFile(fifo)
		return err
	})
	if !errors.Is(err, safeio.ErrNotRegular) {
		t.Errorf("ca_file a FIFO: %v, want it refused as not a regular file", err)
	}
}
