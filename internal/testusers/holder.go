package testusers

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// envHolder makes a test binary started by HoldSocket another user's
// process listening on the socket path it names, as any user can where
// they may create one.
const envHolder = "MAILCTL_TEST_SOCKET_HOLDER"

// holding is what the holder says on stdout once it listens.
const holding = "listening\n"

// ServeHeldSocket comes first in the TestMain of a package whose tests call
// HoldSocket: in the process HoldSocket started, it listens on the socket
// path named, lets every user connect, and passes each connection to answer
// until the process is killed; in any other process it returns at once.
func ServeHeldSocket(answer func(net.Conn)) {
	path := os.Getenv(envHolder)
	if path == "" {
		return
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		os.Exit(1)
	}
	os.Chmod(path, 0o666)
	os.Stdout.WriteString(holding)
	Serve(ln, answer)
	os.Exit(1)
}

// Serve passes each connection ln accepts to answer, then closes it, until
// ln is closed.
func Serve(ln net.Listener, answer func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		answer(c)
		c.Close()
	}
}

// HoldSocket starts the running test binary as u, listening on a socket in
// a new directory every user may write (mode 1777, as /tmp), and returns the
// socket's path once it listens: the socket a user takes where a daemon's
// belongs while the daemon is stopped. The process is killed when the test
// ends. The package's TestMain must call ServeHeldSocket.
func HoldSocket(t testing.TB, u User) string {
	t.Helper()
	RequireRoot(t)
	shared := SharedDir(t)
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(shared, "mailctl.sock")
	cmd := As(exec.Command(Executable(t)), u.UID, u.GID)
	cmd.Env = append(os.Environ(), envHolder+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// The holder says it listens, or exits and closes its stdout: no wait
	// on a clock.
	if line, err := bufio.NewReader(out).ReadString('\n'); line != holding {
		t.Fatalf("uid %d's process does not listen on %s: %q, %v", u.UID, path, line, err)
	}
	return path
}
