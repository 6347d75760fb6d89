package protocol

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A stopped `mailctl dev` is started again with its own binary, folder and
// address; any other socket as the system's daemon is (or a new dev). The dev is known
// by the config it writes beside its socket, not by a name.
func TestUnavailableSaysHowToStartThisDaemon(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "mailctl.sock")
	_, err := Dial(context.Background(), sock)
	if pe, ok := err.(*Error); !ok || pe.Code != CodeUnavailable || !strings.Contains(pe.Message, StartCommand()) {
		t.Fatalf("no dev here: %v", err)
	}
	os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
	os.WriteFile(filepath.Join(dir, "bin", "mailctl"), nil, 0o755)
	os.WriteFile(filepath.Join(dir, "config.toml"), []byte(DevConfigHeader+" at now\nhostname = \"localhost\"\ndomains = [\"dev.test\"]\n\n[smtp]\nlisten = [\"127.0.0.1:2600\"]\n"), 0o600)
	_, err = Dial(context.Background(), sock)
	want := "start it again with `" + filepath.Join(dir, "bin", "mailctl") + " dev --dir " + dir + " --smtp 127.0.0.1:2600 --domain dev.test`"
	if pe, ok := err.(*Error); !ok || !strings.Contains(pe.Message, want) || strings.Contains(pe.Message, StartCommand()) {
		t.Fatalf("stopped dev: %v\nwant %s", err, want)
	}
	// A config.toml some other program wrote is no dev.
	os.WriteFile(filepath.Join(dir, "config.toml"), []byte("hostname = \"x\"\n"), 0o600)
	if _, err := Dial(context.Background(), sock); !strings.Contains(err.Error(), "start it with `"+StartCommand()+"`") {
		t.Fatalf("not a dev config: %v", err)
	}
}

// TestStartCommandFitsTheInit: every line that tells how to start the
// system's daemon said `systemctl start` even where systemd is not the
// init (a container), where that command does nothing but fail.
func TestStartCommandFitsTheInit(t *testing.T) {
	was := SystemdRuns
	defer func() { SystemdRuns = was }()
	for _, systemd := range []bool{true, false} {
		SystemdRuns = func() bool { return systemd }
		want, logs := "sudo mailctl serve", "standard error"
		if systemd {
			want, logs = "sudo systemctl start mailctl", "journalctl -u mailctl"
		}
		if got := StartCommand(); got != want {
			t.Errorf("systemd %v: %q, want %q", systemd, got, want)
		}
		if got := LogsHint(); !strings.Contains(got, logs) {
			t.Errorf("systemd %v: logs %q, want %q in it", systemd, got, logs)
		}
		if got := startAdvice(filepath.Join(t.TempDir(), "mailctl.sock")); !strings.Contains(got, "`"+want+"`") {
			t.Errorf("systemd %v: advice %q does not give %q", systemd, got, want)
		}
	}
}
