package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/mailctl/mailctl/daemon/agentcfg"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/mcpshim"
	"github.com/mailctl/mailctl/protocol"
)

// TestAgentsPrint checks what `mailctl agents setup HARNESS --print` prints
// parses in the harness's format (YAML is checked in daemon/agentcfg).
func TestAgentsPrint(t *testing.T) {
	for _, tc := range []struct{ harness, format string }{
		{"claude-code", "json"}, {"gemini", "json"}, {"opencode", "json"}, {"codex", "toml"},
	} {
		var code int
		out, err := capture(func(*os.File) {
			code = agentsSetup([]string{tc.harness, "--print", "--socket", "/tmp/x.sock"})
		})
		if err != nil || code != 0 {
			t.Fatalf("%s: exit %d, %v: %s", tc.harness, code, err, out)
		}
		var m map[string]any
		switch tc.format {
		case "json":
			err = json.Unmarshal([]byte(out), &m)
		case "toml":
			_, err = toml.Decode(out, &m)
		}
		if err != nil {
			t.Errorf("%s --print is not %s: %v\n%s", tc.harness, tc.format, err, out)
		}
		if !strings.Contains(out, "/tmp/x.sock") {
			t.Errorf("%s --print lacks the socket:\n%s", tc.harness, out)
		}
	}
}

func TestAgentsSetupRefusesRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("checks the refusal for root")
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	var code int
	out, _ := capture(func(*os.File) { code = agentsSetup([]string{"codex"}) })
	if code == 0 || !strings.Contains(out, "run as the agent's user") {
		t.Errorf("root was not refused (exit %d): %s", code, out)
	}
	if _, err := os.Stat(home + "/.codex/config.toml"); err == nil {
		t.Error("a config was written for root")
	}
	// Refused means nothing ran first: a go command asked where this
	// binary came from would leave its telemetry in HOME.
	if entries, _ := os.ReadDir(home); len(entries) != 0 {
		t.Errorf("refusing root left %s in HOME", entries[0].Name())
	}
}

