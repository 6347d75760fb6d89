package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	gmtext "github.com/yuin/goldmark/text"
)

// A docCommand is one mailctl command line a doc page shows.
//
// The rule that says what is one, so that prose, paths and other programs'
// command lines naming mailctl are not read as commands:
//
//   - Only code is read: the lines of fenced blocks whose info string is
//     empty, sh, bash, shell, console or zsh (a block of output or of a
//     file is labelled text, toml, json, yaml and is not read), and inline
//     code spans outside fenced blocks. Indented code blocks are not read;
//     instead a page fails that has one naming mailctl (unfencedCommands).
//   - Code is split into words as a shell does (quotes, backslashes, `#`
//     comments, a fenced line continued with a trailing backslash), so a
//     quoted argument such as a hook's --cmd JSON is one word and no flag;
//     but a | inside [ ] or between two words without spaces is a
//     synopsis's alternative ([--text-only | --html-body-file F],
//     LIST|PRESET), not a pipe, and each alternative flag is checked.
//   - A mailctl command is the word `mailctl` (or a path to the binary that
//     ends in /bin/mailctl) where the shell would run a command: at the start
//     of the line or span, after a `$ ` prompt, after | || && ; & ( $( or `,
//     after then, do, else or !, after VAR=value assignments, after `sudo`
//     and its options (`sudo -u agent -H mailctl …`), or after the `--` with
//     which a wrapper hands over the command line to run
//     (`claude mcp add … -- mailctl mcp`). `go run ./cmd/mailctl …` is
//     `mailctl …`. Its arguments run to the end of the line or span, or to
//     the next | || && ; & ( ) or `.
//
// So `journalctl -u mailctl`, `systemctl reload mailctl`, `/run/mailctl/…`,
// `go build ./cmd/mailctl`, `apt-get purge mailctl` and a `mailctl` inside
// quotes are not commands, and neither is a span of prose that does not
// start with mailctl. A span that starts with it ("`mailctl serve` runs as
// root" written as one span) is read, and only its command, subcommand and
// flags are checked, which prose words after them cannot fail; its
// positional arguments are checked only for being too many, since a span
// names a command without them ("`mailctl mail read --raw` shows …"),
// where a fenced line must give every one its command takes. The one
// exception is the first line of a state file (`mailctl registry format 1`,
// docs/architecture.md), which is a stamp, not a command (stampRE).
type docCommand struct {
	where  string   // page:line
	text   string   // the line or span as the page writes it
	words  []shWord // the words after mailctl: words[0] is the command
	fenced bool     // a line of a fenced block (to copy and run), not an inline span
}

// args returns the words after mailctl as the command receives them.
func (c docCommand) args() []string {
	var out []string
	for _, w := range c.words {
		out = append(out, w.s)
	}
	return out
}

// stampRE is the first line of a versioned state file (internal/formats).
var stampRE = regexp.MustCompile(`^mailctl [a-z]+ (?:format|journal|log) [0-9]+$`)

// shWord is one word of a shell line, or one of its control operators.
type shWord struct {
	s      string
	quoted bool // began with a quote: a value, never a flag
	op     bool // | || & && ; ( $( ) or `
}

// splitShell splits a line as a shell would, far enough to find commands
// and their flags: quotes, backslash escapes, comments and the control
// operators. It does not expand anything.
func splitShell(s string) []shWord {
	var out []shWord
	var cur strings.Builder
	in, quoted := false, false
	depth := 0 // of unquoted [ ], a synopsis's optional parts
	flush := func() {
		if in {
			out = append(out, shWord{s: cur.String(), quoted: quoted})
		}
		cur.Reset()
		in, quoted = false, false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			flush()
		case c == '#' && !in:
			return out
		case c == '\'':
			quoted = quoted || !in
			in = true
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				j = len(s) - i - 1
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
		case c == '"':
			quoted = quoted || !in
			in = true
			for i++; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
		case c == '\\' && i+1 < len(s):
			in = true
			i++
			cur.WriteByte(s[i])
		case c == '$' && i+1 < len(s) && s[i+1] == '(':
			flush()
			out = append(out, shWord{s: "$(", op: true})
			i++
		case c == '[' || c == ']':
			if c == '[' {
				depth++
			} else {
				depth = max(depth-1, 0)
			}
			in = true
			cur.WriteByte(c)
		case c == '|' && (depth > 0 || (in && i+1 < len(s) && s[i+1] != ' ' && s[i+1] != '|')):
			// A synopsis's alternatives ([--a | --b], LIST|PRESET), not a pipe.
			in = true
			cur.WriteByte(c)
		case strings.IndexByte("|&;()`", c) >= 0:
			flush()
			op := string(c)
			if (c == '|' || c == '&') && i+1 < len(s) && s[i+1] == c {
				op += op
				i++
			}
			out = append(out, shWord{s: op, op: true})
		default:
			in = true
			cur.WriteByte(c)
		}
	}
	flush()
	return out
}

var assignmentRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// sudoArgOptions are sudo's options that take the next word as their value.
var sudoArgOptions = []string{"-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U"}

// mailctlCommands returns the argument lists of the mailctl commands in
// words, by the rule on docCommand.
func mailctlCommands(words []shWord) [][]shWord {
	var out [][]shWord
	pos := true // at a place where the shell runs a command
	for i := 0; i < len(words); i++ {
		w := words[i]
		if w.op {
			pos = w.s != ")"
			continue
		}
		if !pos {
			pos = w.s == "--" && !w.quoted
			continue
		}
		if w.quoted {
			pos = false
			continue
		}
		switch {
		case w.s == "$" || w.s == "then" || w.s == "do" || w.s == "else" || w.s == "!" || assignmentRE.MatchString(w.s):
			continue
		case w.s == "sudo":
			for i+1 < len(words) && !words[i+1].op && (strings.HasPrefix(words[i+1].s, "-") || assignmentRE.MatchString(words[i+1].s)) {
				i++
				if slices.Contains(sudoArgOptions, words[i].s) {
					i++
				}
			}
			continue
		case w.s == "go" && i+2 < len(words) && words[i+1].s == "run" && words[i+2].s == "./cmd/mailctl":
			i += 2
			w.s = "mailctl"
		}
		pos = false
		if w.s != "mailctl" && !strings.HasSuffix(w.s, "/bin/mailctl") {
			continue
		}
		end := i + 1
		for end < len(words) && !words[end].op {
			end++
		}
		out = append(out, words[i+1:end])
		i = end - 1
	}
	return out
}

// readingFence says whether a fenced block's info string marks commands.
func readingFence(info string) bool {
	lang, _, _ := strings.Cut(strings.TrimSpace(info), " ")
	return slices.Contains([]string{"", "sh", "bash", "shell", "console", "zsh"}, lang)
}

// fenceRE is a fence's line. It may be indented deeper than CommonMark's
// three spaces, as a fence in a nested list item is (the three count from
// the item's indent). A "```" line inside an indented code block is read
// as a fence too, but such a block that names mailctl fails the page
// anyway (unfencedCommands).
var fenceRE = regexp.MustCompile("^[ \t]*(```+|~~~+)(.*)$")

// docCommandsIn returns the mailctl commands of the Markdown text of page,
// by the rule on docCommand.
func docCommandsIn(page, text string) []docCommand {
	var out []docCommand
	add := func(line int, raw string, fenced bool) {
		for _, args := range mailctlCommands(splitShell(raw)) {
			c := docCommand{where: page + ":" + strconv.Itoa(line), text: strings.Join(strings.Fields(raw), " "), fenced: fenced}
			c.words = args
			if !fenced && stampRE.MatchString(c.text) {
				continue
			}
			out = append(out, c)
		}
	}
	lines := strings.Split(text, "\n")
	var prose []string // the lines since the last fence, for spans across lines
	proseStart := 1
	spans := func() {
		// A span opens with a run of backticks and closes at the next run
		// of as many (CommonMark); its newlines are spaces.
		t := strings.Join(prose, "\n")
		for i := 0; i < len(t); {
			if t[i] != '`' {
				i++
				continue
			}
			n := 1
			for i+n < len(t) && t[i+n] == '`' {
				n++
			}
			ticks := t[i : i+n]
			rest := t[i+n:]
			j := 0
			for {
				k := strings.Index(rest[j:], ticks)
				if k < 0 {
					j = -1
					break
				}
				j += k
				if j+n < len(rest) && rest[j+n] == '`' {
					for j < len(rest) && rest[j] == '`' {
						j++
					}
					continue
				}
				break
			}
			if j < 0 {
				i += n
				continue
			}
			span := strings.ReplaceAll(rest[:j], "\n", " ")
			if len(span) > 2 && span[0] == ' ' && span[len(span)-1] == ' ' {
				span = span[1 : len(span)-1]
			}
			add(proseStart+strings.Count(t[:i], "\n"), span, false)
			i += n + j + n
		}
		prose = nil
	}
	for i := 0; i < len(lines); i++ {
		m := fenceRE.FindStringSubmatch(lines[i])
		if m == nil {
			if prose == nil {
				proseStart = i + 1
			}
			prose = append(prose, lines[i])
			continue
		}
		spans()
		fence, read := m[1], readingFence(m[2])
		for i++; i < len(lines); i++ {
			l := strings.TrimSpace(lines[i])
			if strings.HasPrefix(l, fence[:1]) && strings.Trim(l, fence[:1]) == "" && len(l) >= len(fence) {
				break
			}
			if !read {
				continue
			}
			start := i
			joined := lines[i]
			for strings.HasSuffix(joined, "\\") && i+1 < len(lines) {
				i++
				joined = joined[:len(joined)-1] + " " + lines[i]
			}
			add(start+1, joined, true)
		}
	}
	spans()
	return out
}

