// Command mailctl is the one binary of mailctl: the daemon (`serve`, `dev`), the
// operator and user CLI, and the per-user MCP server (`mcp`).
package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/protocol"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

// command is one subcommand. Files in this package register theirs from init,
// so each concern keeps its flags and output in its own file.
type command struct {
	name    string
	summary string // one line for the command list
	group   string // "daemon", "mail", "operate" or "agent"
	run     func(args []string) int
}

var commands = map[string]*command{}

func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("duplicate command " + c.name)
	}
	commands[c.name] = c
}

func main() {
	formats.Release = version // named when a format on disk is too new for it
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 {
		usage(os.Stderr)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				return c.run([]string{"--help"})
			}
		}
		usage(os.Stdout)
		return 0
	case "--version", "-v":
		args = []string{"version"}
	}
	c, ok := commands[args[0]]
	if !ok {
		if s := suggest(args[0]); s != "" {
			fmt.Fprintf(stderr, "mailctl: unknown command %q; did you mean `mailctl %s`?\n", args[0], s)
			return 2
		}
		fmt.Fprintf(stderr, "mailctl: unknown command %q\n\n", args[0])
		usage(os.Stderr)
		return 2
	}
	return c.run(args[1:])
}

// suggest names the command a mistyped one most likely meant: one that starts
// with it or it starts with ("mailbox", "hook"), or one edit away.
func suggest(name string) string {
	best, bestD := "", 3
	for _, n := range slices.Sorted(maps.Keys(commands)) {
		if commands[n].group == "internal" {
			continue
		}
		d := editDistance(name, n)
		switch {
		case len(name) >= 3 && strings.HasPrefix(n, name):
			d = 0 // a shortened or singular name: "mailbox" for "mailboxes"
		case len(name) >= 3 && strings.HasPrefix(name, n):
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = n, d
		}
	}
	if bestD > 2 {
		return ""
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

var groups = []struct{ id, title string }{
	{"daemon", "Run the daemon"},
	{"mail", "Mailboxes and mail"},
	{"operate", "Operate a host"},
	{"agent", "Agents"},
}

func usage(w *os.File) {
	fmt.Fprintf(w, "mailctl is a self-hosted mail exchange for AI agents (version %s).\n\nUsage: mailctl COMMAND [flags]\n", version)
	for _, g := range groups {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, n := range slices.Sorted(maps.Keys(commands)) {
			if commands[n].group == g.id {
				fmt.Fprintf(w, "  %-12s %s\n", n, commands[n].summary)
			}
		}
	}
	fmt.Fprintf(w, "\nRun `mailctl COMMAND --help` for a command's flags.\nClients find the daemon at --socket, then $MAILCTL_SOCKET, then the config's paths.socket\n(--config, then $MAILCTL_CONFIG, then %s, when readable), then %s.\n", config.DefaultPath, protocol.DefaultSocket)
}
