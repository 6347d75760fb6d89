package agentcfg

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSetupKeepsALinkedConfig: a harness config that is a symlink into the
// user's dotfiles stays a link, and the file it points to gets the entry.
func TestSetupKeepsALinkedConfig(t *testing.T) {
	home := t.TempDir()
	codex, _ := Lookup("codex")
	dot := filepath.Join(home, "dotfiles", "codex.toml")
	os.MkdirAll(filepath.Dir(dot), 0o700)
	if err := os.WriteFile(dot, []byte(existing["codex"]), 0o640); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Dir(codex.Path(home)), 0o700)
	if err := os.Symlink(dot, codex.Path(home)); err != nil {
		t.Fatal(err)
	}
	if _, changed, err := Setup(home, codex, srv); err != nil || !changed {
		t.Fatalf("setup: changed=%v err=%v", changed, err)
	}
	if fi, err := os.Lstat(codex.Path(home)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the linked config was replaced by a file: %v", err)
	}
	b, _ := os.ReadFile(dot)
	if !strings.Contains(string(b), "[mcp_servers.mailctl]") {
		t.Errorf("the linked file has no mailctl entry:\n%s", b)
	}
	if _, changed, err := Remove(home, codex); err != nil || !changed {
		t.Fatalf("remove: changed=%v err=%v", changed, err)
	}
	if b, _ := os.ReadFile(dot); strings.Contains(string(b), "mcp_servers.mailctl") {
		t.Errorf("remove left the entry in the linked file:\n%s", b)
	}
}
