package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/mcpshim"
)

// TestCLIReferenceIsCurrent fails when a command's help changed without
// docs/cli.md being regenerated.
func TestCLIReferenceIsCurrent(t *testing.T) {
	ref, err := collectHelp()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	if got := ref.markdown(); !bytes.Equal(got, want) {
		t.Fatal("docs/cli.md is stale: run `go run ./cmd/mailctl gendocs --markdown docs/cli.md` and commit it")
	}
	for _, c := range ref.cmds {
		if !strings.Contains(c.help, "Usage: mailctl "+c.name) {
			t.Errorf("%s --help printed no usage line: %q", c.name, c.help)
		}
	}
}

func TestGeneratedFilesAreWellFormed(t *testing.T) {
	dir := t.TempDir()
	if code := cmdGendocs([]string{"--man", dir, "--completions", dir}); code != 0 {
		t.Fatalf("gendocs exit %d", code)
	}
	for _, tc := range []struct {
		tool string
		args []string
		file string
	}{
		{"bash", []string{"-n"}, "mailctl.bash"},
		{"zsh", []string{"-n"}, "_mailctl"},
		{"fish", []string{"--no-execute"}, "mailctl.fish"},
		{"groff", []string{"-man", "-ww", "-z"}, "mailctl.1"},
	} {
		p, err := exec.LookPath(tc.tool)
		if err != nil {
			t.Logf("%s not installed: %s not checked", tc.tool, tc.file)
			continue
		}
		out, err := exec.Command(p, append(tc.args, filepath.Join(dir, tc.file))...).CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("%s %s: %v\n%s", tc.tool, tc.file, err, out)
		}
	}
	man, _ := os.ReadFile(filepath.Join(dir, "mailctl.1"))
	for _, want := range []string{".TH MAILCTL 1", ".SS setup", ".SS doctor", "/etc/mailctl/config.toml"} {
		if !bytes.Contains(man, []byte(want)) {
			t.Errorf("man page lacks %q", want)
		}
	}
}

// Every subcommand's flags reach the reference and the completions, not
// only the top-level ones.
func TestReferenceHasSubcommandFlags(t *testing.T) {
	ref, err := collectHelp()
	if err != nil {
		t.Fatal(err)
	}
	md := string(ref.markdown())
	for _, want := range []string{"#### mailctl hooks create", "-fire-on-lists", "#### mailctl hooks runs", "-limit", "#### mailctl agents remove"} {
		if !strings.Contains(md, want) {
			t.Errorf("docs/cli.md lacks %q", want)
		}
	}
	for _, comp := range [][]byte{ref.bash(), ref.zsh(), ref.fish()} {
		if !bytes.Contains(comp, []byte("fire-on-lists")) || !bytes.Contains(comp, []byte("limit")) {
			t.Errorf("completion lacks subcommand flags:\n%s", comp)
		}
	}
}

// TestEachHelpIsItsOwn: a subcommand's --help is its own text, with one usage
// line; agents setup and remove printed theirs and then the whole group's.
func TestEachHelpIsItsOwn(t *testing.T) {
	ref, err := collectHelp()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ref.cmds {
		if n := strings.Count(c.help, "Usage: "); n != 1 {
			t.Errorf("%s --help has %d usage lines:\n%s", c.name, n, c.help)
		}
		for _, s := range c.subs {
			if n := strings.Count(s.help, "Usage: "); n != 1 {
				t.Errorf("%s %s --help has %d usage lines:\n%s", c.name, s.name, n, s.help)
			}
		}
	}
}

// TestMCPHelpNamesEveryPreset: mailctl mcp --help lists every preset
// --tools accepts (drafts was missing).
func TestMCPHelpNamesEveryPreset(t *testing.T) {
	ref, err := collectHelp()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ref.cmds {
		if c.name != "mcp" {
			continue
		}
		for name := range mcpshim.Presets() {
			if !regexp.MustCompile(`\b` + name + `( \(|\.)`).MatchString(c.help) {
				t.Errorf("mailctl mcp --help does not name the preset %q:\n%s", name, c.help)
			}
		}
		return
	}
	t.Fatal("no mcp command")
}
