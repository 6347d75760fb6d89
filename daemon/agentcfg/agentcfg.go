// Package agentcfg wires `mailctl mcp` into agent harnesses (Claude Code,
// Codex, Gemini CLI, goose, opencode), each in its own user-level config
// format, merging into existing files without losing the keys already there,
// and writes a primer that teaches an agent the tools, the trust rules and the
// Markdown store.
package agentcfg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/mailctl/mailctl/internal/safeio"
)

// ServerName is the key mailctl's server gets in every harness config.
const ServerName = "mailctl"

// ToolTimeoutSecs is the per-tool-call timeout written for harnesses that
// take one: email_wait may run for 600 s, and the call needs room on top.
const ToolTimeoutSecs = 660

// Server is how a harness starts the MCP server. A Server with no Command
// given to Merge removes mailctl's entry instead (`agents remove`).
type Server struct {
	Command string            // absolute path of the mailctl binary
	Args    []string          // ["mcp"]
	Env     map[string]string // MAILCTL_SOCKET when not the default
}

// Harness is one agent harness and its config format.
type Harness struct {
	Name   string // command-line name: claude-code, codex, gemini, goose, opencode
	Title  string
	Format string // json, toml or yaml
	// Rel is the config file relative to the home directory.
	Rel string
	// Snippet is the fragment that wires the server, as a complete document.
	Snippet func(s Server) ([]byte, error)
	// Merge returns existing with the server wired in, everything else kept.
	Merge func(existing []byte, s Server) ([]byte, error)
	// Wired reports whether existing wires a mailctl server, and its command.
	Wired func(existing []byte) (bool, string)
}

// Path is the harness's config file under home.
func (h *Harness) Path(home string) string { return filepath.Join(home, h.Rel) }

// Harnesses are the supported harnesses, in the order `agents list` shows them.
var Harnesses = []*Harness{
	{Name: "claude-code", Title: "Claude Code", Format: "json", Rel: ".claude.json",
		Snippet: jsonSnippet("mcpServers", claudeEntry), Merge: jsonMerge("mcpServers", claudeEntry), Wired: jsonWired("mcpServers")},
	{Name: "codex", Title: "Codex CLI", Format: "toml", Rel: ".codex/config.toml",
		Snippet: codexSnippet, Merge: codexMerge, Wired: codexWired},
	{Name: "gemini", Title: "Gemini CLI", Format: "json", Rel: ".gemini/settings.json",
		Snippet: jsonSnippet("mcpServers", geminiEntry), Merge: jsonMerge("mcpServers", geminiEntry), Wired: jsonWired("mcpServers")},
	{Name: "goose", Title: "goose", Format: "yaml", Rel: ".config/goose/config.yaml",
		Snippet: gooseSnippet, Merge: gooseMerge, Wired: gooseWired},
	{Name: "opencode", Title: "opencode", Format: "json", Rel: ".config/opencode/opencode.json",
		Snippet: jsonSnippet("mcp", opencodeEntry), Merge: jsonMerge("mcp", opencodeEntry), Wired: jsonWired("mcp")},
}

// Lookup finds a harness by name.
func Lookup(name string) (*Harness, bool) {
	for _, h := range Harnesses {
		if h.Name == name {
			return h, true
		}
	}
	return nil, false
}

// Names lists the harness names.
func Names() []string {
	var n []string
	for _, h := range Harnesses {
		n = append(n, h.Name)
	}
	return n
}

func envOrEmpty(s Server) map[string]string {
	if s.Env == nil {
		return map[string]string{}
	}
	return s.Env
}

// Claude Code's user scope (`claude mcp add --scope user`) lives in ~/.claude.json.
func claudeEntry(s Server) any {
	return map[string]any{"type": "stdio", "command": s.Command, "args": s.Args, "env": envOrEmpty(s)}
}

func geminiEntry(s Server) any {
	// Gemini's timeout is in milliseconds (its default, 600 000, cuts email_wait off).
	return map[string]any{"command": s.Command, "args": s.Args, "env": envOrEmpty(s), "trust": false, "timeout": ToolTimeoutSecs * 1000}
}

func opencodeEntry(s Server) any {
	return map[string]any{"type": "local", "command": append([]string{s.Command}, s.Args...), "enabled": true, "environment": envOrEmpty(s)}
}

func jsonSnippet(key string, entry func(Server) any) func(Server) ([]byte, error) {
	return func(s Server) ([]byte, error) {
		doc := map[string]any{key: map[string]any{ServerName: entry(s)}}
		if key == "mcp" {
			doc["$schema"] = "https://opencode.ai/config.json"
		}
		return marshalJSON(doc)
	}
}

func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func parseJSONObject(existing []byte) (map[string]any, error) {
	doc := map[string]any{}
	if len(bytes.TrimSpace(existing)) == 0 {
		return doc, nil
	}
	dec := json.NewDecoder(bytes.NewReader(existing))
	dec.UseNumber() // keep numbers exactly as they were
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("not plain JSON (%v): add the snippet from --print by hand", err)
	}
	if doc == nil {
		doc = map[string]any{}
	}
	return doc, nil
}

