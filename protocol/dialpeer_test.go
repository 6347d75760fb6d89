package protocol

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/testbin"
	"github.com/mailctl/mailctl/internal/testusers"
)

// TestMain lets the test binary be a daemon's impostor, run as another
// user by testusers.HoldSocket: it greets whoever connects.
func TestMain(m *testing.M) {
	testusers.ServeHeldSocket(greet)
	code := m.Run()
	testbin.Cleanup() // the mailctl the give tests run
	os.Exit(code)
}

func greet(c net.Conn) {
	json.NewEncoder(c).Encode(Greeting{Protocol: Name, Version: Version, Server: "an impostor"})
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
	squatted := testusers.HoldSocket(t, u)

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
	go testusers.Serve(ln, greet)
	c, err = Dial(context.Background(), own)
	if err != nil {
		t.Fatalf("root's client refused root's own socket: %v", err)
	}
	c.Close()
}
