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

// TestEveryHintFitsTheInit: the lines that tell how to reload, restart or
// stop the system's daemon, or where its log is, said `systemctl` and
// `journalctl` on a host without systemd (a container), where neither
// does anything but fail.
func TestEveryHintFitsTheInit(t *testing.T) {
	was := SystemdRuns
	t.Cleanup(func() { SystemdRuns = was })
	for _, tc := range []struct {
		name          string
		line          func() string
		unit, without string
	}{
		{"start", StartCommand, "sudo systemctl start mailctl", "sudo mailctl serve"},
		{"reload", ReloadLine, "`sudo systemctl reload mailctl`", "`sudo mailctl reload PID`"},
		{"restart", RestartLine, "`sudo systemctl restart mailctl`", "`sudo mailctl serve`"},
		{"stop", StopLine, "`sudo systemctl stop mailctl`", "`sudo kill PID`"},
		{"logs", LogsHint, "journalctl -u mailctl", "standard error"},
		{"logs of a term", func() string { return LogsLine("certificate") }, "`sudo journalctl -u mailctl -g certificate`", "`grep certificate`"},
		{"logs of a phrase", func() string { return LogsLine("msg=tls refused") }, "`sudo journalctl -u mailctl -g 'msg=tls refused'`", "`grep 'msg=tls refused'`"},
		{"all logs", func() string { return LogsLine("") }, "`sudo journalctl -u mailctl`", "standard error"},
	} {
		SystemdRuns = func() bool { return true }
		if got := tc.line(); !strings.Contains(got, tc.unit) {
			t.Errorf("%s under systemd: %q, want %q in it", tc.name, got, tc.unit)
		}
		SystemdRuns = func() bool { return false }
		got := tc.line()
		if !strings.Contains(got, tc.without) || strings.Contains(got, "systemctl") || strings.Contains(got, "journalctl") {
			t.Errorf("%s without systemd: %q, want %q in it and no systemctl or journalctl", tc.name, got, tc.without)
		}
		if tc.name == "all logs" && strings.Contains(got, "grep") {
			t.Errorf("all logs without systemd: %q greps for nothing", got)
		}
	}
}
