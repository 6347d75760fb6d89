package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWalkStopsWhenTheOwnerMovesADirectory moves, in the middle of a walk,
// the directory the walk is under to a place outside the walked tree. The
// walk climbs back up through "..", which now leads outside: it must stop
// there with ErrMovedDuringWalk and report nothing of what is outside.
func TestWalkStopsWhenTheOwnerMovesADirectory(t *testing.T) {
	base := t.TempDir()
	tree := filepath.Join(base, "tree")
	outside := filepath.Join(base, "outside")
	for _, p := range []string{filepath.Join(tree, "a", "b", "c"), outside} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// Entries of tree/a after "b" in the order the walk reads them would
	// be looked up in the wrong place once "b" has moved.
	for _, p := range []string{filepath.Join(tree, "a", "b", "c", "file"), filepath.Join(outside, "secret"), filepath.Join(tree, "a", "z")} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d, err := OpenDir(tree)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	moved := false
	var seen []string
	err = d.Walk(func(depth int, name string, st *unix.Stat_t) {
		seen = append(seen, name)
		if name == "c" && !moved {
			moved = true
			if err := os.Rename(filepath.Join(tree, "a", "b"), filepath.Join(outside, "b")); err != nil {
				t.Fatal(err)
			}
		}
	})
	if !moved {
		t.Fatalf("the walk never reached c: saw %q", seen)
	}
	if !errors.Is(err, ErrMovedDuringWalk) {
		t.Errorf("walk: %v, want ErrMovedDuringWalk (saw %q)", err, seen)
	}
	for _, n := range seen {
		if n == "secret" || n == "outside" {
			t.Errorf("the walk reported %q, outside the tree it walks (saw %q)", n, seen)
		}
	}
}

// TestWalkSkipsWhatIsNotADirectory plants a FIFO, a symlink to a directory
// outside and a symlink to a FIFO: each is reported once, none is opened.
func TestWalkSkipsWhatIsNotADirectory(t *testing.T) {
	base := t.TempDir()
	tree := filepath.Join(base, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "f"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "secret"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(tree, "f", "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(base, filepath.Join(tree, "f", "up")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("fifo", filepath.Join(tree, "f", "tofifo")); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(tree)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	got := map[string]int{}
	if err := d.Walk(func(depth int, name string, st *unix.Stat_t) { got[name]++ }); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"f": 1, "fifo": 1, "up": 1, "tofifo": 1}
	if len(got) != len(want) {
		t.Errorf("walk saw %v, want %v", got, want)
	}
	for n, c := range want {
		if got[n] != c {
			t.Errorf("walk saw %s %d times, want %d (all: %v)", n, got[n], c, got)
		}
	}
}
