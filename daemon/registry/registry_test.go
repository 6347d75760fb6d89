package registry

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/internal/testwait"
)

// A registry file is listed as a regular file and read by name after: a
// link to a file elsewhere (left as it was) or a FIFO put in its place
// meanwhile is refused, naming the path, never followed nor waited on; so
// is a file past MaxEntry.
func TestReadEntryRefusesWhatIsNoRegularFile(t *testing.T) {
	other := filepath.Join(t.TempDir(), "precious.json")
	const held = `{"name":"x","owner_uid":0}`
	if err := os.WriteFile(other, []byte(held), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		make func(t *testing.T, path string)
		want error
	}{
		{"a symbolic link", func(t *testing.T, p string) {
			if err := os.Symlink(other, p); err != nil {
				t.Fatal(err)
			}
		}, safeio.ErrSymlink},
		{"a FIFO", func(t *testing.T, p string) { testwait.FIFO(t, p) }, safeio.ErrNotRegular},
		{"a file past MaxEntry", func(t *testing.T, p string) {
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, MaxEntry+1); err != nil {
				t.Fatal(err)
			}
		}, safeio.ErrTooLarge},
	} {
		path := filepath.Join(t.TempDir(), "x.json")
		c.make(t, path)
		err := testwait.Returns(t, "reading "+c.name, func() error { _, err := readEntry(path); return err })
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want %v naming %s", c.name, err, c.want, path)
		}
	}
	if b, _ := os.ReadFile(other); string(b) != held {
		t.Errorf("the file the link leads to now holds %q", b)
	}
	path := filepath.Join(t.TempDir(), "x.json")
	if err := os.WriteFile(path, []byte(held), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := readEntry(path); err != nil || string(b) != held {
		t.Fatalf("a regular file: %q, %v", b, err)
	}
}
