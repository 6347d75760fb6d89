package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

func init() {
	register(&command{name: "gendocs", group: "internal", summary: "generate the man page, shell completions and docs/cli.md", run: cmdGendocs})
}

func cmdGendocs(args []string) int {
	fs := newFlagSet("gendocs", "gendocs [--man DIR] [--completions DIR] [--markdown FILE]", `Generates the CLI reference from the commands' own --help output, so the
documentation cannot drift from the binary. Used by packaging/build-deb.sh; CI
checks that docs/cli.md is current.`)
	man := fs.String("man", "", "write mailctl.1 into this directory")
	comp := fs.String("completions", "", "write mailctl.bash, _mailctl (zsh) and mailctl.fish into this directory")
	md := fs.String("markdown", "", "write the Markdown CLI reference to this file (docs/cli.md)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *man == "" && *comp == "" && *md == "" {
		return usageError(fs, "give at least one of --man, --completions, --markdown")
	}
	ref, err := collectHelp()
	if err != nil {
		return failure(fs, err)
	}
	write := func(path string, data []byte) error {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		return os.WriteFile(path, data, 0o644)
	}
	var errs []error
	if *md != "" {
		errs = append(errs, write(*md, ref.markdown()))
	}
	if *man != "" {
		errs = append(errs, write(filepath.Join(*man, "mailctl.1"), ref.man()))
	}
	if *comp != "" {
		errs = append(errs, write(filepath.Join(*comp, "mailctl.bash"), ref.bash()))
		errs = append(errs, write(filepath.Join(*comp, "_mailctl"), ref.zsh()))
		errs = append(errs, write(filepath.Join(*comp, "mailctl.fish"), ref.fish()))
	}
	if err := errors.Join(errs...); err != nil {
		return failure(fs, err)
	}
	return 0
}

// cliRef is the help text of the tool and of every public command.
type cliRef struct {
	overview string
	cmds     []cmdRef
}

type cmdRef struct {
	name, group, summary, help string
	flags                      []string
	subs                       []subRef // subcommands' own --help
}

type subRef struct{ name, help string }

// capture runs fn with stdout and stderr sent to one pipe and returns what it
// wrote. Commands print their usage through the flag package (stderr) or
// fmt (stdout); both are wanted.
func capture(fn func(w *os.File)) (string, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return "", err
	}
	oldOut, oldErr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = w, w
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() {
		io.Copy(&buf, r)
		close(done)
	}()
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		fn(w)
	}()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		os.Stdout, os.Stderr = oldOut, oldErr
		return "", errors.New("a command did not return from --help within 10s")
	}
	os.Stdout, os.Stderr = oldOut, oldErr
	w.Close()
	<-done
	r.Close()
	return buf.String(), nil
}

var flagLineRE = regexp.MustCompile(`(?m)^\s+-{1,2}([a-zA-Z0-9][a-zA-Z0-9-]*)`)

func collectHelp() (*cliRef, error) {
	ov, err := capture(func(w *os.File) { usage(w) })
	if err != nil {
		return nil, err
	}
	// The reference must not change with the build's version stamp.
	ov = strings.Replace(ov, " (version "+version+")", "", 1)
	ref := &cliRef{overview: strings.TrimSpace(ov)}
	for _, n := range slices.Sorted(maps.Keys(commands)) {
		c := commands[n]
		if c.group == "internal" {
			continue
		}
		h, err := capture(func(*os.File) { c.run([]string{"--help"}) })
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		cr := cmdRef{name: n, group: c.group, summary: c.summary, help: strings.TrimSpace(h)}
		all := h
		for _, sub := range subcommands(h) {
			sh, err := capture(func(*os.File) { c.run([]string{sub, "--help"}) })
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", n, sub, err)
			}
			if !strings.HasPrefix(strings.TrimSpace(sh), "Usage: mailctl "+n+" "+sub) {
				continue // not a subcommand with flags of its own
			}
			cr.subs = append(cr.subs, subRef{name: sub, help: strings.TrimSpace(sh)})
			all += "\n" + sh
		}
		for _, f := range firstGroups(flagLineRE, all) {
			cr.flags = append(cr.flags, "--"+f)
		}
		ref.cmds = append(ref.cmds, cr)
	}
	return ref, nil
}

