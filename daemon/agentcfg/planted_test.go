package agentcfg

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/internal/testwait"
)

// TestPlantedConfigsNeverHang puts, where each harness keeps its config,
// what a prompt-injected agent could leave there: a FIFO, or a link to an
// endless device. `agents list`, `setup` and `remove` must each answer,
// refusing the file, rather than wait for a writer or read forever.
func TestPlantedConfigsNeverHang(t *testing.T) {
	for _, plant := range []string{"fifo", "/dev/zero"} {
		home := t.TempDir()
		for _, h := range Harnesses {
			p := h.Path(home)
			os.MkdirAll(filepath.Dir(p), 0o700)
			if plant == "fifo" {
				testwait.FIFO(t, p)
			} else if err := os.Symlink(plant, p); err != nil {
				t.Fatal(err)
			}
		}
		errs := testwait.Returns(t, "list, setup and remove with a "+plant+" as every harness config", func() []error {
			var errs []error
			List(home)
			for _, h := range Harnesses {
				_, _, err := Setup(home, h, srv)
				errs = append(errs, err)
				_, _, err = Remove(home, h)
				errs = append(errs, err)
			}
			return errs
		})
		for _, err := range errs {
			if !errors.Is(err, safeio.ErrNotRegular) {
				t.Errorf("%s planted: %v, want it refused as not a regular file", plant, err)
			}
		}
	}
}
