package config

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/internal/testwait"
)

// TestRelayCAFileThatIsAFIFO points relay.ca_file at a FIFO: start-up,
// reload and doctor must refuse it, not wait for a writer.
func TestRelayCAFileThatIsAFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "ca.pem")
	testwait.FIFO(t, fifo)
	err := testwait.Returns(t, "reading a relay.ca_file that is a FIFO", func() error {
		_, err := Relay{CAFile: fifo}.CertPool()
		return err
	})
	if !errors.Is(err, safeio.ErrNotRegular) {
		t.Errorf("ca_file a FIFO: %v, want it refused as not a regular file", err)
	}
}
