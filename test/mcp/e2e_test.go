// Package mcpe2e runs e2e.mjs, the official TypeScript MCP SDK client, against
// a real `mailctl mcp` process. By default the daemon side is
// internal/fakedaemon; CI runs the same script against `mailctl dev`.
package mcpe2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/fakedaemon"
)

func TestTypeScriptClientAgainstFakeDaemon(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed; the TypeScript SDK end-to-end test needs Node.js 18+")
	}
	if _, err := os.Stat(filepath.Join("node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		t.Skip("run `npm ci` (or `npm install`) in test/mcp first to install @modelcontextprotocol/sdk")
	}
	bin := os.Getenv("MAILCTL_BIN")
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
	defer os.RemoveAll(dir)
	d, err := fakedaemon.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

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