func (r *cliRef) markdown() []byte {
	var b strings.Builder
	b.WriteString("# mailctl command reference\n\n")
	b.WriteString("Generated from the commands' `--help` by `mailctl gendocs --markdown docs/cli.md`;\ndo not edit by hand.\n\n")
	b.WriteString("The examples run as written, in the order of this page, against `mailctl dev` and its\n" +
		"mailbox `agent`: each command's examples make what they use (a message, a draft, a queued\n" +
		"send) and keep ids in shell variables. They call `mailctl` by name: put it on your PATH\n" +
		"with `go install ./cmd/mailctl` (it lands in `$(go env GOPATH)/bin`), or use the binary\n" +
		"path the dev banner prints; and set `MAILCTL_SOCKET` to the socket the banner prints\n" +
		"(`TestCLIReferenceExamplesRun`).\n\n")
	b.WriteString("```text\n" + r.overview + "\n```\n")
	for _, g := range groups {
		first := true
		for _, c := range r.cmds {
			if c.group != g.id {
				continue
			}
			if first {
				fmt.Fprintf(&b, "\n## %s\n", g.title)
				first = false
			}
			fmt.Fprintf(&b, "\n### mailctl %s\n\n%s.\n\n```text\n%s\n```\n", c.name, c.summary, c.help)
			for _, sr := range c.subs {
				fmt.Fprintf(&b, "\n#### mailctl %s %s\n\n```text\n%s\n```\n", c.name, sr.name, sr.help)
			}
		}
	}
	return []byte(b.String())
}

