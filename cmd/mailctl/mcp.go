package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/mailctl/mailctl/mcpshim"
)

func init() {
	register(&command{name: "mcp", group: "agent", summary: "the MCP server an agent harness spawns (stdio; --http for a URL)", run: cmdMCP})
}

func cmdMCP(args []string) int {
	presets := mcpshim.Presets()
	fs := newClientFlags("mcp", "mcp [--socket PATH] [--tools LIST|PRESET] [--http ADDR --token-file FILE]",
		`Serves mailctl's MCP tools, resources and prompts on stdin/stdout for an agent harness
(Claude Code: claude mcp add mailctl -- mailctl mcp). It acts as you: the daemon lets it
touch only the mailboxes you own. Logs go to stderr; stdout carries the protocol.

Presets for --tools: basic (`+strings.Join(presets["basic"], ", ")+`),
readonly (`+strings.Join(presets["readonly"], ", ")+`),
organize (`+strings.Join(presets["organize"], ", ")+`),
drafts (`+strings.Join(presets["drafts"], ", ")+`), all.
See docs/mcp.md.`).fs
	socket := fs.Lookup("socket")
	tools := fs.String("tools", "", "comma-separated tool names and/or presets (default all but email_purge and email_draft)")
	httpAddr := fs.String("http", "", "serve Streamable HTTP on this loopback HOST:PORT instead of stdio")
	tokenFile := fs.String("token-file", "", "file (mode 0600, yours) holding the bearer token required by --http")
	verbose := fs.Bool("v", false, "log debug details to stderr")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		return usageError(fs, "unexpected argument %q", fs.Arg(0))
	}
	selected, err := mcpshim.ParseTools(*tools)
	if err != nil {
		return usageError(fs, "%v", err)
	}
	sock, err := daemonSocket(socket.Value.String(), "")
	if err != nil {
		fmt.Fprintln(stderr, "mailctl mcp:", err)
		return 2
	}
	logger := newLogger(*verbose)
	srv := mcpshim.New(mcpshim.Options{SocketPath: sock, Tools: selected, Version: version, Logger: logger})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *httpAddr != "" {
		if *tokenFile == "" {
			return usageError(fs, "--http needs --token-file (a file only you can read, holding the bearer token)")
		}
		if err := mcpshim.CheckLoopback(*httpAddr); err != nil {
			return usageError(fs, "%v", err)
		}
		token, err := mcpshim.ReadTokenFile(*tokenFile)
		if err != nil {
			fmt.Fprintln(stderr, "mailctl mcp:", err)
			return 2
		}
		if err := srv.RunHTTP(ctx, *httpAddr, token); err != nil {
			return failure(fs, err)
		}
		return 0
	}
	if *tokenFile != "" {
		return usageError(fs, "--token-file only applies with --http")
	}
	if err := srv.Run(ctx, mcpshim.StdioTransport()); err != nil && ctx.Err() == nil {
		logger.Error("mcp server ended", "err", err)
		return 1
	}
	return 0
}
