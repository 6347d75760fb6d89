// Command mailctl is the one binary of mailctl: the daemon (`serve`, `dev`), the
// operator and user CLI, and the per-user MCP server (`mcp`).
package main

import (
	"fmt"
	"os"
	"sort"

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
		fmt.Fprintf(os.Stderr, "mailctl: unknown command %q\n\n", args[0])
		usage(os.Stderr)
		return 2
	}
	return c.run(args[1:])
}

var groups = []struct{ id, title string }{
	{"daemon", "Run the daemon"},
	{"mail", "Mailboxes and mail"},
	{"operate", "Operate a host"},
	{"agent", "Agents"},
}

func usage(w *os.File) {
	fmt.Fprintf(w, "mailctl %s: a self-hosted mail exchange for AI agents.\n\nUsage: mailctl COMMAND [flags]\n", version)
	for _, g := range groups {
		var names []string
		for n, c := range commands {
			if c.group == g.id {
				names = append(names, n)
			}
		}
		if len(names) == 0 {
			continue
		}
		sort.Strings(names)
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, n := range names {
			fmt.Fprintf(w, "  %-12s %s\n", n, commands[n].summary)
		}
	}
	fmt.Fprintf(w, "\nRun `mailctl COMMAND --help` for a command's flags.\nClients find the daemon at --socket, then $MAILCTL_SOCKET, then %s.\n", protocol.DefaultSocket)
}
