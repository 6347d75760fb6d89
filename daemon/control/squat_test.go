package control

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/internal/testwait"
)

// envSquatter makes the test binary another user's process listening on
// the socket path it names, as any user can where they may create one.
const envSquatter = "MAILCTL_TEST_SQUATTER"

func TestMain(m *testing.M) {
	if path := os.Getenv(envSquatter); path != "" {
		ln, err := net.Listen("unix", path)
		if err != nil {
			os.Exit(1)
		}
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(1)
			}
			c.Close()
		}
	}
	os.Exit(m.Run())
}

// TestListenNamesTheUserHoldingTheSocket: another user took the socket
// path in a sticky shared directory while the daemon was stopped, and
// answers there. The daemon does not start on it, and says whose process
// it is and what to do, instead of taking it for another daemon.
func TestListenNamesTheUserHoldingTheSocket(t *testing.T) {
	testusers.RequireRoot(t)
	u := testusers.Create(t, "mcsock")
	shared := testusers.SharedDir(t)
	if err := os.Chmod(shared, 0o1777); err != nil { // as /tmp
		t.Fatal(err)
	}
	path := filepath.Join(shared, "mailctl.sock")
	squat := testusers.As(exec.Command(testusers.Executable(t)), u.UID, u.GID)
	squat.Env = append(os.Environ(), envSquatter+"="+path)
	if err := squat.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { squat.Process.Kill(); squat.Wait() })
	testwait.For(t, "the other user's socket", func() bool {
		c, err := net.Dial("unix", path)
		if err == nil {
			c.Close()
		}
		return err == nil
	})

	srv := New(Options{Backend: &fakeBackend{cfg: &config.Config{Domains: []string{"example.test"}}}})
	err := srv.Listen(path)
	if err == nil {
		t.Fatal("the daemon listened on a path another user's process answers on")
	}
	if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("uid %d's process", u.UID)) || strings.Contains(msg, "another mailctl daemon") {
		t.Errorf("the refusal does not name the user holding the socket: %v", err)
	}
}
