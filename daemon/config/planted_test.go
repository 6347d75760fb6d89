package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
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

// TestConfigFileThatIsAFIFO points the config path at a FIFO, then at a
// file past MaxConfigFile: Load and LoadForChecks (start-up, reload,
// doctor) refuse each naming the path, never waiting for a writer nor
// reading without end. A link to a config is followed: configuration tools
// manage the file as one.
func TestConfigFileThatIsAFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "config.toml")
	testwait.FIFO(t, fifo)
	large := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(large, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(large, MaxConfigFile+1); err != nil {
		t.Fatal(err)
	}
	managed := filepath.Join(t.TempDir(), "managed.toml")
	if err := os.WriteFile(managed, []byte(`domains = ["example.test"]`), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "config.toml")
	if err := os.Symlink(managed, link); err != nil {
		t.Fatal(err)
	}
	for _, load := range []struct {
		name string
		fn   func(string) (*Config, error)
	}{{"Load", Load}, {"LoadForChecks", LoadForChecks}} {
		for _, c := range []struct {
			path string
			want error
		}{{fifo, safeio.ErrNotRegular}, {large, safeio.ErrTooLarge}} {
			err := testwait.Returns(t, load.name+" of "+c.path, func() error { _, err := load.fn(c.path); return err })
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.path) {
				t.Errorf("%s(%s): %v, want %v naming the path", load.name, c.path, err, c.want)
			}
		}
		if c, err := load.fn(link); err != nil || len(c.Domains) != 1 || c.Domains[0] != "example.test" {
			t.Errorf("%s of a link to a config: %+v, %v", load.name, c, err)
		}
	}
}
