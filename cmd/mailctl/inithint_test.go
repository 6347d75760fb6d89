package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/daemon"
	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/protocol"
)

// withoutSystemd has the test's host run without systemd (a container)
// until it ends. Tests that call it must not be parallel.
func withoutSystemd(t *testing.T) {
	was := protocol.SystemdRuns
	t.Cleanup(func() { protocol.SystemdRuns = was })
	protocol.SystemdRuns = func() bool { return false }
}

// TestHintsFitAHostWithoutSystemd: a reload with keys that wait for a
// restart, and a restore while the daemon runs, said `systemctl restart`
// and `systemctl stop` on a host without systemd, where those only fail.
func TestHintsFitAHostWithoutSystemd(t *testing.T) {
	withoutSystemd(t)
	var buf bytes.Buffer
	saved := stdout
	stdout = &buf
	t.Cleanup(func() { stdout = saved })
	reportReload(42, &protocol.ReloadStatus{OK: true, Pending: []string{"dns.resolver"}})
	if out := buf.String(); strings.Contains(out, "systemctl") || !strings.Contains(out, "`sudo mailctl serve`") {
		t.Errorf("a reload with a restart-only change said:\n%s", out)
	}

	if os.Geteuid() != 0 {
		t.Skip("restore is root's")
	}
	cfgPath := serveConfig(t, t.TempDir(), freePort(t))
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	lock, err := daemon.LockState(cfg) // as the running daemon holds it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
	buf.Reset()
	savedErr := stderr
	stderr = &buf
	t.Cleanup(func() { stderr = savedErr })
	if code := cmdRestore([]string{"--config", cfgPath, filepath.Join(t.TempDir(), "none.tar")}); code != 1 ||
		strings.Contains(buf.String(), "systemctl") || !strings.Contains(buf.String(), "`sudo kill PID`") {
		t.Errorf("restore beside a running daemon: exit %d:\n%s", code, buf.String())
	}
}
