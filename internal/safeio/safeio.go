// Package safeio writes files so that a crash leaves either the old content
// or the new, never a part: the data goes to a temporary file in the same
// directory, is synced, renamed (or linked, for a file that must not exist
// yet) into place, and the directory is synced so the new name is durable.
//
// Every writer in mailctl uses it, so there is one temp-name convention:
// TempPrefix followed by the final name. Loaders skip such names and
// CleanTemps removes the leftovers of a crash. The store's fd-relative,
// no-follow writer shares the same prefix.
//
// It also reads the files that hold secrets (ReadSecret), with the one rule
// every secret the daemon reads is held to.
package safeio

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// TempPrefix starts the names of files being written.
const TempPrefix = ".tmp-"

// Options tune a write. The zero value replaces the file with mode 0600.
type Options struct {
	Perm os.FileMode // of the new file; 0 means 0600
	// NoReplace fails with an error satisfying errors.Is(err, fs.ErrExist)
	// when the file exists, instead of replacing it. The temporary file is
	// hard-linked into place, which never replaces.
	NoReplace bool
	// Prepare, when set, runs on the synced temporary file before it takes
	// the final name (to set its owner, for instance).
	Prepare func(*os.File) error
}

// WriteFile writes data to path durably with mode 0600 or, with opts, as they
// say.
func WriteFile(path string, data []byte, opts ...Options) error {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Perm == 0 {
		o.Perm = 0o600
	}
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, TempPrefix+name+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // gone already after a rename; the link's spare name otherwise
	if err := fill(f, data, o); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if o.NoReplace {
		err = os.Link(tmp, path)
	} else {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return err
	}
	return SyncDir(dir)
}

func fill(f *os.File, data []byte, o Options) error {
	if err := f.Chmod(o.Perm); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if o.Prepare != nil {
		return o.Prepare(f)
	}
	return nil
}

// SyncDir makes the names in dir durable: a created, renamed or removed entry
// survives a crash once this returns nil.
func SyncDir(dir string) error {
	d, err := OpenDir(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}

// Remove removes path and syncs its directory. A file that is already gone
// is not an error.
func Remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	dir := filepath.Dir(path)
	return SyncDir(dir)
}

// IsTemp reports whether name is a file being written.
func IsTemp(name string) bool { return strings.HasPrefix(name, TempPrefix) }

// CleanTemps removes the temporary files in dir last changed before cutoff
// (the zero time removes none; time.Now() all) and returns how many it
// removed. With a name, only the temporary files of that final name go, so a
// writer of one file cannot remove another writer's file in progress.
// Directories stay.
func CleanTemps(dir, name string, cutoff time.Time) (int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	var first error
	for _, e := range ents {
		if !IsTemp(e.Name()) || e.IsDir() || (name != "" && !strings.HasPrefix(e.Name(), TempPrefix+name+"-")) {
			continue
		}
		fi, err := e.Info()
		if err != nil || !fi.ModTime().Before(cutoff) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			if first == nil {
				first = err
			}
			continue
		}
		n++
	}
	return n, first
}
