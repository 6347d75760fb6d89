package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/mailctl/mailctl/daemon/agentcfg"
	"github.com/mailctl/mailctl/mcpshim"
	"github.com/mailctl/mailctl/protocol"
)

func init() {
	register(&command{name: "agents", group: "agent", summary: "wire `mailctl mcp` into agent harnesses; list what is wired", run: cmdAgents})
}

var agentsHelp = `Usage: mailctl agents SUBCOMMAND [flags]

  setup [HARNESS...] [--print] [--socket PATH]   wire mailctl into each harness's
                                                 own config (default: those installed)
  remove [HARNESS...]                            take mailctl out of each harness's
                                                 config (default: every wired one)
  list [--json]                                  which harnesses are wired

Harnesses: ` + strings.Join(agentcfg.Names(), ", ") + `

setup runs as the agent's user, never as root: it edits files in your home,
merging into existing configs (a copy of each original is kept next to it with
the suffix ` + agentcfg.BackupSuffix + `), and writes a primer, ` + agentcfg.PrimerName + `, that
teaches an agent the mail tools, the trust rules and the Markdown store.
--print only prints the snippets and writes nothing. Claude Code is wired in
user scope (~/.claude.json, as claude mcp add --scope user). Codex, Gemini and
goose get a tool timeout of ` + fmt.Sprint(agentcfg.ToolTimeoutSecs) + ` s, above email_wait's 600 s.`

func cmdAgents(args []string) int {
	return dispatch("agents", agentsHelp, args, map[string]func([]string) int{
		"setup":  agentsSetup,
		"list":   agentsList,
		"ls":     agentsList,
		"remove": agentsRemove,
		"rm":     agentsRemove,
	})
}

// mcpServer is how harnesses should start the MCP server: this binary by its
// absolute path, so a harness with a minimal PATH still finds it.
func mcpServer(socket string) agentcfg.Server {
	self, err := os.Executable()
	if err == nil {
		if r, err := filepath.EvalSymlinks(self); err == nil {
			self = r
		}
	} else {
		self = "mailctl"
	}
	s := agentcfg.Server{Command: self, Args: []string{"mcp"}}
	if socket = cmp.Or(socket, os.Getenv("MAILCTL_SOCKET")); socket != "" {
		if abs, err := filepath.Abs(socket); err == nil {
			socket = abs
		}
		s.Env = map[string]string{"MAILCTL_SOCKET": socket}
	}
	return s
}

// goBuildDirs are where the go command keeps binaries it may delete: its
// build cache (`go env GOCACHE`, emptied by go clean -cache, where go run
// keeps what it builds) and the temporary work directories of go run
// ($GOTMPDIR, else the system's temporary directory).
func goBuildDirs(goEnv func(key string) string) []string {
	var dirs []string
	if c := goEnv("GOCACHE"); c != "" && c != "off" {
		dirs = append(dirs, c)
	}
	return append(dirs, cmp.Or(goEnv("GOTMPDIR"), os.TempDir()))
}

// goRunBuild reports whether path is a binary the go command may delete: one
// in its build cache, or the one go run builds in a go-build* work directory
// under its temporary directory (.../go-build*/bNNN/exe/NAME). A harness
// wired to it would fail once it is gone.
func goRunBuild(path string, goEnv func(key string) string) bool {
	path = filepath.Clean(path)
	for i, dir := range goBuildDirs(goEnv) {
		rel, err := filepath.Rel(filepath.Clean(dir), path)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			continue
		}
		if i == 0 && goEnv("GOCACHE") != "" && goEnv("GOCACHE") != "off" {
			return true // anything in the build cache
		}
		if strings.HasPrefix(strings.Split(rel, "/")[0], "go-build") && filepath.Base(filepath.Dir(path)) == "exe" {
			return true
		}
	}
	return false
}

// goCommand runs the go command with args and returns what it printed; a
// variable, so that a test can count its runs.
var goCommand = func(args ...string) ([]byte, error) { return exec.Command("go", args...).Output() }

