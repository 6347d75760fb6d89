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
func withoutSystemd(t *testing.T) { hostInit(t, false) }

// hostInit has the test's host run with systemd as its init, or without,
// until the test ends.
func hostInit(t *testing.T, systemd bool) {
	was := protocol.SystemdRuns
	t.Cleanup(func() { protocol.SystemdRuns = was })
	protocol.SystemdRuns = func() bool { return systemd }
}

// heldConfig is a config other than the unit's whose state is held, as
// its running daemon holds it, until the test ends.
func heldConfig(t *testing.T) (string, *config.Config) {
	t.Helper()
	cfgPath := serveConfig(t, t.TempDir(), freePort(t))
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	lock, err := daemon.LockState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
	return cfgPath, cfg
}

// restoreSays runs a restore of the config at cfgPath and returns its exit
// code and what it wrote to stderr.
func restoreSays(t *testing.T, cfgPath string) (int, string) {
	t.Helper()
	var buf bytes.Buffer
	saved := stderr
	stderr = &buf
	defer func() { stderr = saved }()
	code := cmdRestore([]string{"--config", cfgPath, filepath.Join(t.TempDir(), "none.tar")})
	return code, buf.String()
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
	cfgPath, _ := heldConfig(t)
	if code, out := restoreSays(t, cfgPath); code != 1 || strings.Contains(out, "systemctl") || !strings.Contains(out, "`sudo kill PID`") {
		t.Errorf("restore beside a running daemon: exit %d:\n%s", code, out)
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
	hostInit(t, true)
	cfgPath, cfg := heldConfig(t)
	answerVersion(t, cfg.Paths.Socket, protocol.VersionInfo{Server: "test", PID: 4242})
	if code, out := restoreSays(t, cfgPath); code != 1 || strings.Contains(out, "systemctl") || !strings.Contains(out, "`sudo kill 4242`") {
		t.Errorf("restore beside the daemon of another config: exit %d:\n%s", code, out)
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
