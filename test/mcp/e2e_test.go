// Package mcpe2e runs e2e.mjs, the official TypeScript MCP SDK client, against
// a real `mailctl mcp` process. By default the daemon side is
// internal/fakedaemon; CI runs the same script against `mailctl dev`.
package mcpe2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mailctl/mailctl/internal/fakedaemon"
)

// setup finds node and the npm packages, builds mailctl (or takes
// $MAILCTL_BIN) and starts a fake daemon.
func setup(t *testing.T, pkg string) (node, bin string, d *fakedaemon.Daemon) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed; the end-to-end MCP tests need Node.js 20+")
	}
	if _, err := os.Stat(filepath.Join("node_modules", filepath.FromSlash(pkg))); err != nil {
		t.Skipf("run `npm ci` in test/mcp first to install %s", pkg)
	}
	bin = os.Getenv("MAILCTL_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "mailctl")
		out, err := exec.Command("go", "build", "-o", bin, "github.com/mailctl/mailctl/cmd/mailctl").CombinedOutput()
		if err != nil {
			t.Fatalf("building mailctl: %v\n%s", err, out)
		}
	}
	dir, err := os.MkdirTemp("", "mcpe2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d, err = fakedaemon.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return node, bin, d
}

func TestTypeScriptClientAgainstFakeDaemon(t *testing.T) {
	node, bin, d := setup(t, "@modelcontextprotocol/sdk")

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "e2e.mjs")
	cmd.Env = append(os.Environ(), "MAILCTL_BIN="+bin, "MAILCTL_SOCKET="+d.Socket(), "E2E_TIMEOUT_SECS=20")
	out, err := cmd.CombinedOutput()
	t.Logf("e2e.mjs output:\n%s", out)
	if err != nil {
		t.Fatalf("e2e.mjs: %v", err)
	}
}

// The MCP Inspector's CLI is a second, independent client.
func TestInspectorListsTools(t *testing.T) {
	node, bin, d := setup(t, "@modelcontextprotocol/inspector")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cli := filepath.Join("node_modules", ".bin", "mcp-inspector")
	cmd := exec.CommandContext(ctx, node, cli, "--cli", bin, "mcp", "--socket", d.Socket(), "--method", "tools/list")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("inspector: %v\n%s", err, out)
	}
	var list struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("inspector output: %v\n%s", err, out)
	}
	if len(list.Tools) < 12 || len(list.Tools) > 16 {
		t.Fatalf("inspector sees %d tools", len(list.Tools))
	}
	t.Logf("inspector lists %d tools", len(list.Tools))
}

// BenchmarkSpawnToolsList measures what a harness waits for: starting
// `mailctl mcp`, initializing and getting the tools/list answer.
func BenchmarkSpawnToolsList(b *testing.B) {
	bin := os.Getenv("MAILCTL_BIN")
	if bin == "" {
		bin = filepath.Join(b.TempDir(), "mailctl")
		if out, err := exec.Command("go", "build", "-o", bin, "github.com/mailctl/mailctl/cmd/mailctl").CombinedOutput(); err != nil {
			b.Fatalf("building mailctl: %v\n%s", err, out)
		}
	}
	dir, _ := os.MkdirTemp("", "mcpbench")
	defer os.RemoveAll(dir)
	d, err := fakedaemon.Start(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	for b.Loop() {
		client := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil)
		cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: exec.Command(bin, "mcp", "--socket", d.Socket())}, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cs.ListTools(ctx, nil); err != nil {
			b.Fatal(err)
		}
		cs.Close()
	}
}
