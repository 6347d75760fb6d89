package protocol

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A stopped `mailctl dev` is started again with its own binary, folder and
// address; any other socket with systemctl (or a new dev). The dev is known
// by the config it writes beside its socket, not by a name.
func TestUnavailableSaysHowToStartThisDaemon(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "mailctl.sock")
	_, err := Dial(context.Background(), sock)
	if pe, ok := err.(*Error); !ok || pe.Code != CodeUnavailable || !strings.Contains(pe.Message, "sudo systemctl start mailctl") {
		t.Fatalf("no dev here: %v", err)
	}
	os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
	os.WriteFile(filepath.Join(dir, "bin", "mailctl"), nil, 0o755)
	os.WriteFile(filepath.Join(dir, "config.toml"), []byte(DevConfigHeader+" at now\nhostname = \"localhost\"\ndomains = [\"dev.test\"]\n\n[smtp]\nlisten = [\"127.0.0.1:2600\"]\n"), 0o600)
	_, err = Dial(context.Background(), sock)
	want := "start it again with `" + filepath.Join(dir, "bin", "mailctl") + " dev --dir " + dir + " --smtp 127.0.0.1:2600 --domain dev.test`"
	if pe, ok := err.(*Error); !ok || !strings.Contains(pe.Message, want) || strings.Contains(pe.Message, "systemctl") {
		t.Fatalf("stopped dev: %v\nwant %s", err, want)
	}
	// A config.toml some other program wrote is no dev.
	os.WriteFile(filepath.Join(dir, "config.toml"), []byte("hostname = \"x\"\n"), 0o600)
	if _, err := Dial(context.Background(), sock); !strings.Contains(err.Error(), "systemctl") {
		t.Fatalf("not a dev config: %v", err)
	}
}
