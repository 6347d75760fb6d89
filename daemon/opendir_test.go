package daemon

import (
	"path/filepath"
	"testing"

	"github.com/mailctl/mailctl/internal/testwait"
)

// TestHoldsFilesRefusesFIFO: at start the daemon lists the registry and
// the mailbox tree by name to learn whether they hold anything; a FIFO in
// their place holds nothing and is not waited on.
func TestHoldsFilesRefusesFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "registry")
	testwait.FIFO(t, fifo)
	for _, records := range []bool{false, true} {
		if testwait.Returns(t, "holdsFiles of a FIFO", func() bool { return holdsFiles(fifo, records) }) {
			t.Errorf("records %v: a FIFO holds files", records)
		}
	}
}