// unfencedCommands returns where the Markdown text of page has an indented
// code block (four spaces that do not continue a paragraph or a list item,
// as CommonMark and goldmark read them) that names mailctl. The pages have
// none, so rather than read a second kind of block, the checker asks for a
// fence: a command there would otherwise go unchecked.
func unfencedCommands(page, text string) []string {
	src := []byte(text)
	var out []string
	doc := goldmark.DefaultParser().Parse(gmtext.NewReader(src))
	ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		cb, ok := n.(*ast.CodeBlock) // indented; fenced blocks are *ast.FencedCodeBlock
		if !ok || !entering || cb.Lines().Len() == 0 {
			return ast.WalkContinue, nil
		}
		var b strings.Builder
		for i := 0; i < cb.Lines().Len(); i++ {
			seg := cb.Lines().At(i)
			b.Write(seg.Value(src))
		}
		if strings.Contains(b.String(), "mailctl") {
			line := 1 + strings.Count(text[:cb.Lines().At(0).Start], "\n")
			out = append(out, fmt.Sprintf("%s:%d: an indented code block shows mailctl, and its commands are not checked: fence it (```sh, or ```text for output)", page, line))
		}
		return ast.WalkSkipChildren, nil
	})
	return out
}

// docCommands returns the mailctl commands of the doc page at path.
func docCommands(t *testing.T, path string) []docCommand {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return docCommandsIn(strings.TrimPrefix(filepath.ToSlash(path), "../../"), string(b))
}

func TestDocCommandsExtraction(t *testing.T) {
	page := "# Page\n\n" +
		"Run `mailctl doctor` as root; mailctl serve runs as root and `journalctl -u mailctl -f`\n" +
		"follows it; `systemctl reload mailctl`, `/run/mailctl/mailctl.sock`, `go build ./cmd/mailctl`,\n" +
		"`sudo apt-get purge mailctl`, `cmd/mailctl` and `mailctl://mailboxes` are not commands, but\n" +
		"`go run ./cmd/mailctl gendocs --markdown docs/cli.md` is, and so is `mailctl queue\n" +
		"reschedule` across a line, and `go install ./cmd/mailctl && ~/go/bin/mailctl agents setup …`.\n" +
		"The stamp `mailctl registry format 1` is not.\n\n" +
		"```sh\n" +
		"sudo -u agent -H mailctl agents setup claude-code   # or codex\n" +
		"$ sudo mailctl queue summary\n" +
		"ID=$(mailctl mail list agent --ids | head -n 1)\n" +
		"mailctl hooks create --mailbox agent \\\n" +
		"  --cmd '[\"/bin/sh\", \"-c\", \"exec codex --skip-git-repo-check -\"]'\n" +
		"claude mcp add --scope user mailctl -e MAILCTL_SOCKET=/x -- mailctl mcp --tools basic\n" +
		"npx @modelcontextprotocol/inspector --cli mailctl mcp --method tools/list\n" +
		"journalctl -u mailctl -g 'msg=audit'\n" +
		"if systemctl is-active --quiet mailctl; then systemctl reload mailctl; fi\n" +
		"MAILCTL_SOCKET=/s mailctl mcp\n" +
		"mailctl mcp [--tools LIST|PRESET] [-v] | tee x\n" +
		"```\n\n" +
		"```text\n" +
		"mailctl serve: refusing to start\n" +
		"```\n\n" +
		"```\n" +
		"go run ./cmd/mailctl dev\n" +
		"```\n"
	want := []string{
		"page.md:3 span: doctor",
		"page.md:6 span: gendocs|--markdown|docs/cli.md",
		"page.md:6 span: queue|reschedule",
		"page.md:7 span: agents|setup|…",
		"page.md:11 fenced: agents|setup|claude-code",
		"page.md:12 fenced: queue|summary",
		"page.md:13 fenced: mail|list|agent|--ids",
		"page.md:14 fenced: hooks|create|--mailbox|agent|--cmd|[\"/bin/sh\", \"-c\", \"exec codex --skip-git-repo-check -\"]",
		"page.md:16 fenced: mcp|--tools|basic",
		"page.md:20 fenced: mcp",
		"page.md:21 fenced: mcp|[--tools|LIST|PRESET]|[-v]",
		"page.md:29 fenced: dev",
	}
	var got []string
	for _, c := range docCommandsIn("page.md", page) {
		kind := "span"
		if c.fenced {
			kind = "fenced"
		}
		got = append(got, c.where+" "+kind+": "+strings.Join(c.args(), "|"))
	}
	if !slices.Equal(got, want) {
		t.Errorf("commands found (-want +got):\n-%s\n+%s", strings.Join(want, "\n-"), strings.Join(got, "\n+"))
	}
}