// goEnvOnce returns what the go command says of a key agents setup needs
// (go env KEY), for the go command that would build this binary; the
// variable, or Go's default, when there is no go command. The go command
// runs once, for all of them (`go env -json`): each run of it may start
// go's telemetry process behind it.
func goEnvOnce(run func(args ...string) ([]byte, error)) func(key string) string {
	vars := sync.OnceValue(func() map[string]string {
		out, err := run("env", "-json", "GOCACHE", "GOTMPDIR", "GOBIN", "GOPATH")
		if err != nil {
			return nil
		}
		m := map[string]string{}
		if json.Unmarshal(out, &m) != nil {
			return nil
		}
		return m
	})
	return func(key string) string {
		if m := vars(); m != nil {
			return m[key]
		}
		if v := os.Getenv(key); v != "" {
			return v
		}
		switch key {
		case "GOCACHE":
			if d, err := os.UserCacheDir(); err == nil {
				return filepath.Join(d, "go-build")
			}
		case "GOPATH":
			if h, err := os.UserHomeDir(); err == nil {
				return filepath.Join(h, "go")
			}
		}
		return ""
	}
}

// installedPath is where `go install ./cmd/mailctl` puts the binary.
func installedPath(goEnv func(key string) string) string {
	if b := goEnv("GOBIN"); b != "" {
		return filepath.Join(b, "mailctl")
	}
	gopath, _, _ := strings.Cut(goEnv("GOPATH"), string(os.PathListSeparator))
	return filepath.Join(cmp.Or(gopath, "$HOME/go"), "bin", "mailctl")
}

// servedTools are the tools the wired server serves, asked of the server
// itself: harnesses start `mailctl mcp` without --tools, so its default set,
// and the primer names no tool an agent would call in vain.
func servedTools() []string {
	s := mcpshim.New(mcpshim.Options{})
	defer s.Close()
	return s.Tools()
}

func configHome(home string) string {
	if x := os.Getenv("XDG_CONFIG_HOME"); x != "" {
		return x
	}
	return filepath.Join(home, ".config")
}

func agentsSetup(args []string) int {
	cf := newClientFlags("agents setup", "agents setup [HARNESS...] [--print] [--socket PATH]",
		`Wires `+"`mailctl mcp`"+` into each harness named (default: those installed) in the
harness's own config, merging into an existing file and keeping a copy of the
original next to it with the suffix `+agentcfg.BackupSuffix+`, and writes the primer
`+agentcfg.PrimerName+`. Run it as the agent's user, never as root. --print only
prints the snippets and writes nothing.

Harnesses: `+strings.Join(agentcfg.Names(), ", "))
	printOnly := cf.fs.Bool("print", false, "print each harness's snippet instead of writing it")
	if code, ok := parseFlags(cf.fs, args); !ok {
		return code
	}
	hs, err := setupHarnesses(cf.fs.Args(), *printOnly)
	if err != nil {
		return usageError(cf.fs, "%v", err)
	}
	if !*printOnly && os.Geteuid() == 0 {
		fmt.Fprintln(stderr, "mailctl agents setup: run as the agent's user, not root (agents act as their own user); --print shows the snippets")
		return 4
	}
	srv := mcpServer(cf.socket)
	goEnv := goEnvOnce(goCommand)
	if goRunBuild(srv.Command, goEnv) {
		again := strings.Join(append([]string{"agents", "setup"}, args...), " ")
		return failure(cf.fs, fmt.Errorf("this binary (%s) is a `go run` build, which the go command deletes (go clean -cache, or when it exits); a harness wired to it would fail. Install it and run the installed one:\n\n    go install ./cmd/mailctl && %s\n\nor run the copy mailctl dev keeps: .mailctl-dev/bin/mailctl %s",
			srv.Command, protocol.ShellQuote(installedPath(goEnv))+" "+again, again))
	}
	if *printOnly {
		return printSnippets(hs, srv)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return failure(cf.fs, err)
	}
	failed := false
	for _, h := range hs {
		path, changed, err := agentcfg.Setup(home, h, srv)
		switch {
		case err != nil:
			fmt.Fprintf(stderr, "  %-12s %v\n", h.Name, err)
			failed = true
		case changed:
			fmt.Fprintf(stdout, "  %-12s wired in %s\n", h.Name, path)
		default:
			fmt.Fprintf(stdout, "  %-12s already wired in %s\n", h.Name, path)
		}
	}
	primer, err := agentcfg.WritePrimer(configHome(home), servedTools())
	if err != nil {
		return failure(cf.fs, fmt.Errorf("writing the primer: %w", err))
	}
	fmt.Fprintf(stdout, "\nPrimer for your agents: %s\nPoint their instructions at it, e.g. add the line `@%s` to ~/.claude/CLAUDE.md,\nor paste it into AGENTS.md / GEMINI.md / .goosehints.\n", primer, primer)
	if failed {
		return 1
	}
	return 0
}

