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
// the binary does not have, or gives a number of positional arguments its
// usage synopsis does not take (argumentProblem). A command alone (`mailctl
// queue`) names the command; a synopsis's brackets are read past
// (`[--json]`); the words that are not flags are counted, not checked, and
// nothing after `--` is a flag.
func docCommandProblems(c docCommand, help commandHelp) []string {
	var args []string
	var quoted []bool
	var words []shWord // the words args come from, brackets and all
	for _, w := range c.words {
		s := w.s
		if !w.quoted {
			s = strings.Trim(s, "[]")
		}
		if s != "" {
			args, quoted, words = append(args, s), append(quoted, w.quoted), append(words, w)
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
	args, quoted, words = args[1:], quoted[1:], words[1:]
	isFlag := func(i int) bool {
		return !quoted[i] && len(args[i]) > 1 && args[i][0] == '-' && args[i] != "--"
	}
	// A command with subcommands named alone (`mailctl queue`, or with
	// --help) names the command: it takes no arguments to count.
	countArgs := true
	if subs := subcommands(h); subs != nil {
		countArgs = false
		switch {
		case len(args) == 0:
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
			args, quoted, words = args[1:], quoted[1:], words[1:]
			countArgs = true
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
	// An unknown flag's value cannot be told from an argument.
	if countArgs && len(problems) == 0 {
		if p := argumentProblem(name, words, h, !c.fenced); p != "" {
			problems = append(problems, p)
		}
	}
	return problems
}

// argCount is how many positional arguments a command line gives, or a
// synopsis takes: from min to max, max -1 for any number.
type argCount struct{ min, max int }

func (a argCount) String() string {
	switch {
	case a.max < 0:
		return fmt.Sprintf("%d or more", a.min)
	case a.min == a.max:
		return strconv.Itoa(a.min)
	}
	return fmt.Sprintf("%d to %d", a.min, a.max)
}

// valueFlagLineRE finds the flags a --help lists that take a value:
// flag.PrintDefaults writes "-name type" for them, "-name" alone for a
// boolean.
var valueFlagLineRE = regexp.MustCompile(`(?m)^  -{1,2}([a-zA-Z0-9][a-zA-Z0-9-]*) \S`)

// countArgs counts the positional arguments of words, the words after a
// command (and subcommand), as the command's flag set would read them:
// words after a flag that takes a value (valueFlags) are its value, and
// every word after `--` is an argument. Read as a synopsis, a word in
// brackets ([NAME]) is optional and one ending in ... (ID...) repeats;
// `[flags]` stands for flags and a lone | parts alternative flags.
// elided says a word … or ... stands for more of the line; help, that
// the line asks for --help.
func countArgs(words []shWord, valueFlags []string) (n argCount, elided, help bool) {
	depth := 0 // of [ ]
	for i := 0; i < len(words); i++ {
		w := words[i]
		s := w.s
		d := depth // the depth at the word, its own opening brackets counted
		if !w.quoted {
			d += len(s) - len(strings.TrimLeft(s, "["))
			depth = max(depth+strings.Count(s, "[")-strings.Count(s, "]"), 0)
			s = strings.Trim(s, "[]")
		}
		switch {
		case w.quoted:
		case s == "" || s == "|" || s == "flags":
			continue
		case s == "…" || s == "...":
			elided = true
			continue
		case s == "--":
			n.min += len(words) - i - 1
			if n.max >= 0 {
				n.max += len(words) - i - 1
			}
			return n, elided, help
		case len(s) > 1 && s[0] == '-':
			for _, alt := range strings.Split(s, "|") {
				f, _, hasValue := strings.Cut(strings.TrimLeft(alt, "-"), "=")
				help = help || f == "h" || f == "help"
				if !hasValue && slices.Contains(valueFlags, f) && i+1 < len(words) {
					i++
					if v := words[i]; !v.quoted {
						depth = max(depth+strings.Count(v.s, "[")-strings.Count(v.s, "]"), 0)
					}
					break
				}
			}
			continue
		}
		if d == 0 {
			n.min++
		}
		switch {
		case strings.HasSuffix(s, "..."):
			n.max = -1
		case n.max >= 0:
			n.max++
		}
	}
	return n, elided, help
}

// argumentProblem says when words, the words after `mailctl name` on a
// doc line, give a number of positional arguments that the synopsis of
// the command's --help (h) does not take. The synopsis is the "Usage:"
// line the binary prints; its alternatives are parted by " | "
// (`queue drop ID | queue drop [--domain D] …`). Placeholders (NAME, <id>)
// count as arguments, an optional one ([NAME]) as none or one. A span of
// prose names a command, and may a flag, without its arguments ("`mailctl
// mail read --raw` shows the file"): when named is true, only too many
// arguments are a problem.
func argumentProblem(name string, words []shWord, h string, named bool) string {
	valueFlags := firstGroups(valueFlagLineRE, h)
	given, elided, help := countArgs(words, valueFlags)
	if elided || help {
		return ""
	}
	_, usage, ok := strings.Cut(h, "Usage: mailctl ")
	usage, _, _ = strings.Cut(usage, "\n")
	path := strings.Fields(name)
	if !ok || !strings.HasPrefix(usage+" ", name+" ") {
		return fmt.Sprintf("`mailctl %s --help` has no usage line to count its arguments by", name)
	}
	var alt []shWord
	var takes []argCount
	for _, w := range append(splitShell(usage), shWord{s: "|", op: true}) {
		if w.s != "|" || !w.op {
			alt = append(alt, w)
			continue
		}
		if len(alt) >= len(path) && slices.EqualFunc(alt[:len(path)], path, func(w shWord, p string) bool { return w.s == p }) {
			alt = alt[len(path):] // the command's own name, in each alternative
		}
		n, _, _ := countArgs(alt, valueFlags)
		takes = append(takes, n)
		alt = nil
	}
	for _, t := range takes {
		if (named || given.min >= t.min) && (t.max < 0 || (given.max >= 0 && given.max <= t.max)) {
			return ""
		}
	}
	var gives string
	switch {
	case given.max == 0:
		gives = "no positional argument"
	case given.min == 1 && given.max == 1:
		gives = "1 positional argument"
	default:
		gives = given.String() + " positional arguments"
	}
	var want []string
	for _, t := range takes {
		want = append(want, t.String())
	}
	return fmt.Sprintf("gives %s, and `mailctl %s` takes %s (Usage: mailctl %s)", gives, name, strings.Join(want, " or "), usage)
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
// paragraph or a list item are not a code block and pass; a fence indented
// as deep as a nested list item puts it is read.
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
		{"fenced in a nested list item", "1. Create:\n\n   - the mailbox:\n\n     ```sh\n     mailctl mailboxes craete agent\n     ```\n",
			`page.md:6: ` + "`mailctl mailboxes craete agent`" + `: mailctl mailboxes has no subcommand "craete"`},
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
		{"mailctl mail read --mailbox agent --folder \"-x\" -- --not-a-flag", ""},
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
		{"mailctl mail read --raw", ""}, // a span names the command
		{"mailctl mailboxes create agent bob", "gives 2 positional arguments, and `mailctl mailboxes create` takes 1"},
	} {
		wantDocProblem(t, help, tc.line, "`"+tc.line+"`", tc.want)
	}
}

// wantDocProblem checks the one command doc (a page's text) shows for line:
// it has no problem when want is "", else one that holds want.
func wantDocProblem(t *testing.T, help commandHelp, line, doc, want string) {
	t.Helper()
	cs := docCommandsIn("t.md", doc)
	if len(cs) != 1 {
		t.Errorf("%s: %d commands found, want 1", line, len(cs))
		return
	}
	got := docCommandProblems(cs[0], help)
	switch {
	case want == "" && len(got) != 0:
		t.Errorf("%s: problems %q, want none", line, got)
	case want != "" && (len(got) != 1 || !strings.Contains(got[0], want)):
		t.Errorf("%s: problems %q, want one with %q", line, got, want)
	}
}

// TestDocCommandArguments: a command line that gives a command fewer or more
// positional arguments than its usage synopsis takes fails, and one that
// gives a number it takes passes, placeholders counting as arguments.
func TestDocCommandArguments(t *testing.T) {
	help := commandHelp{}
	for _, tc := range []struct {
		line string
		want string // a part of the one problem, or "" for none
	}{
		{"mailctl mailboxes create", "gives no positional argument"},
		{"mailctl mailboxes create agent bob", "gives 2 positional arguments"},
		{"mailctl mailboxes create agent --owner bob", ""},
		{"mailctl mailboxes create NAME [--owner USER]", ""},
		{"mailctl mailboxes show --json agent", ""},
		{"mailctl mailboxes prune", ""},
		{"mailctl mailboxes prune [NAME] [--dry-run]", ""},
		{"mailctl drafts show <mailbox> <id> --json", ""},
		{"mailctl drafts show agent", "gives 1 positional argument"},
		{`mailctl queue reschedule "$ID" 2h`, ""},
		{"mailctl queue reschedule ID", "gives 1 positional argument"},
		{"mailctl queue drop ID", ""},
		{"mailctl queue drop --domain gone.example --older-than 1d", ""},
		{"mailctl queue drop ID1 ID2", "gives 2 positional arguments"},
		{"mailctl queue flush stuck.example", "gives 1 positional argument"},
		{"mailctl mail mark ID1 ID2 --read", ""},
		{"mailctl mail mark ID... --unread", ""},
		{"mailctl mail mark --read", "gives no positional argument"},
		{"mailctl mail purge --before 2026-01-01", ""},
		{"mailctl mail read ID --raw", ""},
		{"mailctl mail read", "gives no positional argument"},
		{"mailctl mail label ID --add L[,L] --star", ""},
		{"mailctl mail label --add L,L] ID", ""}, // a stray ] makes no argument optional
		{"mailctl hooks runs", ""},
		{"mailctl hooks runs on-mail extra", "gives 2 positional arguments"},
		{`mailctl hooks create --mailbox agent --event on_receive --cmd '["/bin/true"]'`, ""},
		{"mailctl restore", "gives no positional argument"},
		{"mailctl restore --map-owner alice=bob backup.tar", ""},
		{"mailctl restore -", ""},
		{"mailctl agents setup claude-code codex --print", ""},
		{"mailctl agents setup …", ""},
		{"mailctl send --from agent --to a@example.com --subject hi body.md", "gives 1 positional argument"},
		{"mailctl send --from agent --to a@example.com --subject \"-x\" --body-file r.md", ""},
		{"mailctl setup --non-interactive --domain example.com --hostname mx.example.com", ""},
		{"mailctl mcp --tools basic -v", ""},
		{"mailctl reload", "gives no positional argument"},
		{"mailctl reload $MAINPID", ""},
		{"mailctl version", ""},
		{"mailctl mailboxes create --help", ""},
		{"mailctl mailboxes show -- -odd-name", ""},
	} {
		wantDocProblem(t, help, tc.line, "```sh\n"+tc.line+"\n```\n", tc.want)
	}
	// Every command's own usage line, copied as a line to run, passes.
	ref, err := collectHelp()
	if err != nil {
		t.Fatal(err)
	}
	var usages []string
	for _, c := range ref.cmds {
		usages = append(usages, c.help)
		for _, sr := range c.subs {
			usages = append(usages, sr.help)
		}
	}
	for _, h := range usages {
		line, _, _ := strings.Cut(strings.TrimPrefix(h, "Usage: "), "\n")
		for _, c := range docCommandsIn("cli.md", "```sh\n"+line+"\n```\n") {
			if got := docCommandProblems(c, help); len(got) != 0 {
				t.Errorf("%s: problems %q, want none", line, got)
			}
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
