package agentcfg

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

var srv = Server{Command: "/usr/bin/mailctl", Args: []string{"mcp"}, Env: map[string]string{"MAILCTL_SOCKET": "/tmp/dev/mailctl.sock"}}

// yamlToJSON parses YAML with Debian's python3-yaml, the closest thing to a
// reference YAML parser on the machine (no YAML library is in the module).
func yamlToJSON(t *testing.T, doc []byte) map[string]any {
	t.Helper()
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skip("python3 not installed: cannot check YAML")
	}
	if exec.Command(py, "-c", "import yaml").Run() != nil {
		t.Skip("python3-yaml not installed (apt package python3-yaml): cannot check YAML")
	}
	cmd := exec.Command(py, "-c", "import sys, yaml, json; json.dump(yaml.safe_load(sys.stdin), sys.stdout)")
	cmd.Stdin = bytes.NewReader(doc)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("YAML does not parse: %v\n%s\n--- document:\n%s", err, out, doc)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// parsed decodes a document in h's format into a generic map.
func parsed(t *testing.T, h *Harness, doc []byte) map[string]any {
	t.Helper()
	switch h.Format {
	case "json":
		var m map[string]any
		if err := json.Unmarshal(doc, &m); err != nil {
			t.Fatalf("%s: JSON does not parse: %v\n%s", h.Name, err, doc)
		}
		return m
	case "toml":
		var m map[string]any
		if _, err := toml.Decode(string(doc), &m); err != nil {
			t.Fatalf("%s: TOML does not parse: %v\n%s", h.Name, err, doc)
		}
		return m
	case "yaml":
		return yamlToJSON(t, doc)
	}
	t.Fatalf("unknown format %s", h.Format)
	return nil
}

func dig(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}

// entryCommand extracts the command line our entry starts, per harness.
func entryCommand(t *testing.T, h *Harness, m map[string]any) string {
	t.Helper()
	join := func(v any) string {
		var parts []string
		if l, ok := v.([]any); ok {
			for _, p := range l {
				parts = append(parts, p.(string))
			}
		}
		return strings.Join(parts, " ")
	}
	switch h.Name {
	case "claude-code", "gemini":
		e := dig(m, "mcpServers", ServerName)
		return dig(e.(map[string]any), "command").(string) + " " + join(dig(e.(map[string]any), "args"))
	case "codex":
		e := dig(m, "mcp_servers", ServerName).(map[string]any)
		return e["command"].(string) + " " + join(e["args"])
	case "goose":
		e := dig(m, "extensions", ServerName).(map[string]any)
		if e["type"] != "stdio" || e["enabled"] != true {
			t.Errorf("goose entry %v", e)
		}
		return e["cmd"].(string) + " " + join(e["args"])
	case "opencode":
		e := dig(m, "mcp", ServerName).(map[string]any)
		if e["type"] != "local" {
			t.Errorf("opencode type %v", e["type"])
		}
		return join(e["command"])
	}
	return ""
}

func entryEnv(h *Harness, m map[string]any) any {
	switch h.Name {
	case "claude-code", "gemini":
		return dig(m, "mcpServers", ServerName, "env", "MAILCTL_SOCKET")
	case "codex":
		return dig(m, "mcp_servers", ServerName, "env", "MAILCTL_SOCKET")
	case "goose":
		return dig(m, "extensions", ServerName, "envs", "MAILCTL_SOCKET")
	case "opencode":
		return dig(m, "mcp", ServerName, "environment", "MAILCTL_SOCKET")
	}
	return nil
}

func TestSnippetsParse(t *testing.T) {
	for _, h := range Harnesses {
		t.Run(h.Name, func(t *testing.T) {
			doc, err := h.Snippet(srv)
			if err != nil {
				t.Fatal(err)
			}
			m := parsed(t, h, doc)
			if got := entryCommand(t, h, m); got != "/usr/bin/mailctl mcp" {
				t.Errorf("command %q", got)
			}
			if got := entryEnv(h, m); got != "/tmp/dev/mailctl.sock" {
				t.Errorf("env MAILCTL_SOCKET = %v", got)
			}
			if ok, cmd := h.Wired(doc); !ok || cmd == "" {
				t.Errorf("Wired(snippet) = %v %q", ok, cmd)
			}
		})
	}
}

