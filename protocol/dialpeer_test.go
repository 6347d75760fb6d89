package protocol

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/internal/testwait"
)

// envFakeDaemon makes the test binary a daemon's impostor: it serves a
// greeting on the socket it names, as any user can on a path where it may
// create one.
const envFakeDaemon = "MAILCTL_TEST_FAKE_DAEMON"

func TestMain(m *testing.M) {
	if path := os.Getenv(envFakeDaemon); path != "" {
		fakeDaemon(path)
		return
	}
	os.Exit(m.Run())
}

func fakeDaemon(path string) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		os.Exit(1)
	}
	os.Chmod(path, 0o666)
	serveGreetings(ln)
}

func serveGreetings(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		json.NewEncoder(c).Encode(Greeting{Protocol: Name, Version: Version, Server: "an impostor"})
		c.Close()
	}
}

// TestDialRefusesAnotherUsersSocket: a socket in a directory others may
// write to (paths.socket in /tmp, while the daemon is stopped) can be
// taken by another user, whose process then answers root's commands (a
// clean doctor, a draft's path for root's editor) and an agent's shim. The
// client refuses a socket served by anyone but root or itself before it
// believes or sends anything; root's own and the caller's own are
// reached.
func TestDialRefusesAnotherUsersSocket(t *testing.T) {
	testusers.RequireRoot(t)
	u := testusers.Create(t, "mcsquat")
	shared := testusers.SharedDir(t)
	os.Chmod(shared, 0o1777) // as /tmp
	squatted := filepath.Join(shared, "mailctl.sock")
	fake := testusers.As(exec.Command(testusers.Executable(t)), u.UID, u.GID)
	fake.Env = append(os.Environ(), envFakeDaemon+"="+squatted)
	if err := fake.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Process.Kill(); fake.Wait() })
	testwait.For(t, "the impostor's socket", func() bool { _, err := os.Stat(squatted); return err == nil })

	c, err := Dial(context.Background(), squatted)
	if err == nil {
		c.Close()
		t.Fatalf("root's client reached the socket of uid %d, greeted by %q", u.UID, c.Greeting.Server)
	}
	if pe, ok := err.(*Error); !ok || pe.Code != CodeForbidden || !strings.Contains(pe.Message, "neither root") {
		t.Fatalf("want forbidden naming whose socket it is, got %#v", err)
	}

	own := filepath.Join(t.TempDir(), "own.sock")
	ln, err := net.Listen("unix", own)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go serveGreetings(ln)
	c, err = Dial(context.Background(), own)
	if err != nil {
		t.Fatalf("root's client refused root's own socket: %v", err)
	}
	c.Close()
}
