package store

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteNewFile writes files as a delivery does, through an unnamed
// file linked once whole and through the rename it falls back on: each
// name ends up holding its content with its mode, nothing temporary is left,
// and a name that exists (a copy written before a crash), even as a
// symlink, is replaced itself, never followed.
func TestWriteNewFile(t *testing.T) {
	for _, c := range []struct {
		name string
		proc bool
	}{{"unnamed file linked", true}, {"temporary name renamed", false}} {
		t.Run(c.name, func(t *testing.T) {
			if !c.proc {
				saved := procFDs
				procFDs = func() bool { return false }
				defer func() { procFDs = saved }()
			} else if !procFDs() {
				t.Skip("no /proc/self/fd here: the rename is all there is")
			}
			dir := t.TempDir()
			d, err := OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			outside := filepath.Join(t.TempDir(), "target")
			if err := os.WriteFile(outside, []byte("not the store's"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "old.eml"), []byte("half a copy"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(dir, "link.md")); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"new.eml", "old.eml", "link.md"} {
				if err := d.writeNewFileTo(name, rawBytes("content of "+name), 0o640, -1, -1, syncFile); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				fi, err := os.Lstat(filepath.Join(dir, name))
				if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o640 {
					t.Fatalf("%s: %v %v, want a regular file of mode 0640", name, fi, err)
				}
				if b, _ := os.ReadFile(filepath.Join(dir, name)); string(b) != "content of "+name {
					t.Errorf("%s holds %q", name, b)
				}
			}
			if b, _ := os.ReadFile(outside); string(b) != "not the store's" {
				t.Errorf("the symlink's target was written: %q", b)
			}
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), TempPrefix) {
					t.Errorf("left behind: %s", e.Name())
				}
			}
			if len(ents) != 3 {
				t.Errorf("%d entries, want 3", len(ents))
			}
			if err := d.writeNewFileTo("../escape", rawBytes("x"), 0o600, -1, -1, syncNone); err == nil {
				t.Error("wrote a name with a slash")
			}
		})
	}
}
