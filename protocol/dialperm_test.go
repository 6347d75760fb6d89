package protocol

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A socket the caller may not open (another user's `mailctl dev`, whose
// folder is private) is reached by a daemon that is running: the error says
// the socket is closed to this user, never that the daemon is down and
// should be started with systemctl.
func TestSocketClosedToTheCallerIsNotAStoppedDaemon(t *testing.T) {
	check := func(t *testing.T, err error) {
		t.Helper()
		pe, ok := err.(*Error)
		if !ok || pe.Code != CodeForbidden || pe.Retryable || !strings.Contains(pe.Message, "may not open this socket") ||
			!strings.Contains(pe.Message, "run your own `mailctl dev`") || strings.Contains(pe.Message, StartCommand()) {
			t.Fatalf("want forbidden saying the socket is closed to this user, got %#v", err)
		}
	}
	t.Run("refused", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "mailctl.sock")
		check(t, dialError(path, &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.EACCES)}))
	})
	t.Run("private folder", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root opens any socket; the case above covers the error")
		}
		dir := filepath.Join(t.TempDir(), ".mailctl-dev")
		os.Mkdir(dir, 0o700)
		ln, err := net.Listen("unix", filepath.Join(dir, "mailctl.sock"))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		os.Chmod(dir, 0)
		defer os.Chmod(dir, 0o700)
		_, err = Dial(context.Background(), filepath.Join(dir, "mailctl.sock"))
		check(t, err)
	})
}
