package safeio

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mailctl/mailctl/internal/testwait"
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

// TestListenSocketLeavesOtherGoroutinesUmask: files other goroutines create
// while sockets are bound again and again get the process's umask, never
// the one a bind's thread had; a relative path is bound in the process's
// working directory; a path taken, a missing directory and a path too long
// for a socket address are errors that leave nothing behind.
func TestListenSocketLeavesOtherGoroutinesUmask(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := t.TempDir()
	stop := make(chan struct{})
	created := make(chan error, 4)
	for w := range 4 {
		go func() {
			var err error
			for i := 0; err == nil; i++ {
				select {
				case <-stop:
					created <- nil
					return
				default:
				}
				path := filepath.Join(dir, fmt.Sprintf("f%d-%d", w, i))
				var f *os.File
				if f, err = os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666); err != nil {
					break
				}
				f.Close()
				var fi os.FileInfo
				if fi, err = os.Stat(path); err == nil && fi.Mode().Perm() != 0o644 {
					err = fmt.Errorf("%s made with mode %v while sockets were bound, want -rw-r--r--", path, fi.Mode())
				}
				os.Remove(path)
			}
			created <- err
		}()
	}
	for i := range 200 {
		path := filepath.Join(dir, fmt.Sprintf("s%d.sock", i))
		ln, err := ListenSocket(path, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
	}
	close(stop)
	for range 4 {
		if err := testwait.Recv(t, "a goroutine making files", created); err != nil {
			t.Error(err)
		}
	}

	t.Chdir(dir)
	ln, err := ListenSocket("rel.sock", 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if fi, err := os.Lstat(filepath.Join(dir, "rel.sock")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("a relative path: %v, %v; want a socket of mode 0600 in the working directory", fi, err)
	}
	if ln, err := ListenSocket(filepath.Join(dir, "rel.sock"), 0o600); err == nil {
		ln.Close()
		t.Error("a path taken was bound again")
	}
	for _, path := range []string{
		filepath.Join(dir, "missing", "s.sock"),
		filepath.Join(dir, strings.Repeat("x", 120)+".sock"),
	} {
		if ln, err := ListenSocket(path, 0o600); err == nil {
			ln.Close()
			t.Errorf("%s was bound", path)
		}
		if _, err := os.Lstat(path); !os.IsNotExist(err) {
			t.Errorf("%s is left behind: %v", path, err)
		}
	}
	if now := syscall.Umask(0o022); now != 0o022 {
		t.Errorf("the process's umask is %04o after ListenSocket, was 0022", now)
	}
}

// TestListenSocketWithoutUnshareChangesNoLinkedFile: where a system call
// filter refuses unshare, the mode is set after the bind. Another user who
// may write the directory swaps the socket for a symbolic link to a file
// of root's in between: that file's mode is left as it was, and the bind
// is refused. Without a swap the socket has its mode.
func TestListenSocketWithoutUnshareChangesNoLinkedFile(t *testing.T) {
	keepUnshare, keepAfter := unshareFS, afterBind
	defer func() { unshareFS, afterBind = keepUnshare, keepAfter }()
	unshareFS = func() error { return syscall.EPERM }
	dir := t.TempDir()
	target := filepath.Join(dir, "secret")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "s.sock")
	ln, err := ListenSocket(path, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Perm() != 0o666 {
		t.Errorf("the socket without unshare: %v, %v; want mode 0666", fi, err)
	}
	ln.Close()

	afterBind = func(path string) {
		if err := os.Rename(path, path+".moved"); err != nil {
			t.Error(err)
		}
		if err := os.Symlink(target, path); err != nil {
			t.Error(err)
		}
	}
	if ln, err := ListenSocket(path, 0o666); !errors.Is(err, errSocketSwapped) {
		if err == nil {
			ln.Close()
		}
		t.Errorf("a socket swapped for a link after the bind: %v, want %v", err, errSocketSwapped)
	}
	if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the file the link names: %v, %v; want its mode 0600 left as it was", fi, err)
	}
}