func jsonMerge(key string, entry func(Server) any) func([]byte, Server) ([]byte, error) {
	return func(existing []byte, s Server) ([]byte, error) {
		doc, err := parseJSONObject(existing)
		if err != nil {
			return nil, err
		}
		servers, ok := doc[key].(map[string]any)
		if doc[key] != nil && !ok {
			return nil, fmt.Errorf("%q is not an object: add the snippet from --print by hand", key)
		}
		if servers == nil {
			servers = map[string]any{}
		}
		if s.Command == "" {
			if _, ok := servers[ServerName]; !ok {
				return existing, nil
			}
			delete(servers, ServerName)
		} else {
			servers[ServerName] = entry(s)
			if _, ok := doc["$schema"]; key == "mcp" && !ok {
				doc["$schema"] = "https://opencode.ai/config.json"
			}
		}
		doc[key] = servers
		return marshalJSON(doc)
	}
}

func jsonWired(key string) func([]byte) (bool, string) {
	return func(existing []byte) (bool, string) {
		doc, err := parseJSONObject(existing)
		if err != nil {
			return false, ""
		}
		servers, _ := doc[key].(map[string]any)
		e, ok := servers[ServerName].(map[string]any)
		if !ok {
			return false, ""
		}
		switch c := e["command"].(type) {
		case string:
			return true, c
		case []any:
			var parts []string
			for _, p := range c {
				parts = append(parts, fmt.Sprint(p))
			}
			return true, strings.Join(parts, " ")
		}
		return true, ""
	}
}

// Codex: [mcp_servers.mailctl] in ~/.codex/config.toml. The file is edited as
// text so the operator's comments and ordering survive; the result is parsed
// to prove it is still valid TOML.
const codexHeader = "[mcp_servers." + ServerName + "]"

// quote writes s as a JSON string, which is also a TOML basic string and a
// YAML double-quoted scalar: JSON's escapes are valid in both.
func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// quoteList quotes each of ss and separates them with commas, the inside of
// a TOML array or a YAML flow sequence.
func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = quote(s)
	}
	return strings.Join(q, ", ")
}

func codexSnippet(s Server) ([]byte, error) {
	var b strings.Builder
	b.WriteString(codexHeader + "\n")
	fmt.Fprintf(&b, "command = %s\n", quote(s.Command))
	fmt.Fprintf(&b, "args = [%s]\n", quoteList(s.Args))
	// Codex's default tool timeout (60 s) cuts email_wait off.
	fmt.Fprintf(&b, "tool_timeout_sec = %d\n", ToolTimeoutSecs)
	if len(s.Env) > 0 {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(s.Env)) {
			kv = append(kv, quote(k)+" = "+quote(s.Env[k]))
		}
		fmt.Fprintf(&b, "env = { %s }\n", strings.Join(kv, ", "))
	}
	return []byte(b.String()), nil
}

func isTableHeader(line string) bool {
	t := strings.TrimSpace(line)
	return strings.HasPrefix(t, "[")
}

func codexMerge(existing []byte, s Server) ([]byte, error) {
	if _, err := toml.Decode(string(existing), new(map[string]any)); err != nil {
		return nil, fmt.Errorf("not valid TOML (%v): fix it or add the snippet from --print by hand", err)
	}
	var snippet []byte
	if s.Command != "" {
		snippet, _ = codexSnippet(s)
	}
	text, replaced := codexWithout(existing, snippet)
	if !replaced {
		if s.Command == "" {
			return existing, nil
		}
		text = appendBlock(text, snippet)
	}
	var check map[string]any
	if _, err := toml.Decode(text, &check); err != nil {
		return nil, fmt.Errorf("merging into the Codex config would break it (%v): add the snippet from --print by hand", err)
	}
	if wired, cmd := codexEntry(check); cmd != s.Command || (s.Command == "" && wired) {
		return nil, errors.New("merging into the Codex config did not take: add the snippet from --print by hand")
	}
	return []byte(text), nil
}

// codexWithout returns the config with our table (and any stray sub-table
// of ours) taken out, and snippet in our table's place if it had one.
func codexWithout(existing, snippet []byte) (text string, replaced bool) {
	ours := "[mcp_servers." + ServerName + "."
	lines := strings.SplitAfter(string(existing), "\n")
	var out strings.Builder
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		switch {
		case line == codexHeader:
			out.Write(snippet)
			replaced = true
			// Skip the old table up to the next header (sub-tables such as
			// [mcp_servers.mailctl.env] belong to it and go too).
			for i+1 < len(lines) && !(isTableHeader(lines[i+1]) && !strings.HasPrefix(strings.TrimSpace(lines[i+1]), ours)) {
				i++
			}
		case strings.HasPrefix(line, ours):
			// A stray sub-table of ours: drop it with its keys.
			for i+1 < len(lines) && !isTableHeader(lines[i+1]) {
				i++
			}
		default:
			out.WriteString(lines[i])
		}
	}
	return out.String(), replaced
}

