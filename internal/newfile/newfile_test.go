package newfile

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/safeio"
)

// names lists dir's entries.
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

func TestNewFileNamedOnlyWhenPublished(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "archive.tar")
	f, err := Create(path, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("whole")); err != nil {
		t.Fatal(err)
	}
	if f.tmp == "" {
		// Unnamed: nothing in the directory while it is written.
		if got := names(t, dir); len(got) != 0 {
			t.Fatalf("an unpublished unnamed file shows as %q", got)
		}
	}
	if err := f.Publish(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil || string(data) != "whole" {
		t.Fatalf("published file: %q, %v", data, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm()&^0o640 != 0 {
		t.Fatalf("mode %v, want at most 0640", st.Mode().Perm())
	}
	if got := names(t, dir); len(got) != 1 || got[0] != "archive.tar" {
		t.Fatalf("directory holds %q, want the archive only", got)
	}
}

// An existing file is never replaced, whether it was there at the start or
// appeared while the new one was written; the new one leaves nothing.
func TestNewFileNeverReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out")
	if err := os.WriteFile(path, []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(path, 0o600); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("creating over an existing file: %v, want ErrExist", err)
	}
	os.Remove(path)
	f, err := Create(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("second"))
	if err := os.Symlink("/etc/passwd", path); err != nil { // appears meanwhile
		t.Fatal(err)
	}
	if err := f.Publish(); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("publishing over a name made meanwhile: %v, want ErrExist", err)
	}
	f.Close()
	if target, err := os.Readlink(path); err != nil || target != "/etc/passwd" {
		t.Fatalf("the name made meanwhile was changed: %q, %v", target, err)
	}
	if got := names(t, dir); len(got) != 1 {
		t.Fatalf("directory holds %q, want the symlink only", got)
	}
}

// A process killed while it writes leaves nothing in the directory.
func TestKilledWriterLeavesNothing(t *testing.T) {
	if dir := os.Getenv("NEWFILE_KILLED_CHILD"); dir != "" {
		f, err := Create(filepath.Join(dir, "archive"), 0o600)
		if err != nil {
			os.Exit(2)
		}
		f.Write(make([]byte, 1<<20))
		os.Stdout.WriteString("written\n")
		select {} // killed here
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledWriterLeavesNothing$")
	cmd.Env = append(os.Environ(), "NEWFILE_KILLED_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	cmd.Process.Kill()
	cmd.Wait()
	if strings.TrimSpace(line) != "written" {
		t.Fatalf("the child did not write: %q", line)
	}
	// Where the file system has no unnamed files, the temporary name is
	// what a kill leaves (and the loaders' CleanTemps removes).
	for _, n := range names(t, dir) {
		if !safeio.IsTemp(n) {
			t.Fatalf("a killed writer left %q", n)
		}
		t.Skipf("no unnamed files on this file system: the kill left the temporary %q", n)
	}
}
