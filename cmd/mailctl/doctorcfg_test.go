package main

import (
	"encoding/json"
	"os"
	"testing"

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
