package main

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/testusers"
)

// docPages are the pages whose mailctl commands must agree with the binary:
// README.md, every page under docs/ and every other Markdown page of the
// tree (protocol/README.md), but for testdata (where .md files are stored
// mail), node_modules and hidden directories (a dev daemon's .mailctl-dev).
func docPages(t *testing.T) []string {
	t.Helper()
	var pages []string
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != "../.." && (name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".md") {
			pages = append(pages, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pages
}

// commandHelp returns the --help of a command, or of one of its
// subcommands, once per name.
type commandHelp map[string]string

func (h commandHelp) of(cmd, sub string) string {
	key := cmd + " " + sub
	if s, ok := h[key]; ok {
		return s
	}
	args := []string{"--help"}
	if sub != "" {
		args = []string{sub, "--help"}
	}
	s, err := capture(func(*os.File) { commands[cmd].run(args) })
	if err != nil {
		s = err.Error()
	}
	h[key] = s
	return s
}

// helpFlags returns the flags a --help lists under "Flags:".
func helpFlags(help string) []string {
	if _, after, ok := strings.Cut(help, "\nFlags:\n"); ok {
		help = after
	}
	return firstGroups(flagLineRE, help)
}

// isPlaceholder says whether a word stands for a command rather than naming
// one: an ellipsis or an upper-case placeholder (COMMAND).
func isPlaceholder(w string) bool {
	return w == "…" || w == "..." || (w != "" && strings.ToUpper(w) == w && strings.ToLower(w) != w)
}

// docCommandProblems says where c names a command, a subcommand or a flag
// the binary does not have. A command alone (`mailctl queue`) names the
// command; a synopsis's brackets are read past (`[--json]`); the words that
// are not flags are not checked, nor anything after `--`.
func docCommandProblems(c docCommand, help commandHelp) []string {
	var args []string
	var quoted []bool
	for _, w := range c.words {
		s := w.s
		if !w.quoted {
			s = strings.Trim(s, "[]")
		}
		if s != "" {
			args, quoted = append(args, s), append(quoted, w.quoted)
		}
	}
	if len(args) == 0 || isPlaceholder(args[0]) {
		return nil
	}
	name := args[0]
	switch name {
	case "-h", "--help", "--version", "-v":
		return nil
	case "help":
		if len(args) > 1 && commands[args[1]] == nil && !isPlaceholder(args[1]) {
			return []string{fmt.Sprintf("no command %q", args[1])}
		}
		return nil
	}
	cmd, ok := commands[name]
	if !ok {
		if s := suggest(name); s != "" {
			return []string{fmt.Sprintf("no command %q (mailctl suggests %q)", name, s)}
		}
		return []string{fmt.Sprintf("no command %q", name)}
	}
	h := help.of(cmd.name, "")
	args, quoted = args[1:], quoted[1:]
	isFlag := func(i int) bool {
		return !quoted[i] && len(args[i]) > 1 && args[i][0] == '-' && args[i] != "--"
	}
	if subs := subcommands(h); subs != nil && len(args) > 0 {
		switch {
		case isPlaceholder(args[0]):
			return nil
		case isFlag(0) && args[0] != "--help" && args[0] != "-h":
			return []string{fmt.Sprintf("mailctl %s takes a subcommand before its flags (it has %s)", name, strings.Join(subs, ", "))}
		case !isFlag(0):
			if !slices.Contains(subs, args[0]) {
				return []string{fmt.Sprintf("mailctl %s has no subcommand %q (it has %s)", name, args[0], strings.Join(subs, ", "))}
			}
			name += " " + args[0]
			h = help.of(cmd.name, args[0])
			args, quoted = args[1:], quoted[1:]
		}
	}
	flags := helpFlags(h)
	var problems []string
	for i, a := range args {
		if a == "--" && !quoted[i] {
			break
		}
		if !isFlag(i) {
			continue
		}
		for _, alt := range strings.Split(a, "|") {
			if !strings.HasPrefix(alt, "-") {
				continue
			}
			f, _, _ := strings.Cut(strings.TrimLeft(alt, "-"), "=")
			if f != "h" && f != "help" && !slices.Contains(flags, f) {
				problems = append(problems, fmt.Sprintf("flag %s is not in `mailctl %s --help` (it has --%s)", alt, name, strings.Join(flags, ", --")))
			}
		}
	}
	return problems
}

// TestDocsCommandsAgreeWithTheBinary: every mailctl command that README.md,
// the pages under docs/ and the tree's other pages (docPages) show, by the
// rule on docCommand, names a
// command, a subcommand and flags the binary has, as the commands' own
// --help lists them (no daemon is needed). A flag renamed, a command
// removed or a subcommand misspelt on a page fails here.
func TestDocsCommandsAgreeWithTheBinary(t *testing.T) {
	help := commandHelp{}
	perPage := map[string]int{}
	for _, page := range docPages(t) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(filepath.ToSlash(page), "../../")
		n, problems := docPageProblems(name, string(b), help)
		for _, p := range problems {
			t.Error(p)
		}
		perPage[name] = n
	}
	// The pages that teach the commands must yield them, or the extraction
	// is broken and this test checks nothing.
	for _, page := range []string{"README.md", "docs/setup.md", "docs/mcp.md", "docs/operations.md", "docs/outbound.md", "docs/hooks.md", "docs/dkim.md"} {
		if perPage[page] < 3 {
			t.Errorf("only %d mailctl commands found in %s: the extraction is broken", perPage[page], page)
		}
	}
}

// docPageProblems checks the Markdown text of page as
// TestDocsCommandsAgreeWithTheBinary does: it returns how many mailctl
// commands the page shows and what is wrong with them, each problem as
// "page:line: `command`: problem".
func docPageProblems(page, text string, help commandHelp) (int, []string) {
	problems := unfencedCommands(page, text)
	cs := docCommandsIn(page, text)
	for _, c := range cs {
		for _, p := range docCommandProblems(c, help) {
			problems = append(problems, fmt.Sprintf("%s: `%s`: %s", c.where, c.text, p))
		}
	}
	return len(cs), problems
}

// TestDocPageIndentedCodeBlock: a command in an indented code block, which
// the extraction does not read, fails the page; four spaces that continue a
// paragraph or a list item are not a code block and pass.
func TestDocPageIndentedCodeBlock(t *testing.T) {
	help := commandHelp{}
	for _, tc := range []struct {
		name, page string
		want       string // a part of the one problem, or "" for none
	}{
		{"indented block", "# Page\n\nCreate it:\n\n    mailctl mailboxes craete agent\n\nDone.\n",
			"page.md:5: an indented code block shows mailctl"},
		{"indented block after a list", "- one\n- two\n\n<!-- end -->\n\n    sudo mailctl doctor\n",
			"page.md:6: an indented code block shows mailctl"},
		{"indented block of output", "Text.\n\n    mailctl: daemon not running\n",
			"page.md:3: an indented code block shows mailctl"},
		{"paragraph continued", "Run this\n    mailctl mailboxes craete agent\nin prose.\n", ""},
		{"list item's paragraph", "1.  First:\n\n    the mailctl daemon answers.\n", ""},
		{"indented block of other code", "Text.\n\n    journalctl -u postfix\n", ""},
		{"fenced in a list item", "- Run:\n\n  ```sh\n  mailctl doctor\n  ```\n", ""},
	} {
		_, got := docPageProblems("page.md", tc.page, help)
		switch {
		case tc.want == "" && len(got) != 0:
			t.Errorf("%s: problems %q, want none", tc.name, got)
		case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
			t.Errorf("%s: problems %q, want one with %q", tc.name, got, tc.want)
		}
	}
}

// TestDocCommandProblems: the check finds a command, a subcommand and a flag
// the binary lacks, and passes what it has.
func TestDocCommandProblems(t *testing.T) {
	help := commandHelp{}
	for _, tc := range []struct {
		line string
		want string // a part of the one problem, or "" for none
	}{
		{"mailctl queue drop --domain gone.example --older-than 1d", ""},
		{"sudo mailctl dkim dns [--domain example.com]", ""},
		{"mailctl hooks list [--mailbox agent] [--json]", ""},
		{"mailctl mcp --http=127.0.0.1:8765", ""},
		{"mailctl queue", ""},
		{"mailctl dkim …", ""},
		{"mailctl send --from agent --subject \"-x\" --body-file r.md -- --not-a-flag", ""},
		{"mailctl send --from a [--text-only | --html-body-file F] [--json|--dry-run]", ""},
		{"mailctl mcp [--tools LIST|PRESET] [-v]", ""},
		{"mailctl send --from a [--text-only | --html-file F]", "flag --html-file is not in `mailctl send --help`"},
		{"mailctl send --from a [--json|--dryrun]", "flag --dryrun is not in `mailctl send --help`"},
		{"mailctl queue drop --al", "flag --al is not in `mailctl queue drop --help`"},
		{"mailctl mailboxes create agent --owners bob", "flag --owners is not in `mailctl mailboxes create --help`"},
		{"mailctl queue purge ID", `mailctl queue has no subcommand "purge"`},
		{"mailctl queue --json list", "mailctl queue takes a subcommand before its flags"},
		{"mailctl mailbox list", `no command "mailbox" (mailctl suggests "mailboxes")`},
		{"mailctl serve --debugging", "flag --debugging is not in `mailctl serve --help`"},
	} {
		cs := docCommandsIn("t.md", "`"+tc.line+"`")
		if len(cs) != 1 {
			t.Errorf("%s: %d commands found, want 1", tc.line, len(cs))
			continue
		}
		got := docCommandProblems(cs[0], help)
		switch {
		case tc.want == "" && len(got) != 0:
			t.Errorf("%s: problems %q, want none", tc.line, got)
		case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
			t.Errorf("%s: problems %q, want one with %q", tc.line, got, tc.want)
		}
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
	testusers.QuietGo(t, home)
	env := []string{"MAILCTL_SOCKET=" + sock, "HOME=" + home}
	ran := map[string]bool{}
	for _, page := range []string{"../../docs/setup.md", "../../docs/mcp.md"} {
		for _, c := range docCommands(t, page) {
			line, f := c.text, c.args()
			if !c.fenced || len(f) == 0 || strings.ContainsAny(strings.Join(f, " "), "[|<…") {
				continue // a span in prose or a synopsis, not a command line
			}
			key := strings.Join(f[:min(2, len(f))], " ")
			switch {
			case key == "mailboxes create", key == "mailboxes show", key == "agents list", key == "doctor":
			case key == "agents setup" && os.Geteuid() != 0:
			case f[0] == "mcp" && !slices.ContainsFunc(f, func(a string) bool { return strings.HasPrefix(a, "--http") }):
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
