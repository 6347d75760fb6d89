package agentcfg

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Each harness that takes a tool timeout gets one above email_wait's 600 s.
func TestSnippetsCarryToolTimeout(t *testing.T) {
	s := Server{Command: "/usr/bin/mailctl", Args: []string{"mcp"}}
	want := map[string]string{
		"codex":  "tool_timeout_sec = " + strconv.Itoa(ToolTimeoutSecs),
		"gemini": `"timeout": ` + strconv.Itoa(ToolTimeoutSecs*1000),
		"goose":  "timeout: " + strconv.Itoa(ToolTimeoutSecs),
	}
	if ToolTimeoutSecs <= 600 {
		t.Fatalf("ToolTimeoutSecs %d does not cover email_wait's 600 s", ToolTimeoutSecs)
	}
	for name, w := range want {
		h, _ := Lookup(name)
		b, err := h.Snippet(s)
		if err != nil || !strings.Contains(string(b), w) {
			t.Errorf("%s snippet lacks %q: %v\n%s", name, w, err, b)
		}
	}
}

// Remove takes out exactly mailctl's entry and keeps what else the user has.
func TestRemoveKeepsTheRest(t *testing.T) {
	others := map[string]string{
		"claude-code": `{"theme":"dark","mcpServers":{"other":{"command":"/bin/other"}}}`,
		"codex":       "model = \"o3\"\n\n[mcp_servers.other]\ncommand = \"/bin/other\"\n",
		"gemini":      `{"mcpServers":{"other":{"command":"/bin/other"}}}`,
		"goose":       "GOOSE_MODEL: x\nextensions:\n  other:\n    cmd: /bin/other\n",
		"opencode":    `{"mcp":{"other":{"command":["/bin/other"]}}}`,
	}
	s := Server{Command: "/opt/mailctl", Args: []string{"mcp"}, Env: map[string]string{"MAILCTL_SOCKET": "/tmp/s.sock"}}
	for _, h := range Harnesses {
		home := t.TempDir()
		path := h.Path(home)
		os.MkdirAll(filepath.Dir(path), 0o700)
		if err := os.WriteFile(path, []byte(others[h.Name]), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := Setup(home, h, s); err != nil {
			t.Fatalf("%s setup: %v", h.Name, err)
		}
		_, changed, err := Remove(home, h)
		if err != nil || !changed {
			t.Fatalf("%s remove: changed %v, %v", h.Name, changed, err)
		}
		b, _ := os.ReadFile(path)
		if wired, _ := h.Wired(b); wired || strings.Contains(string(b), "/opt/mailctl") {
			t.Errorf("%s still wired after remove:\n%s", h.Name, b)
		}
		if !strings.Contains(string(b), "/bin/other") {
			t.Errorf("%s lost the other server:\n%s", h.Name, b)
		}
		if _, changed, err := Remove(home, h); err != nil || changed {
			t.Errorf("%s second remove: changed %v, %v", h.Name, changed, err)
		}
	}
	// No config: nothing to do, nothing created.
	home := t.TempDir()
	h, _ := Lookup("codex")
	if _, changed, err := Remove(home, h); err != nil || changed {
		t.Fatalf("remove without config: %v %v", changed, err)
	}
	if _, err := os.Stat(h.Path(home)); !os.IsNotExist(err) {
		t.Fatalf("remove created %s", h.Path(home))
	}
}

// The backup (BackupSuffix) is the config as it was before mailctl first
// changed it, or nothing when mailctl made the file. A setup again (another
// binary: the dev banner's, then an installed one) or a remove used to copy
// mailctl's own wiring there when no backup existed yet, so the file that
// promises the original held mailctl's entry.
func TestBackupIsTheConfigBeforeMailctl(t *testing.T) {
	original := map[string]string{
		"claude-code": `{"theme":"dark"}`,
		"codex":       "model = \"o3\"\n",
		"gemini":      `{"theme":"dark"}`,
		"goose":       "GOOSE_MODEL: x\n",
		"opencode":    `{"theme":"dark"}`,
	}
	first := Server{Command: "/dev/bin/mailctl", Args: []string{"mcp"}}
	second := Server{Command: "/usr/bin/mailctl", Args: []string{"mcp"}}
	for _, h := range Harnesses {
		// mailctl made the file: no backup, after a setup again or a remove.
		home := t.TempDir()
		for _, s := range []Server{first, second} {
			if _, _, err := Setup(home, h, s); err != nil {
				t.Fatalf("%s setup: %v", h.Name, err)
			}
		}
		if _, _, err := Remove(home, h); err != nil {
			t.Fatalf("%s remove: %v", h.Name, err)
		}
		if bak, ok := Backup(home, h); ok {
			b, _ := os.ReadFile(bak)
			t.Errorf("%s: a config mailctl made has a backup %s:\n%s", h.Name, bak, b)
		}
		// The user's file: its backup is the original, through both.
		home = t.TempDir()
		path := h.Path(home)
		os.MkdirAll(filepath.Dir(path), 0o700)
		if err := os.WriteFile(path, []byte(original[h.Name]), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, s := range []Server{first, second} {
			if _, _, err := Setup(home, h, s); err != nil {
				t.Fatalf("%s setup: %v", h.Name, err)
			}
		}
		if _, _, err := Remove(home, h); err != nil {
			t.Fatalf("%s remove: %v", h.Name, err)
		}
		bak, ok := Backup(home, h)
		if b, _ := os.ReadFile(bak); !ok || string(b) != original[h.Name] {
			t.Errorf("%s: backup %s (present %v) is %q, want the original %q", h.Name, bak, ok, b, original[h.Name])
		}
	}
}