// appendBlock appends a block to a config, one blank line after its end.
func appendBlock(text string, block []byte) string {
	if text != "" {
		text = strings.TrimSuffix(text, "\n") + "\n\n"
	}
	return text + string(block)
}

func codexWired(existing []byte) (bool, string) {
	var doc map[string]any
	if _, err := toml.Decode(string(existing), &doc); err != nil {
		return false, ""
	}
	return codexEntry(doc)
}

// codexEntry finds [mcp_servers.mailctl] in a decoded Codex config. TOML keys
// are case-sensitive, so the lookup is exact: decoding into a struct would
// match tags case-insensitively and let "[MCP_servers.mailctl]" compete with
// the real table, the winner depending on map order.
func codexEntry(doc map[string]any) (wired bool, command string) {
	servers, _ := doc["mcp_servers"].(map[string]any)
	entry, ok := servers[ServerName].(map[string]any)
	if !ok {
		return false, ""
	}
	command, _ = entry["command"].(string)
	return true, command
}

// BackupSuffix names the copy of a harness config taken before mailctl first
// changes it.
const BackupSuffix = ".before-mailctl"

// writeAtomic replaces path with data, keeping the existing file's mode (new
// files are 0600: harness configs can hold API keys) and a one-time backup.
func writeAtomic(path string, data []byte, backup bool) error {
	mode := fs.FileMode(0o600)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
		bak := path + BackupSuffix
		if _, err := os.Stat(bak); backup && errors.Is(err, fs.ErrNotExist) {
			if old, err := safeio.ReadInput(path, MaxConfigBytes); err == nil {
				if err := safeio.WriteFile(bak, old, safeio.Options{Perm: mode, NoReplace: true}); err != nil {
					return fmt.Errorf("backing up %s: %w", path, err)
				}
			}
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return safeio.WriteFile(path, data, safeio.Options{Perm: mode})
}

// MaxConfigBytes bounds a harness config mailctl reads. The agent writes
// these files: one may have been swapped for a FIFO or a link to a device,
// which is refused rather than waited on or read forever.
const MaxConfigBytes = 64 << 20

// Setup wires s into h's config under home. It reports the file and whether
// it changed.
func Setup(home string, h *Harness, s Server) (string, bool, error) {
	path := h.Path(home)
	existing, err := safeio.ReadInput(path, MaxConfigBytes)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return path, false, err
	}
	merged, err := h.Merge(existing, s)
	if err != nil {
		return path, false, fmt.Errorf("%s: %w", path, err)
	}
	if bytes.Equal(merged, existing) {
		return path, false, nil
	}
	// A config kept elsewhere and linked in (dotfiles, stow, home-manager)
	// is changed where it is: replacing the link with a file would leave
	// the user's own copy stale and the link gone.
	target := path
	if r, err := filepath.EvalSymlinks(path); err == nil {
		target = r
	}
	// The backup is the file as it was before mailctl. A file that holds
	// nothing but mailctl's entry is the one mailctl made (no file was
	// there): copying it, at a setup again or a remove, would keep
	// mailctl's entry under the name that promises the original.
	return path, true, writeAtomic(target, merged, !onlyMailctls(h, existing))
}

// onlyMailctls reports whether existing holds mailctl's entry and nothing
// else: without the entry, it is what is left of a file mailctl made.
func onlyMailctls(h *Harness, existing []byte) bool {
	if wired, _ := h.Wired(existing); !wired {
		return false
	}
	rest, err := h.Merge(existing, Server{})
	if err != nil {
		return false
	}
	made, err := h.Merge(nil, Server{Command: "mailctl", Args: []string{"mcp"}})
	if err != nil {
		return false
	}
	skeleton, err := h.Merge(made, Server{})
	return err == nil && bytes.Equal(rest, skeleton)
}

// Backup is the copy of h's config under home taken before mailctl first
// changed it, if there is one: none when mailctl made the file.
func Backup(home string, h *Harness) (string, bool) {
	target := h.Path(home)
	if r, err := filepath.EvalSymlinks(target); err == nil {
		target = r // Setup backs up a linked config beside what it links to
	}
	bak := target + BackupSuffix
	_, err := os.Lstat(bak)
	return bak, err == nil
}

// Remove takes mailctl's entry out of h's config under home, keeping the
// rest. It reports the file and whether it changed; a missing file or entry
// changes nothing.
func Remove(home string, h *Harness) (string, bool, error) {
	path := h.Path(home)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return path, false, nil
	}
	return Setup(home, h, Server{})
}

// Status is one row of `agents list`.
type Status struct {
	Harness string `json:"harness"`
	Path    string `json:"path"`
	Exists  bool   `json:"config_exists"`
	Wired   bool   `json:"wired"`
	Command string `json:"command,omitempty"`
}

// List reports, for every harness, whether its config under home wires mailctl.
func List(home string) []Status {
	var out []Status
	for _, h := range Harnesses {
		st := Status{Harness: h.Name, Path: h.Path(home)}
		if data, err := safeio.ReadInput(st.Path, MaxConfigBytes); err == nil {
			st.Exists = true
			st.Wired, st.Command = h.Wired(data)
		}
		out = append(out, st)
	}
	return out
}
