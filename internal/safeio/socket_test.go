package safeio

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestListenSocketRefusesADirectoryOthersMayChange: a socket is bound and
// given its mode in a directory only its owner writes, or a sticky one;
// one others may write without the sticky bit is refused before anything
// is bound there.
func TestListenSocketRefusesADirectoryOthersMayChange(t *testing.T) {
	base := t.TempDir()
	for _, c := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o700, true}, {0o755, true}, {0o777 | os.ModeSticky, true}, {0o777, false}, {0o770, false}} {
		dir := filepath.Join(base, c.mode.String())
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, c.mode); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "s.sock")
		ln, err := ListenSocket(path, 0o666)
		if !c.ok {
			if err == nil {
				ln.Close()
				t.Errorf("a socket was bound in a directory of mode %v", c.mode)
			} else if !strings.Contains(err.Error(), dir) {
				t.Errorf("the refusal does not name the directory: %v", err)
			}
			if _, err := os.Lstat(path); !os.IsNotExist(err) {
				t.Errorf("something was made at %s in a refused directory (%v)", path, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("directory of mode %v: %v", c.mode, err)
			continue
		}
		fi, err := os.Lstat(path)
		if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o666 {
			t.Errorf("directory of mode %v: the socket is %v (%v), want a socket of mode 0666", c.mode, fi.Mode(), err)
		}
		ln.Close()
	}
	if os.Geteuid() == 0 {
		dir := filepath.Join(base, "others")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if ln, err := ListenSocket(filepath.Join(dir, "s.sock"), 0o666); err == nil {
			ln.Close()
			t.Error("a socket was bound in a directory another user owns")
		}
	}
}
