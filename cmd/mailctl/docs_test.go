package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// docCommands returns every `mailctl ...` command line in the fenced blocks of
// a doc page, continuation lines joined, comments dropped.
func docCommands(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("(?s)```[a-z]*\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		text := strings.ReplaceAll(m[1], "\\\n", " ")
		for _, l := range strings.Split(text, "\n") {
			if i := strings.Index(l, " #"); i >= 0 {
				l = l[:i]
			}
			f := strings.Fields(l)
			for i, w := range f {
				if w == "mailctl" && (i == 0 || f[i-1] == "sudo" || f[i-1] == "-H" || f[i-1] == "--" || strings.HasPrefix(f[i-1], "-") || (i >= 2 && f[i-2] == "-u")) {
					if i+1 < len(f) && !strings.HasPrefix(f[i+1], "\"") {
						out = append(out, strings.Join(f[i:], " "))
					}
					break
				}
			}
		}
	}
	return out
}

// TestDocsCommandsAgreeWithTheBinary: every mailctl command docs/setup.md
// and docs/mcp.md show names a command, subcommand and flags the binary has.
func TestDocsCommandsAgreeWithTheBinary(t *testing.T) {
	checked := 0
	for _, page := range []string{"../../docs/setup.md", "../../docs/mcp.md", "../../README.md"} {
		for _, line := range docCommands(t, page) {
			f := strings.Fields(line)[1:]
			c, ok := commands[f[0]]
			if !ok {
				t.Errorf("%s: %q: no command %q", page, line, f[0])
				continue
			}
			help, _ := capture(func(*os.File) { c.run([]string{"--help"}) })
			args := f[1:]
			if subs := subcommands(help); subs != nil {
				if len(args) == 0 || strings.HasPrefix(args[0], "-") {
					t.Errorf("%s: %q: %s needs a subcommand", page, line, f[0])
					continue
				}
				found := false
				for _, s := range subs {
					found = found || s == args[0]
				}
				if !found {
					t.Errorf("%s: %q: %s has no subcommand %q (has %v)", page, line, f[0], args[0], subs)
					continue
				}
				help, _ = capture(func(*os.File) { c.run([]string{args[0], "--help"}) })
				args = args[1:]
			}
			for _, a := range args {
				if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
					continue
				}
				name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
				if !regexp.MustCompile(`(?m)^\s+-{1,2}` + regexp.QuoteMeta(name) + `\b`).MatchString(help) {
					t.Errorf("%s: %q: flag %s is not in `mailctl %s --help`", page, line, a, strings.Join(f[:len(f)-len(args)], " "))
				}
			}
			checked++
		}
	}
	if checked < 10 {
		t.Fatalf("only %d commands found in the docs: the extraction is broken", checked)
	}
}

// TestDocsCommandsRun runs, against a dev daemon, the commands of
// docs/setup.md and docs/mcp.md that need no root, no systemd and no
// harness installed, exactly as the page writes them (without sudo), and
// fails when one does not exit 0. The root-only lines (setup, dkim, doctor
// on the host) are walked under systemd by packaging/test-systemd.sh.
func TestDocsCommandsRun(t *testing.T) {
	dir := t.TempDir()
	_, _, sock := startDev(t, dir)
	home := t.TempDir()
	env := []string{"MAILCTL_SOCKET=" + sock, "HOME=" + home}
	ran := map[string]bool{}
	for _, page := range []string{"../../docs/setup.md", "../../docs/mcp.md"} {
		for _, line := range docCommands(t, page) {
			if strings.ContainsAny(line, "[|<…") {
				continue // a synopsis, not a command line
			}
			f := strings.Fields(line)[1:]
			key := strings.Join(f[:min(2, len(f))], " ")
			switch {
			case key == "mailboxes create", key == "mailboxes show", key == "agents list", key == "doctor":
			case key == "agents setup" && os.Geteuid() != 0:
			case f[0] == "mcp" && !strings.Contains(line, "--http"):
			default:
				t.Logf("%s: not run on one machine: %s", page, line)
				continue
			}
			out, e, code := mailctl(t, env, f...)
			if code != 0 {
				t.Errorf("%s: `%s` exit %d:\n%s%s", page, line, code, out, e)
			}
			ran[key] = true
		}
	}
	for _, want := range []string{"mailboxes create", "mailboxes show", "agents list", "doctor"} {
		if !ran[want] {
			t.Errorf("no `mailctl %s` line found in the docs: the extraction is broken", want)
		}
	}
}

// Every example line of docs/cli.md (the commands' own help) runs as written,
// in the order of the page, in one shell (so the ids examples keep in
// variables reach the lines after them), against a dev daemon whose mailbox
// is agent, with mailctl on PATH: each exits 0, but for mail wait, which
// nothing here sends to and which ends at its (shortened) timeout with 75.
// No example names an id that does not exist: examples make what they use.
func TestCLIReferenceExamplesRun(t *testing.T) {
	raw, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	_, _, sock := startDev(t, t.TempDir())
	self, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := os.Symlink(self, filepath.Join(bin, "mailctl")); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "MAILCTL_AS_BINARY=1", "MAILCTL_SOCKET="+sock, "PATH="+bin+":"+os.Getenv("PATH"),
		"HOME="+t.TempDir(), "EDITOR=true")
	example := regexp.MustCompile(`(?m)^    ((?:[A-Z]+=\$\()?mailctl .*)$`)
	madeUp := regexp.MustCompile(`\b20\d\d-\d\d-\d\d-\d{6}`)
	shorter := regexp.MustCompile(`--timeout \S+`)
	// One shell runs every line and reports each line's exit status.
	var script strings.Builder
	var lines []string
	for _, m := range example.FindAllStringSubmatch(string(raw), -1) {
		line := m[1]
		if madeUp.MatchString(line) {
			t.Errorf("docs/cli.md example `%s` names a made-up id: make it first and keep it in a variable", line)
		}
		fmt.Fprintf(&script, "%s\necho \"@@ %d $?\"\n", shorter.ReplaceAllString(line, "--timeout 1s"), len(lines))
		lines = append(lines, line)
	}
	cmd := exec.Command("/bin/sh", "-c", script.String())
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the examples' shell: %v\n%s", err, out)
	}
	status := regexp.MustCompile(`(?m)^@@ (\d+) (\d+)$`)
	results := status.FindAllStringSubmatch(string(out), -1)
	if len(results) != len(lines) {
		t.Fatalf("%d of %d examples reported:\n%s", len(results), len(lines), out)
	}
	for _, r := range results {
		i, _ := strconv.Atoi(r[1])
		code, _ := strconv.Atoi(r[2])
		want := 0
		if strings.HasPrefix(lines[i], "mailctl mail wait") {
			want = 75
		}
		if code != want {
			t.Errorf("docs/cli.md example `%s` exits %d, want %d; the shell's output:\n%s", lines[i], code, want, out)
		}
	}
	for _, want := range []string{"mailctl mail list", "mailctl drafts create", "mailctl send --from", "mailctl queue reschedule", "ID=$(mailctl mail list"} {
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, want) }) {
			t.Errorf("docs/cli.md has no `%s` example: the help lost it or the extraction is broken", want)
		}
	}
	t.Logf("ran %d examples in order", len(lines))
}