// setupHarnesses are the harnesses named, or with none named all of them for
// --print and otherwise those this user has.
func setupHarnesses(names []string, printOnly bool) ([]*agentcfg.Harness, error) {
	if len(names) == 0 && printOnly {
		names = agentcfg.Names()
	}
	if len(names) == 0 {
		if names = installedHarnesses(); len(names) == 0 {
			return nil, fmt.Errorf("no agent harness found in your home; name one: %s", strings.Join(agentcfg.Names(), ", "))
		}
	}
	var hs []*agentcfg.Harness
	for _, n := range names {
		h, ok := agentcfg.Lookup(n)
		if !ok {
			return nil, fmt.Errorf("unknown harness %q (known: %s)", n, strings.Join(agentcfg.Names(), ", "))
		}
		hs = append(hs, h)
	}
	return hs, nil
}

// installedHarnesses names the harnesses this user has: their config
// directory (or file, when it lives in the home itself) exists.
func installedHarnesses() []string {
	var names []string
	home, _ := os.UserHomeDir()
	for _, h := range agentcfg.Harnesses {
		if _, err := os.Stat(filepath.Dir(h.Path(home))); err == nil && filepath.Dir(h.Path(home)) != home {
			names = append(names, h.Name)
		} else if _, err := os.Stat(h.Path(home)); err == nil {
			names = append(names, h.Name)
		}
	}
	return names
}

// printSnippets writes each harness's snippet to stdout, headed by where it
// goes when there are several.
func printSnippets(hs []*agentcfg.Harness, srv agentcfg.Server) int {
	for i, h := range hs {
		doc, err := h.Snippet(srv)
		if err != nil {
			fmt.Fprintf(stderr, "mailctl agents: %s: %v\n", h.Name, err)
			return 1
		}
		if len(hs) > 1 {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			fmt.Fprintf(stdout, "# %s: merge into ~/%s\n", h.Title, h.Rel)
		}
		stdout.Write(doc)
	}
	return 0
}

func agentsRemove(args []string) int {
	cf := newClientFlags("agents remove", "agents remove [HARNESS...]",
		`Takes mailctl out of each harness named (default: every wired one), keeping
everything else in those files.

Harnesses: `+strings.Join(agentcfg.Names(), ", "))
	if code, ok := parseFlags(cf.fs, args); !ok {
		return code
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return failure(cf.fs, err)
	}
	names := cf.fs.Args()
	if len(names) == 0 {
		for _, r := range agentcfg.List(home) {
			if r.Wired {
				names = append(names, r.Harness)
			}
		}
		if len(names) == 0 {
			fmt.Fprintln(stdout, "no harness wires mailctl")
			return 0
		}
	}
	failed := false
	for _, n := range names {
		h, ok := agentcfg.Lookup(n)
		if !ok {
			return usageError(cf.fs, "unknown harness %q (known: %s)", n, strings.Join(agentcfg.Names(), ", "))
		}
		path, changed, err := agentcfg.Remove(home, h)
		switch {
		case err != nil:
			fmt.Fprintf(stderr, "  %-12s %v\n", h.Name, err)
			failed = true
		case changed:
			if bak, ok := agentcfg.Backup(home, h); ok {
				fmt.Fprintf(stdout, "  %-12s removed from %s (the original is kept as %s)\n", h.Name, path, bak)
			} else {
				fmt.Fprintf(stdout, "  %-12s removed from %s\n", h.Name, path)
			}
		default:
			fmt.Fprintf(stdout, "  %-12s not wired in %s\n", h.Name, path)
		}
	}
	if failed {
		return 1
	}
	return 0
}

func agentsList(args []string) int {
	cf := newClientFlags("agents list", "agents list [--json]", "Shows which agent harnesses start `mailctl mcp`.").withJSON()
	if code, ok := parseFlags(cf.fs, args); !ok {
		return code
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return failure(cf.fs, err)
	}
	rows := agentcfg.List(home)
	if cf.json {
		return printJSON(rows)
	}
	tw := table("HARNESS\tWIRED\tCONFIG\tCOMMAND")
	for _, r := range rows {
		state := "no"
		if r.Wired {
			state = "yes"
		} else if !r.Exists {
			state = "no (no config)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Harness, state, r.Path, r.Command)
	}
	tw.Flush()
	return 0
}