// existing configs with other settings and other servers, as users have them.
var existing = map[string]string{
	"claude-code": `{"numStartups": 12, "theme": "dark", "mcpServers": {"github": {"type": "stdio", "command": "gh-mcp", "args": []}}, "projects": {"/src": {"allowedTools": ["Bash"]}}}`,
	"codex": `# my codex settings
model = "gpt-5"
approval_policy = "on-request"

[mcp_servers.github]
command = "gh-mcp"

[mcp_servers.mailctl]
command = "/old/mailctl"
args = ["mcp"]

[mcp_servers.mailctl.env]
MAILCTL_SOCKET = "/old.sock"

[profiles.fast]
model = "gpt-5-mini"
`,
	"gemini": `{"theme": "GitHub", "mcpServers": {"other": {"command": "x"}}, "selectedAuthType": "oauth-personal"}`,
	"goose": `GOOSE_PROVIDER: anthropic
GOOSE_MODEL: claude-sonnet-4
extensions:
  developer:
    bundled: true
    enabled: true
    name: developer
    timeout: 300
    type: builtin
  # my notes
  mailctl:
    enabled: false
    type: stdio
    cmd: /old/mailctl
    args:
    - mcp
    envs: {}
GOOSE_MODE: smart_approve
`,
	"opencode": `{"$schema": "https://opencode.ai/config.json", "theme": "tokyonight", "mcp": {"docs": {"type": "remote", "url": "https://docs.example/mcp", "enabled": true}}}`,
}

func TestMergeKeepsEverythingElse(t *testing.T) {
	keep := map[string][][]string{
		"claude-code": {{"numStartups"}, {"theme"}, {"mcpServers", "github", "command"}, {"projects", "/src", "allowedTools"}},
		"codex":       {{"model"}, {"approval_policy"}, {"mcp_servers", "github", "command"}, {"profiles", "fast", "model"}},
		"gemini":      {{"theme"}, {"selectedAuthType"}, {"mcpServers", "other", "command"}},
		"goose":       {{"GOOSE_PROVIDER"}, {"GOOSE_MODEL"}, {"GOOSE_MODE"}, {"extensions", "developer", "type"}},
		"opencode":    {{"$schema"}, {"theme"}, {"mcp", "docs", "url"}},
	}
	for _, h := range Harnesses {
		t.Run(h.Name, func(t *testing.T) {
			before := parsed(t, h, []byte(existing[h.Name]))
			merged, err := h.Merge([]byte(existing[h.Name]), srv)
			if err != nil {
				t.Fatal(err)
			}
			after := parsed(t, h, merged)
			for _, p := range keep[h.Name] {
				b, _ := json.Marshal(dig(before, p...))
				a, _ := json.Marshal(dig(after, p...))
				if dig(before, p...) == nil || !bytes.Equal(a, b) {
					t.Errorf("%v: %s → %s", p, b, a)
				}
			}
			if got := entryCommand(t, h, after); got != "/usr/bin/mailctl mcp" {
				t.Errorf("command %q", got)
			}
			if got := entryEnv(h, after); got != "/tmp/dev/mailctl.sock" {
				t.Errorf("env %v", got)
			}
			again, err := h.Merge(merged, srv)
			if err != nil || !bytes.Equal(again, merged) {
				t.Errorf("second merge changed the file (%v):\n%s\n---\n%s", err, merged, again)
			}
			if h.Format != "json" && !bytes.Contains(merged, []byte("#")) {
				t.Error("comments were lost")
			}
		})
	}
}