// roffEscape makes text safe inside a no-fill roff block: backslashes doubled
// and lines that start with a control character protected.
func roffEscape(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		l = strings.ReplaceAll(l, `\`, `\e`)
		if strings.HasPrefix(l, ".") || strings.HasPrefix(l, "'") {
			l = `\&` + l
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

func (r *cliRef) man() []byte {
	var b strings.Builder
	b.WriteString(".TH MAILCTL 1 \"\" \"mailctl " + roffEscape(version) + "\" \"User Commands\"\n")
	b.WriteString(".SH NAME\nmailctl \\- a self-hosted mail exchange for AI agents\n")
	b.WriteString(".SH SYNOPSIS\n.B mailctl\n.I COMMAND\n[\\fIflags\\fR]\n")
	b.WriteString(".SH DESCRIPTION\n.nf\n" + roffEscape(r.overview) + "\n.fi\n")
	b.WriteString(".SH COMMANDS\n")
	for _, c := range r.cmds {
		fmt.Fprintf(&b, ".SS %s\n%s.\n.PP\n.nf\n%s\n.fi\n", roffEscape(c.name), roffEscape(c.summary), roffEscape(c.help))
	}
	b.WriteString(".SH FILES\n.TP\n/etc/mailctl/config.toml\noperator configuration (root 0640)\n")
	b.WriteString(".TP\n/etc/mailctl/dkim/\nDKIM private keys (root 0600)\n")
	b.WriteString(".TP\n/var/lib/mailctl/\nregistry, mailboxes and outbound queue\n")
	b.WriteString(".TP\n/run/mailctl/mailctl.sock\ncontrol socket\n")
	b.WriteString(".SH ENVIRONMENT\n.TP\nMAILCTL_SOCKET\ncontrol socket clients use when \\-\\-socket is not given\n")
	b.WriteString(".TP\nMAILCTL_CONFIG\nconfig file of the commands that read one when \\-\\-config is not given; clients dial its paths.socket when neither \\-\\-socket nor MAILCTL_SOCKET is given\n")
	b.WriteString(".SH SEE ALSO\n.BR systemctl (1),\n.BR journalctl (1)\n")
	return []byte(b.String())
}

func (r *cliRef) bash() []byte {
	var b strings.Builder
	b.WriteString("# bash completion for mailctl, generated by `mailctl gendocs`.\n")
	b.WriteString("_mailctl() {\n  local cur cmd\n  cur=\"${COMP_WORDS[COMP_CWORD]}\"\n")
	var names []string
	for _, c := range r.cmds {
		names = append(names, c.name)
	}
	fmt.Fprintf(&b, "  if [ \"$COMP_CWORD\" -eq 1 ]; then\n    COMPREPLY=($(compgen -W %q -- \"$cur\"))\n    return\n  fi\n", strings.Join(names, " "))
	b.WriteString("  cmd=\"${COMP_WORDS[1]}\"\n  case \"$cmd\" in\n")
	for _, c := range r.cmds {
		words := append(subcommands(c.help), c.flags...)
		if len(words) == 0 {
			continue
		}
		fmt.Fprintf(&b, "    %s) COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", c.name, strings.Join(words, " "))
	}
	b.WriteString("  esac\n}\ncomplete -o default -F _mailctl mailctl\n")
	return []byte(b.String())
}

func (r *cliRef) zsh() []byte {
	var b strings.Builder
	b.WriteString("#compdef mailctl\n# zsh completion for mailctl, generated by `mailctl gendocs`.\n")
	b.WriteString("_mailctl() {\n  local -a cmds\n  cmds=(\n")
	for _, c := range r.cmds {
		fmt.Fprintf(&b, "    %s\n", zshQuote(c.name+":"+c.summary))
	}
	b.WriteString("  )\n  if (( CURRENT == 2 )); then\n    _describe 'command' cmds\n    return\n  fi\n  case ${words[2]} in\n")
	for _, c := range r.cmds {
		words := append(subcommands(c.help), c.flags...)
		if len(words) == 0 {
			continue
		}
		fmt.Fprintf(&b, "    %s) compadd -- %s ;;\n", c.name, strings.Join(words, " "))
	}
	b.WriteString("    *) _files ;;\n  esac\n}\n_mailctl \"$@\"\n")
	return []byte(b.String())
}

func (r *cliRef) fish() []byte {
	var b strings.Builder
	b.WriteString("# fish completion for mailctl, generated by `mailctl gendocs`.\n")
	b.WriteString("complete -c mailctl -f\n")
	for _, c := range r.cmds {
		fmt.Fprintf(&b, "complete -c mailctl -n __fish_use_subcommand -a %s -d %s\n", c.name, zshQuote(c.summary))
	}
	for _, c := range r.cmds {
		for _, sub := range subcommands(c.help) {
			fmt.Fprintf(&b, "complete -c mailctl -n '__fish_seen_subcommand_from %s' -a %s\n", c.name, sub)
		}
		for _, f := range c.flags {
			fmt.Fprintf(&b, "complete -c mailctl -n '__fish_seen_subcommand_from %s' -l %s\n", c.name, strings.TrimPrefix(f, "--"))
		}
	}
	return []byte(b.String())
}

func zshQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// subcommands finds the "  name ARGS   description" lines (two-space indent)
// of a command's help, the layout commands with subcommands use.
var subcmdRE = regexp.MustCompile(`(?m)^  ([a-z][a-z-]*)(?: |$)`)

func subcommands(help string) []string {
	if !strings.Contains(help, "SUBCOMMAND") {
		return nil
	}
	return firstGroups(subcmdRE, help)
}

// firstGroups returns what re's first group matched in s, each once, in
// order of first appearance.
func firstGroups(re *regexp.Regexp, s string) []string {
	var out []string
	for _, m := range re.FindAllStringSubmatch(s, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}
