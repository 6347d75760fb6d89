// Package mcpe2e runs e2e.mjs, the official TypeScript MCP SDK client, against
// a real `mailctl mcp` process. By default the daemon side is
// internal/fakedaemon; CI runs the same script against `mailctl dev`.
package mcpe2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mailctl/mailctl/internal/fakedaemon"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// mailctlBinary is $MAILCTL_BIN, or mailctl built once for the whole run.
func mailctlBinary(tb testing.TB) string {
	tb.Helper()
	if bin := os.Getenv("MAILCTL_BIN"); bin != "" {
		return bin
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "mcpe2e-bin")
		if buildErr != nil {
			return
		}
		builtBin = filepath.Join(buildDir, "mailctl")
		out, err := exec.Command("go", "build", "-o", builtBin, "github.com/mailctl/mailctl/cmd/mailctl").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("building mailctl: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return builtBin
}

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
	bin = mailctlBinary(t)
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

// TestTypeScriptClientAgainstDevDaemon runs the same script against the real
// daemon, started with `mailctl dev` as the current user.
func TestTypeScriptClientAgainstDevDaemon(t *testing.T) {
	node, bin, _ := setup(t, "@modelcontextprotocol/sdk")
	dir, err := os.MkdirTemp("", "mcpdev")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	smtpAddr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	dev := exec.CommandContext(ctx, bin, "dev", "--dir", dir, "--smtp", smtpAddr)
	var devOut strings.Builder
	dev.Stdout, dev.Stderr = &devOut, &devOut
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		dev.Process.Signal(os.Interrupt)
		dev.Wait()
	}()
	sock := filepath.Join(dir, "mailctl.sock")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("mailctl dev did not open %s:\n%s", sock, devOut.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	cmd := exec.CommandContext(ctx, node, "e2e.mjs")
	cmd.Env = append(os.Environ(), "MAILCTL_BIN="+bin, "MAILCTL_SOCKET="+sock, "E2E_TIMEOUT_SECS=30")
	out, err := cmd.CombinedOutput()
	t.Logf("e2e.mjs output:\n%s", out)
	if err != nil {
		t.Fatalf("e2e.mjs against mailctl dev: %v\ndaemon log:\n%s", err, devOut.String())
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
	bin := mailctlBinary(b)
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
