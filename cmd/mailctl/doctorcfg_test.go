package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// TestDoctorTestsANewConfigBesideTheRunningDaemon: operations.md has the
// operator test an edited config with `mailctl doctor` before the reload.
// With a bad value in it, root's doctor names the value and still reaches
// the running daemon at the file's socket: it said the daemon was down, to
// be started, because it looked for it at the default socket.
func TestDoctorTestsANewConfigBesideTheRunningDaemon(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("doctor checks the files only as root")
	}
	dir := t.TempDir()
	cfgPath := serveConfig(t, dir, freePort(t))
	startServe(t, cfgPath)

	appendTo(t, cfgPath, "[metrics]\nlisten = \"0.0.0.0:9325\"\n")
	out, e, _ := mailctl(t, []string{"MAILCTL_SOCKET="}, "doctor", "--json", "--config", cfgPath)
	var r struct {
		Findings []protocol.Finding `json:"findings"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("doctor --json: %v\n%s%s", err, out, e)
	}
	found := map[string]bool{}
	for _, x := range r.Findings {
		found[x.ID] = true
	}
	if !found["config.parse"] || !found["daemon.up"] || found["daemon.down"] {
		t.Errorf("doctor on a config with a bad value beside the running daemon: %+v, want config.parse and daemon.up", r.Findings)
	}
}

// TestDoctorAsUserNamesTheConfigGiven: `mailctl doctor --config X` run by
// another user than root asks the daemon X names. When none answers, or X
// cannot be read, what it says names X and that X's own checks need root;
// it named /etc/mailctl/config.toml (setup's), which the user never gave.
func TestDoctorAsUserNamesTheConfigGiven(t *testing.T) {
	dir, bin := t.TempDir(), os.Args[0]
	as := func(c *exec.Cmd) *exec.Cmd { return c }
	if os.Geteuid() == 0 {
		u := testusers.Create(t, "mcdcfg")
		dir, bin = testusers.SharedDir(t), testusers.Executable(t)
		as = func(c *exec.Cmd) *exec.Cmd { return testusers.As(c, u.UID, u.GID) }
	}
	readable := filepath.Join(dir, "other.toml")
	cfg := "hostname = \"mx.example.com\"\ndomains = [\"example.com\"]\n[paths]\nsocket = \"" + filepath.Join(dir, "none.sock") + "\"\n"
	if err := os.WriteFile(readable, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	unreadable := filepath.Join(dir, "secret.toml")
	if err := os.WriteFile(unreadable, []byte(cfg), 0); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, id string }{{readable, "daemon.down"}, {unreadable, "daemon.socket"}} {
		cmd := as(exec.Command(bin, "doctor", "--json", "--config", tc.path))
		cmd.Env = append(os.Environ(), "MAILCTL_AS_BINARY=1", "MAILCTL_SOCKET=", "MAILCTL_CONFIG=")
		out, err := cmd.Output()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Fatalf("doctor --config %s: %v, want exit 1\n%s", tc.path, err, out)
		}
		var r struct {
			Findings []protocol.Finding `json:"findings"`
		}
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("doctor --json: %v\n%s", err, out)
		}
		if len(r.Findings) != 1 || r.Findings[0].ID != tc.id ||
			!strings.Contains(r.Findings[0].Fix, "sudo mailctl doctor --config "+tc.path) ||
			strings.Contains(string(out), config.DefaultPath) {
			t.Errorf("doctor --config %s as a user: %+v, want %s naming the file and its root checks, not %s", tc.path, r.Findings, tc.id, config.DefaultPath)
		}
	}
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}
