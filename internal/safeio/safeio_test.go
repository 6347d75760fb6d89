package safeio

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func TestWriteFileReplacesWithModeAndLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("new"), Options{Perm: 0o640}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	fi, _ := os.Stat(p)
	if string(b) != "new" || fi.Mode().Perm() != 0o640 {
		t.Fatalf("content %q mode %v, want new 0640", b, fi.Mode().Perm())
	}
	if got := names(t, dir); len(got) != 1 {
		t.Fatalf("directory holds %v, want only config.toml", got)
	}
	if err := WriteFile(p, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Fatalf("default mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestNoReplaceRefusesAnExistingFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "item")
	if err := WriteFile(p, []byte("first"), Options{NoReplace: true}); err != nil {
		t.Fatal(err)
	}
	err := WriteFile(p, []byte("second"), Options{NoReplace: true})
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second exclusive write: %v, want ErrExist", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "first" {
		t.Fatalf("content %q, want first", b)
	}
	if got := names(t, dir); len(got) != 1 {
		t.Fatalf("directory holds %v, want only item", got)
	}
}

// A write that fails part-way leaves the old file as it was and no temporary
// file behind.
func TestFailedWriteKeepsTheOldFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	if err := WriteFile(p, []byte("old")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := WriteFile(p, []byte("new"), Options{Prepare: func(*os.File) error { return boom }})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Fatalf("content %q, want old", b)
	}
	if got := names(t, dir); len(got) != 1 {
		t.Fatalf("directory holds %v, want only state.json", got)
	}
}

// A symlink planted at the destination is replaced, never written through.
func TestWriteFileDoesNotFollowASymlink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "out")
	if err := os.Symlink(victim, p); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("mine")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Fatalf("the symlink's target was written: %q", b)
	}
	if fi, _ := os.Lstat(p); fi.Mode()&fs.ModeSymlink != 0 {
		t.Fatal("destination is still a symlink")
	}
}

func TestCleanTempsRemovesOnlyOldTemps(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-time.Hour)
	for _, n := range []string{TempPrefix + "a-1", TempPrefix + "b-2", TempPrefix + "c-3", "keep.json"} {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if n != TempPrefix+"b-2" {
			os.Chtimes(p, old, old)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, TempPrefix+"dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	if n, err := CleanTemps(dir, "a", time.Now().Add(-time.Minute)); err != nil || n != 1 {
		t.Fatalf("removed %d (%v) of a's temps, want 1", n, err)
	}
	if n, err := CleanTemps(dir, "", time.Now().Add(-time.Minute)); err != nil || n != 1 {
		t.Fatalf("removed %d (%v) old temps, want 1 (c's)", n, err)
	}
	got := names(t, dir)
	want := []string{TempPrefix + "b-2", TempPrefix + "dir", "keep.json"}
	if len(got) != len(want) {
		t.Fatalf("left %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("left %v, want %v", got, want)
		}
	}
}

func TestRemoveIsQuietAboutMissingFiles(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x")
	if err := WriteFile(p, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := Remove(p); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("file still there: %v", err)
	}
}