func TestMergeIntoEmptyAndRefusals(t *testing.T) {
	for _, h := range Harnesses {
		merged, err := h.Merge(nil, srv)
		if err != nil {
			t.Fatalf("%s: %v", h.Name, err)
		}
		if got := entryCommand(t, h, parsed(t, h, merged)); got != "/usr/bin/mailctl mcp" {
			t.Errorf("%s from nothing: %q", h.Name, got)
		}
	}
	for _, tc := range []struct{ harness, doc string }{
		{"claude-code", "{\n // a comment\n}"},
		{"gemini", `{"mcpServers": []}`},
		{"codex", "model = "},
		{"goose", "extensions: {developer: {type: builtin}}\n"},
		{"goose", "extensions:\n\tdeveloper: {}\n"},
	} {
		h, _ := Lookup(tc.harness)
		if _, err := h.Merge([]byte(tc.doc), srv); err == nil || !strings.Contains(err.Error(), "--print") {
			t.Errorf("%s %q: err %v, want a refusal pointing at --print", tc.harness, tc.doc, err)
		}
	}
}

func TestSetupAndList(t *testing.T) {
	home := t.TempDir()
	codex, _ := Lookup("codex")
	os.MkdirAll(filepath.Dir(codex.Path(home)), 0o700)
	os.WriteFile(codex.Path(home), []byte(existing["codex"]), 0o640)
	for _, st := range List(home) {
		if st.Wired != (st.Harness == "codex") {
			t.Errorf("before setup: %+v", st)
		}
	}
	for _, h := range Harnesses {
		path, changed, err := Setup(home, h, srv)
		if err != nil || !changed || path != h.Path(home) {
			t.Fatalf("%s: %s %v %v", h.Name, path, changed, err)
		}
		if _, changed, err := Setup(home, h, srv); err != nil || changed {
			t.Errorf("%s: second setup changed=%v err=%v", h.Name, changed, err)
		}
	}
	for _, st := range List(home) {
		if !st.Wired || st.Command == "" || !strings.HasPrefix(st.Command, "/usr/bin/mailctl") {
			t.Errorf("after setup: %+v", st)
		}
	}
	fi, _ := os.Stat(codex.Path(home))
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("codex config mode changed to %o", fi.Mode().Perm())
	}
	if b, err := os.ReadFile(codex.Path(home) + BackupSuffix); err != nil || string(b) != existing["codex"] {
		t.Errorf("no backup of the original codex config: %v", err)
	}
	claude, _ := Lookup("claude-code")
	if fi, _ := os.Stat(claude.Path(home)); fi.Mode().Perm() != 0o600 {
		t.Errorf("new config mode %o, want 600", fi.Mode().Perm())
	}
	p, err := WritePrimer(filepath.Join(home, ".config"), []string{"email_send"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	for _, want := range []string{"email_send", `trusted = "true"`, "+++", "inbox/"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("primer lacks %q", want)
		}
	}
}

func FuzzGooseMerge(f *testing.F) {
	f.Add(existing["goose"])
	f.Add("")
	f.Add("extensions:\n")
	f.Add("extensions: {}\nx: 1\n")
	f.Add("a:\n  b: 1\nextensions:\n    mailctl:\n        cmd: x\n")
	f.Fuzz(func(t *testing.T, doc string) {
		out, err := gooseMerge([]byte(doc), srv)
		if err != nil {
			return
		}
		if ok, cmd := gooseWired(out); !ok || cmd != srv.Command {
			t.Fatalf("merged config does not wire mailctl (%v %q):\n%s", ok, cmd, out)
		}
	})
}

func FuzzCodexMerge(f *testing.F) {
	f.Add(existing["codex"])
	f.Add("")
	f.Add("[mcp_servers.mailctl]\n")
	f.Fuzz(func(t *testing.T, doc string) {
		out, err := codexMerge([]byte(doc), srv)
		if err != nil {
			return
		}
		if ok, cmd := codexWired(out); !ok || cmd != srv.Command {
			t.Fatalf("merged config does not wire mailctl:\n%s", out)
		}
	})
}
