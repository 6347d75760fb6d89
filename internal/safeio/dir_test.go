package safeio

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mailctl/mailctl/internal/testwait"
)

// TestEachEntryReadsInBatches: a listing that held every name at once
// would go on to give the names removed after its first one. EachEntry has
// read a batch when it gives the first, and the runtime's 8 KiB buffer of
// the kernel's entries beyond it (256 of these names), so it gives at most
// those after the rest are gone.
func TestEachEntryReadsInBatches(t *testing.T) {
	dir := t.TempDir()
	const n = 8 * DirBatch
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	given := 0
	err := EachEntry(dir, func(e fs.DirEntry) error {
		if given++; given == 1 {
			for i := range n {
				if name := fmt.Sprintf("f%05d", i); name != e.Name() {
					os.Remove(filepath.Join(dir, name))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if given > 2*DirBatch {
		t.Errorf("%d of %d entries given after all but the first were removed, want at most %d", given, n, 2*DirBatch)
	}
}

// TestEachEntryStops: ErrStop ends the listing without an error, another
// error ends it with that error.
func TestEachEntryStops(t *testing.T) {
	dir := t.TempDir()
	for i := range 3 {
		os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), nil, 0o600)
	}
	given := 0
	if err := EachEntry(dir, func(fs.DirEntry) error { given++; return ErrStop }); err != nil || given != 1 {
		t.Errorf("ErrStop: %d given, %v", given, err)
	}
	boom := errors.New("boom")
	if err := EachEntry(dir, func(fs.DirEntry) error { return boom }); err != boom {
		t.Errorf("fn's error: %v", err)
	}
}

// TestEachEntryRefusesAFIFO: a FIFO where a directory goes is refused,
// not opened to wait for a writer.
func TestEachEntryRefusesAFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	testwait.FIFO(t, fifo)
	err := testwait.Returns(t, "EachEntry of a FIFO", func() error {
		return EachEntry(fifo, func(fs.DirEntry) error { return nil })
	})
	if !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("EachEntry of a FIFO: %v, want ENOTDIR", err)
	}
}

// TestOpenRegularRefusesOddFiles: as ReadInput, and a symbolic link is
// refused rather than followed, as ErrSymlink too; a file over the limit
// is refused on its fstat, before anything is read, and one whose fstat
// says less (a /proc file says 0) when its read passes the limit.
func TestOpenRegularRefusesOddFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	testwait.FIFO(t, fifo)
	at := filepath.Join(dir, "at")
	past := filepath.Join(dir, "past")
	os.WriteFile(at, []byte(strings.Repeat("x", 100)), 0o600)
	os.WriteFile(past, []byte(strings.Repeat("x", 101)), 0o600)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(at, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path      string
		want, not error
	}{
		{fifo, ErrNotRegular, ErrSymlink},
		{dir, ErrNotRegular, ErrSymlink},
		{link, ErrSymlink, ErrTooLarge},
		{link, ErrNotRegular, ErrTooLarge},
		{past, ErrTooLarge, ErrNotRegular},
		{"/proc/self/status", ErrTooLarge, ErrNotRegular},
	} {
		err := testwait.Returns(t, "ReadRegular of "+filepath.Base(c.path), func() error {
			_, err := ReadRegular(c.path, 100)
			return err
		})
		if !errors.Is(err, c.want) || errors.Is(err, c.not) || !strings.Contains(err.Error(), c.path) {
			t.Errorf("%s: %v, want %v (not %v) naming the file", c.path, err, c.want, c.not)
		}
	}
	if _, _, err := OpenRegular(past, 100); !errors.Is(err, ErrTooLarge) {
		t.Errorf("OpenRegular of a file one byte over the limit: %v, want ErrTooLarge before it is read", err)
	}
	if b, err := ReadRegular(at, 100); err != nil || len(b) != 100 {
		t.Errorf("a file of exactly the limit: %d bytes, %v", len(b), err)
	}
}
