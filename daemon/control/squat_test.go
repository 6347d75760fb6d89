package control

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/internal/testusers"
)

// TestMain lets the test binary be another user's process holding the
// socket path, run by testusers.HoldSocket: it answers by hanging up.
func TestMain(m *testing.M) {
	testusers.ServeHeldSocket(func(net.Conn) {})
	os.Exit(m.Run())
}

// TestListenNamesTheUserHoldingTheSocket: another user took the socket
// path in a sticky shared directory while the daemon was stopped, and
// answers there. The daemon does not start on it, and says whose process
// it is and what to do, instead of taking it for another daemon.
func TestListenNamesTheUserHoldingTheSocket(t *testing.T) {
	testusers.RequireRoot(t)
	u := testusers.Create(t, "mcsock")
	path := testusers.HoldSocket(t, u)

	srv := New(Options{Backend: &fakeBackend{cfg: &config.Config{Domains: []string{"example.test"}}}})
	err := srv.Listen(path)
	if err == nil {
		t.Fatal("the daemon listened on a path another user's process answers on")
	}
	if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("uid %d's process", u.UID)) || strings.Contains(msg, "another mailctl daemon") {
		t.Errorf("the refusal does not name the user holding the socket: %v", err)
	}
}
