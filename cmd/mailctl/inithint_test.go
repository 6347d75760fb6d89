package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
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

// TestRestoreNamesTheDaemonOfItsConfig: a restore refused because a daemon
// holds the state of a config other than the unit's said `systemctl stop
// mailctl` where systemd runs, which stops the unit's daemon, not that one.
// It names the daemon answering on that config's socket instead.
func TestRestoreNamesTheDaemonOfItsConfig(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("restore is root's")
	}
	was := protocol.SystemdRuns
	t.Cleanup(func() { protocol.SystemdRuns = was })
	protocol.SystemdRuns = func() bool { return true }
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
	answerVersion(t, cfg.Paths.Socket, protocol.VersionInfo{Server: "test", PID: 4242})
	var buf bytes.Buffer
	savedErr := stderr
	stderr = &buf
	t.Cleanup(func() { stderr = savedErr })
	if code := cmdRestore([]string{"--config", cfgPath, filepath.Join(t.TempDir(), "none.tar")}); code != 1 ||
		strings.Contains(buf.String(), "systemctl") || !strings.Contains(buf.String(), "`sudo kill 4242`") {
		t.Errorf("restore beside the daemon of another config: exit %d:\n%s", code, buf.String())
	}
}

// answerVersion serves the control protocol at socket until the test ends,
// answering every request with v.
func answerVersion(t *testing.T, socket string, v protocol.VersionInfo) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				enc := json.NewEncoder(c)
				enc.Encode(protocol.Greeting{Protocol: protocol.Name, Version: protocol.Version, Server: "test"})
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					var req protocol.Request
					if json.Unmarshal(sc.Bytes(), &req) != nil {
						return
					}
					enc.Encode(protocol.Response{ID: req.ID, Data: data})
				}
			}()
		}
	}()
}