// TestAgentsRemove: `agents remove` with no names unwires every wired harness,
// and names a kept original only where there is one (gemini's config was
// the user's; codex's was made by mailctl, and its remove used to say an
// original was kept at a path that held none, or mailctl's own entry).
func TestAgentsRemove(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	testusers.QuietGo(t, home) // agents setup asks the go command
	gemini, _ := agentcfg.Lookup("gemini")
	os.MkdirAll(filepath.Dir(gemini.Path(home)), 0o700)
	if err := os.WriteFile(gemini.Path(home), []byte(`{"theme":"dark"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"gemini", "codex"} {
		h, _ := agentcfg.Lookup(n)
		if _, _, err := agentcfg.Setup(home, h, agentcfg.Server{Command: "/opt/mailctl", Args: []string{"mcp"}}); err != nil {
			t.Fatal(err)
		}
	}
	var code int
	out, _ := capture(func(*os.File) { code = agentsRemove(nil) })
	if code != 0 || !strings.Contains(out, "gemini") || !strings.Contains(out, "codex") {
		t.Fatalf("exit %d: %s", code, out)
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		kept := strings.Contains(l, "original is kept")
		if strings.Contains(l, "gemini") != kept {
			t.Errorf("remove says an original is kept (%v) where there is %s: %s", kept, map[bool]string{true: "one", false: "none"}[!kept], l)
		}
	}
	for _, r := range agentcfg.List(home) {
		if r.Wired {
			t.Errorf("%s still wired", r.Harness)
		}
	}
	out, _ = capture(func(*os.File) { code = agentsRemove(nil) })
	if code != 0 || !strings.Contains(out, "no harness wires mailctl") {
		t.Fatalf("second remove: exit %d: %s", code, out)
	}
}

// The primer lists every tool the MCP server has, each with a line.
func TestPrimerListsEveryTool(t *testing.T) {
	p := agentcfg.Primer(mcpshim.ToolNames())
	for _, n := range mcpshim.ToolNames() {
		if !strings.Contains(p, "- `"+n+"`: ") {
			t.Errorf("primer lacks tool %s with a description", n)
		}
	}
}

// `go run` binaries live where the go command deletes them: a temporary
// work directory gone when they exit, or the build cache, emptied by go
// clean -cache (where go run keeps what it builds since Go 1.24): agents
// setup refuses to wire one into a harness.
func TestGoRunBuildIsNotWired(t *testing.T) {
	env := map[string]string{"GOCACHE": "/home/u/.cache/go-build"}
	goEnv := func(k string) string { return env[k] }
	check := func(path string, want bool) {
		t.Helper()
		if got := goRunBuild(path, goEnv); got != want {
			t.Errorf("goRunBuild(%s) with %v = %v, want %v", path, env, got, want)
		}
	}
	tmp := os.TempDir()
	for path, want := range map[string]bool{
		tmp + "/go-build1234/b001/exe/mailctl":                true,
		"/home/u/.cache/go-build/1f/1fe3d2ad933af6-d/mailctl": true,
		"/home/u/.mailctl-dev/bin/mailctl":                    false,
		"/usr/bin/mailctl":                                    false,
		"/home/u/go/bin/mailctl":                              false,
		"/home/u/src/exe/mailctl":                             false,
		"/home/u/.cache/go-build-not/mailctl":                 false,
		tmp + "/mine/mailctl":                                 false,
		tmp + "/go-build1234/b001/mailctl.test":               false, // go test's own binary, running these tests
	} {
		check(path, want)
	}
	env["GOTMPDIR"] = "/var/tmp/gowork"
	check("/var/tmp/gowork/go-build99/b001/exe/mailctl", true)
	check(tmp+"/go-build1234/b001/exe/mailctl", false) // not where this go builds
	env["GOCACHE"] = "off"
	check("/home/u/.cache/go-build/1f/x-d/mailctl", false)
	if got := installedPath(func(k string) string { return map[string]string{"GOPATH": "/home/u/go:/opt/go"}[k] }); got != "/home/u/go/bin/mailctl" {
		t.Errorf("installedPath = %s", got)
	}
}

// The go command at hand: what `go run ./cmd/mailctl agents setup` is, is
// refused with the exact command that installs it and wires the installed
// binary.
func TestGoRunAgentsSetupIsRefused(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go not on PATH")
	}
	// A copy of this binary where go run keeps its builds: in the build
	// cache that `go env GOCACHE` names for the command.
	cache := t.TempDir()
	bin := filepath.Join(cache, "1f", "1fe3d2ad933af6-d", "mailctl")
	os.MkdirAll(filepath.Dir(bin), 0o755)
	if err := copyFile(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "agents", "setup", "claude-code", "--print")
	cmd.Env = append(os.Environ(), "MAILCTL_AS_BINARY=1", "GOCACHE="+cache)
	t.Setenv("GOCACHE", cache) // for installedPath below, as the command sees it
	out, err := cmd.CombinedOutput()
	want := "go install ./cmd/mailctl && " + protocol.ShellQuote(installedPath(goEnvOnce(goCommand))) + " agents setup claude-code --print"
	if err == nil || !strings.Contains(string(out), want) || strings.Contains(string(out), `"command"`) {
		t.Fatalf("agents setup from the build cache: %v\n%s\nwant %s", err, out, want)
	}
	// The other way out, dev's copy, wires the same harnesses: without
	// them it would wire every installed one instead.
	if dev := ".mailctl-dev/bin/mailctl agents setup claude-code --print"; !strings.Contains(string(out), dev) {
		t.Fatalf("agents setup from the build cache: the dev copy's line lacks the harness:\n%s\nwant %s", out, dev)
	}
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

// The primer agents setup writes names exactly the tools the wired server
// serves: not email_draft or email_purge, which `mailctl mcp` without
// --tools does not offer.
func TestPrimerNamesServedTools(t *testing.T) {
	served := servedTools()
	if slices.Contains(served, "email_draft") || slices.Contains(served, "email_purge") || !slices.Contains(served, "email_send") {
		t.Fatalf("served tools %v: want the default set", served)
	}
	p := agentcfg.Primer(served)
	for _, n := range mcpshim.ToolNames() {
		if named := strings.Contains(p, "`"+n+"`"); named != slices.Contains(served, n) {
			t.Errorf("primer names %s: %v, served: %v", n, named, !named)
		}
	}
	if p := agentcfg.Primer([]string{"email_read"}); strings.Contains(p, "mailbox_list") {
		t.Errorf("a primer for email_read alone names mailbox_list:\n%s", p)
	}
}

// TestPrimerDescribesTheStore: what the primer tells an agent to look for
// with ordinary file tools is what the store writes: the trusted line of a
// trusted message (it said `trusted = true`, a line no file holds: the
// verdict is the string "true") and every folder of a mailbox (it left out
// junk/).
func TestPrimerDescribesTheStore(t *testing.T) {
	dir := t.TempDir()
	_, _, sock := startDev(t, dir)
	env := []string{"MAILCTL_SOCKET=" + sock}
	if _, e, code := mailctl(t, env, "send", "--from", "agent", "--to", "agent@mailctl.test", "--subject", "to myself", "--body", "x"); code != 0 {
		t.Fatalf("send: exit %d: %s", code, e)
	}
	p := agentcfg.Primer(servedTools())
	m := regexp.MustCompile("`(trusted = [^`]+)`").FindStringSubmatch(p)
	if m == nil {
		t.Fatalf("the primer names no trusted line:\n%s", p)
	}
	box := filepath.Join(dir, "state", "mailboxes", "agent")
	files, _ := filepath.Glob(filepath.Join(box, "inbox", "*.md"))
	if len(files) != 1 {
		t.Fatalf("inbox holds %d messages, want the one sent", len(files))
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Split(string(b), "\n"), m[1]) {
		t.Errorf("the primer's %q is no line of a trusted message's file:\n%s", m[1], b)
	}
	_, store, _ := strings.Cut(p, "## The Markdown store")
	named := map[string]bool{}
	for _, f := range regexp.MustCompile("`([a-z]+)/`").FindAllStringSubmatch(store, -1) {
		named[f[1]] = true
	}
	entries, err := os.ReadDir(box)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && !named[e.Name()] {
			t.Errorf("the primer does not name the folder %s/", e.Name())
		}
		delete(named, e.Name())
	}
	for f := range named {
		t.Errorf("the primer names a folder %s/ that a mailbox does not have", f)
	}
}

// TestAgentsSetupRunsGoOnce: agents setup asked the go command for each
// setting it needed, up to six runs of go, each of which may start go's
// telemetry process behind it. It asks once, for all of them, and falls
// back to the environment and Go's defaults without a go command.
func TestAgentsSetupRunsGoOnce(t *testing.T) {
	runs := 0
	goEnv := goEnvOnce(func(args ...string) ([]byte, error) {
		runs++
		return []byte(`{"GOBIN": "", "GOCACHE": "/c/go-build", "GOPATH": "/g", "GOTMPDIR": ""}`), nil
	})
	if !goRunBuild("/c/go-build/ab/exe/mailctl", goEnv) || goRunBuild("/usr/bin/mailctl", goEnv) {
		t.Error("a binary in the build cache, or one outside it, was told wrong")
	}
	if got := installedPath(goEnv); got != "/g/bin/mailctl" {
		t.Errorf("installed path %s, want /g/bin/mailctl", got)
	}
	if runs != 1 {
		t.Errorf("the go command ran %d times, want once", runs)
	}

	t.Setenv("GOBIN", "/b")
	noGo := goEnvOnce(func(...string) ([]byte, error) { return nil, exec.ErrNotFound })
	if got := installedPath(noGo); got != "/b/mailctl" {
		t.Errorf("without a go command, installed path %s, want GOBIN's /b/mailctl", got)
	}
}
