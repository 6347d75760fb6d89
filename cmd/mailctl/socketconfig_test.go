package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClientsFindTheDaemonAtTheConfigsSocket: with MAILCTL_CONFIG naming a
// config whose paths.socket is not the default, `mailctl backup` reached
// the daemon but `mailctl reindex` (and every other client) dialed the
// default socket and said no daemon was running.
func TestClientsFindTheDaemonAtTheConfigsSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("reindex is root's, and serve runs as root")
	}
	dir := t.TempDir()
	cfgPath := serveConfig(t, dir, freePort(t))
	startServe(t, cfgPath)

	env := []string{"MAILCTL_SOCKET=", "MAILCTL_CONFIG=" + cfgPath}
	for _, args := range [][]string{{"reindex"}, {"queue", "list"}, {"version"}} {
		out, e, code := mailctl(t, env, args...)
		if code != 0 || strings.Contains(out, "daemon: not reachable") {
			t.Errorf("MAILCTL_CONFIG=%s mailctl %s: exit %d\n%s%s", cfgPath, strings.Join(args, " "), code, out, e)
		}
	}
	// --socket and $MAILCTL_SOCKET still come first.
	other := filepath.Join(dir, "none.sock")
	if _, e, code := mailctl(t, append(env, "MAILCTL_SOCKET="+other), "reindex"); code != 75 || !strings.Contains(e, other) {
		t.Errorf("reindex with $MAILCTL_SOCKET beside $MAILCTL_CONFIG: exit %d, %s; want it to dial %s", code, e, other)
	}
	// A config named but not there is said, not passed over for the
	// default socket (another daemon, or none).
	missing := filepath.Join(dir, "missing.toml")
	if _, e, code := mailctl(t, []string{"MAILCTL_SOCKET=", "MAILCTL_CONFIG=" + missing}, "reindex"); code != 2 || !strings.Contains(e, missing) {
		t.Errorf("reindex with a missing $MAILCTL_CONFIG: exit %d, %s; want exit 2 naming %s", code, e, missing)
	}
}
