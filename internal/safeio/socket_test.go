package safeio

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestListenSocketHasItsModeFromTheStart: the socket's file has the mode
// asked for however the process's umask would have it, with no chmod after
// the bind (which another user could aim elsewhere with a link); the
// process's umask is left as it was.
func TestListenSocketHasItsModeFromTheStart(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	for _, mode := range []os.FileMode{0o666, 0o600} {
		path := filepath.Join(t.TempDir(), "s.sock")
		ln, err := ListenSocket(path, mode)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(path)
		if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != mode {
			t.Errorf("the socket is %v (%v), want a socket of mode %v", fi.Mode(), err, mode)
		}
		ln.Close()
	}
	if now := syscall.Umask(0o077); now != 0o077 {
		t.Errorf("the process's umask is %04o after ListenSocket, was 0077", now)
	}
}
