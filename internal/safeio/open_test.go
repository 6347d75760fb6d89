package safeio

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/testwait"
)

// TestOpenFileRefusesWhatIsNoRegularFile opens, for each way the daemon
// opens a file it keeps, a symbolic link to a file elsewhere (which must
// stay as it was), a FIFO (which must not make the open wait for its
// other end) and a directory: each is refused naming the path.
func TestOpenFileRefusesWhatIsNoRegularFile(t *testing.T) {
	other := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(other, []byte("not the daemon's"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, flag := range []int{os.O_RDONLY, os.O_RDWR, os.O_WRONLY | os.O_APPEND, os.O_RDWR | os.O_CREATE, os.O_WRONLY | os.O_APPEND | os.O_CREATE} {
		for _, c := range []struct {
			name string
			make func(t *testing.T, path string)
			link bool
		}{
			{"a symbolic link", func(t *testing.T, p string) {
				if err := os.Symlink(other, p); err != nil {
					t.Fatal(err)
				}
			}, true},
			{"a FIFO", func(t *testing.T, p string) { testwait.FIFO(t, p) }, false},
			{"a directory", func(t *testing.T, p string) {
				if err := os.Mkdir(p, 0o700); err != nil {
					t.Fatal(err)
				}
			}, false},
		} {
			path := filepath.Join(t.TempDir(), "kept")
			c.make(t, path)
			err := testwait.Returns(t, "OpenFile of "+c.name, func() error {
				f, err := OpenFile(path, flag, 0o600)
				if err == nil {
					f.Close()
				}
				return err
			})
			if !errors.Is(err, ErrNotRegular) || errors.Is(err, ErrSymlink) != c.link || !strings.Contains(err.Error(), path) {
				t.Errorf("flag %#x, %s: %v, want it refused as no regular file, naming %s", flag, c.name, err, path)
			}
		}
	}
	if b, _ := os.ReadFile(other); string(b) != "not the daemon's" {
		t.Errorf("the file the link leads to now holds %q", b)
	}
	path := filepath.Join(t.TempDir(), "kept")
	f, err := OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatalf("a new file: %v", err)
	}
	defer f.Close()
	if _, err := f.WriteString("x"); err != nil {
		t.Errorf("writing the file opened: %v", err)
	}
}

// TestOpenDirRefusesFIFO: a FIFO where a directory is listed or synced is
// refused at once, never waited on for a writer, and a link to a file is
// no directory either.
func TestOpenDirRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	testwait.FIFO(t, fifo)
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("a file"), 0o600)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, link} {
		if err := testwait.Returns(t, "SyncDir of "+p, func() error { return SyncDir(p) }); err == nil {
			t.Errorf("SyncDir of %s: no error", p)
		}
		if err := testwait.Returns(t, "EachEntry of "+p, func() error {
			return EachEntry(p, func(fs.DirEntry) error { return nil })
		}); err == nil {
			t.Errorf("EachEntry of %s: no error", p)
		}
	}
	if err := SyncDir(dir); err != nil {
		t.Errorf("SyncDir of a directory: %v", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "a file" {
		t.Errorf("the file the link leads to now holds %q", b)
	}
}
