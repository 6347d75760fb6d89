package safeio

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestMkdirAllGivesTheModeWhateverTheUmask: a daemon started from a shell
// with umask 077 made its socket's folder 0700, which no user could reach.
// Folders MkdirAll makes have the mode asked for; those that exist keep
// theirs.
func TestMkdirAllGivesTheModeWhateverTheUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	base := t.TempDir()
	if err := os.Chmod(base, 0o750); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "a", "b", "c")
	if err := MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(base, "a"), filepath.Join(base, "a", "b"), dir} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: %v, %v; want mode 755", d, fi.Mode(), err)
		}
	}
	if fi, _ := os.Stat(base); fi.Mode().Perm() != 0o750 {
		t.Errorf("a folder that existed changed its mode to %v", fi.Mode())
	}
	// Again: nothing to make, nothing changed.
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("an existing folder changed its mode to %v", fi.Mode())
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAll(filepath.Join(file, "x"), 0o755); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("a folder under a file: %v, want ENOTDIR", err)
	}
}

// TestMkdirAllChangesNoFolderSwappedIn: in a folder another user may
// write, that user can put a link to a folder of root's where MkdirAll
// just made one; a chmod of the path would then open root's folder to
// everyone. MkdirAll sets modes through descriptors of the folders it
// made, and refuses a link or another user's folder in their place.
func TestMkdirAllChangesNoFolderSwappedIn(t *testing.T) {
	base := t.TempDir()
	victim := filepath.Join(base, "victim")
	if err := os.Mkdir(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(base, "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	made := filepath.Join(shared, "run")
	swap := func(put func() error) {
		t.Helper()
		old := afterMkdir
		t.Cleanup(func() { afterMkdir = old })
		afterMkdir = func(path string) {
			if path != made {
				return
			}
			// Moved aside, as its folder's mode lets anyone.
			if err := os.Rename(path, path+".moved"); err != nil {
				t.Fatal(err)
			}
			if err := put(); err != nil {
				t.Fatal(err)
			}
		}
	}

	swap(func() error { return os.Symlink(victim, made) })
	if err := MkdirAll(filepath.Join(made, "mailctl"), 0o755); err == nil {
		t.Error("a link put where a folder was made was followed")
	}
	if fi, _ := os.Stat(victim); fi.Mode().Perm() != 0o700 {
		t.Errorf("the folder a swapped-in link names was given mode %v", fi.Mode())
	}
	if _, err := os.Stat(filepath.Join(victim, "mailctl")); err == nil {
		t.Error("a folder was made inside the one a swapped-in link names")
	}

	if os.Geteuid() != 0 {
		t.Log("another user's folder in the place of one made: needs root to make it (CI runs this as root)")
		return
	}
	if err := os.Remove(made); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(made + ".moved"); err != nil {
		t.Fatal(err)
	}
	swap(func() error {
		if err := os.Mkdir(made, 0o700); err != nil {
			return err
		}
		return os.Chown(made, 65534, 65534)
	})
	if err := MkdirAll(filepath.Join(made, "mailctl"), 0o755); !errors.Is(err, errDirSwapped) {
		t.Errorf("another user's folder put where one was made: %v, want %v", err, errDirSwapped)
	}
	if fi, _ := os.Stat(made); fi.Mode().Perm() != 0o700 {
		t.Errorf("another user's folder put in place was given mode %v", fi.Mode())
	}
}

// TestChmodDirFollowsNoLink: setup gives its folders their modes; a link
// put where one was looked at is refused, and what it names keeps its mode.
func TestChmodDirFollowsNoLink(t *testing.T) {
	base := t.TempDir()
	victim := filepath.Join(base, "victim")
	if err := os.Mkdir(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	if err := ChmodDir(link, 0o755); err == nil {
		t.Error("ChmodDir followed a link")
	}
	if fi, _ := os.Stat(victim); fi.Mode().Perm() != 0o700 {
		t.Errorf("the folder a link names was given mode %v", fi.Mode())
	}
	if err := ChmodDir(victim, 0o751); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(victim); fi.Mode().Perm() != 0o751 {
		t.Errorf("ChmodDir gave mode %v, want 751", fi.Mode())
	}
}
