package outbound

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mailctl/mailctl/store"
)

// tempPrefix marks files being written (the store's convention); loaders
// skip them and OpenQueue removes leftovers of a crash.
const tempPrefix = store.TempPrefix

// writeFileAtomic is the project's one durable-write helper (temp, fsync,
// rename, fsync the directory); the queue and the send records use it.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	if err := store.WriteFileAtomic(path, data, perm); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// createFileExclusive writes data to path durably and fails if path exists:
// the temp file is hard-linked into place, which never replaces.
func createFileExclusive(path string, data []byte, perm os.FileMode) error {
	dir, name := filepath.Split(path)
	f, err := os.CreateTemp(dir, tempPrefix+name+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Link(tmp, path); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	if dir == "" {
		dir = "."
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}

// cleanTemps removes temp files left in dir by a crash.
func cleanTemps(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tempPrefix) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
