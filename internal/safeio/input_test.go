package safeio

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/testwait"
)

// TestReadInputRefusesOddFiles points ReadInput at what a hostile writer
// can put under a name: a FIFO (the read must not wait for a writer), a
// directory, a link to an endless device, and files at and past the limit.
func TestReadInputRefusesOddFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	testwait.FIFO(t, fifo)
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	at := filepath.Join(dir, "at")
	past := filepath.Join(dir, "past")
	os.WriteFile(at, []byte(strings.Repeat("x", 100)), 0o600)
	os.WriteFile(past, []byte(strings.Repeat("x", 101)), 0o600)
	for _, c := range []struct {
		path string
		want error
	}{{fifo, ErrNotRegular}, {dir, ErrNotRegular}, {zero, ErrNotRegular}, {past, ErrTooLarge}} {
		err := testwait.Returns(t, "ReadInput of "+filepath.Base(c.path), func() error {
			_, err := ReadInput(c.path, 100)
			return err
		})
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.path) {
			t.Errorf("%s: %v, want %v naming the file", c.path, err, c.want)
		}
	}
	if b, err := ReadInput(at, 100); err != nil || len(b) != 100 {
		t.Errorf("a file of exactly the limit: %d bytes, %v", len(b), err)
	}
}
