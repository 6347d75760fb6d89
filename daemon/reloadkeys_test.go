package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReloadFailsOnABrokenDKIMKey: a key file that does not load stops the
// daemon at its next start; the reload that reads it must fail (so `mailctl
// reload` and `systemctl reload` say so) instead of reporting success.
func TestReloadFailsOnABrokenDKIMKey(t *testing.T) {
	td := startDaemonWith(t, "", Options{})
	broken := filepath.Join(td.cfg.Paths.DKIMDir, "broken.key")
	if err := os.MkdirAll(td.cfg.Paths.DKIMDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(broken, []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := td.Reload(td.cfg.File)
	if err == nil || !strings.Contains(err.Error(), "broken.key") {
		t.Fatalf("reload with a broken DKIM key file: %v, want an error naming it", err)
	}
	if st := td.lastReload.Load(); st == nil || st.OK {
		t.Errorf("the reload status says OK: %+v", st)
	}
	os.Remove(broken)
	if err := td.Reload(td.cfg.File); err != nil {
		t.Fatalf("reload after the file is gone: %v", err)
	}
}
