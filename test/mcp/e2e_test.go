// Package mcpe2e runs e2e.mjs, the official TypeScript MCP SDK client, against
// a real `mailctl mcp` process and the real daemon, started by `mailctl dev`
// (or, for the Go-only checks, in-process by internal/testdaemon).
package mcpe2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mailctl/mailctl/internal/testbin"
	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/internal/testproc"
	"github.com/mailctl/mailctl/mcpshim"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

// mailctlBinary is the mailctl under test, built once for the whole run or
// named by $MAILCTL_TEST_BIN (internal/testbin).
func mailctlBinary(tb testing.TB) string {
	tb.Helper()
	bin, err := testbin.Mailctl()
	if err != nil {
		tb.Fatal(err)
	}
	return bin
}

// setup finds node and the npm packages and builds mailctl (or takes
// $MAILCTL_TEST_BIN).
func setup(t *testing.T, pkg string) (node, bin string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed; the end-to-end MCP tests need Node.js 20+")
	}
	if _, err := os.Stat(filepath.Join("node_modules", filepath.FromSlash(pkg))); err != nil {
		t.Skipf("run `npm ci` in test/mcp first to install %s", pkg)
	}
	return node, mailctlBinary(t)
}

// startDev runs `mailctl dev` as the current user in a fresh folder and
// returns its socket; the folder is world-traversable so that a second user
// can reach the socket.
func startDev(t *testing.T, bin string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mcpdev")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	smtpAddr := ln.Addr().String()
	ln.Close()
	dev := exec.Command(bin, "dev", "--dir", dir, "--smtp", smtpAddr)
	devOut := &testproc.Output{}
	dev.Stdout = devOut
	dev.Stderr = dev.Stdout
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dev.Process.Signal(os.Interrupt)
		dev.Wait()
		if t.Failed() {
			t.Logf("mailctl dev log:\n%s", devOut.String())
		}
	})
	sock := filepath.Join(dir, "mailctl.sock")
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The socket takes connections before the SMTP listener is up; the
		// banner comes once everything is.
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			if strings.Contains(devOut.String(), "Ctrl-C") {
				return sock
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("mailctl dev did not open %s", sock)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestTypeScriptClientAgainstDevDaemon runs the same script against the real
// daemon, started with `mailctl dev` as the current user.
func TestTypeScriptClientAgainstDevDaemon(t *testing.T) {
	node, bin := setup(t, "@modelcontextprotocol/sdk")
	sock := startDev(t, bin)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "e2e.mjs")
	cmd.Env = append(os.Environ(), "MAILCTL_BIN="+bin, "MAILCTL_SOCKET="+sock, "E2E_TIMEOUT_SECS=30")
	out, err := cmd.CombinedOutput()
	t.Logf("e2e.mjs output:\n%s", out)
	if err != nil {
		t.Fatalf("e2e.mjs against mailctl dev: %v", err)
	}
}

// TestSecondUserIsolation runs the scenario as a second, throwaway user
// against a daemon run by root: that user's `mailctl mcp` works on its own
// mailbox and can neither see nor touch root's "agent" mailbox.
func TestSecondUserIsolation(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to create a second user and run the daemon as root")
	}
	node, bin := setup(t, "@modelcontextprotocol/sdk")
	name := fmt.Sprintf("mcpe2e%d", os.Getpid()%100000)
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Skipf("useradd: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("userdel", name).Run() })
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	os.Chmod(filepath.Dir(bin), 0o755)
	sock := startDev(t, bin)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "e2e.mjs")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "MAILCTL_BIN=" + bin, "MAILCTL_SOCKET=" + sock,
		"E2E_TIMEOUT_SECS=30", "E2E_FOREIGN_MAILBOX=agent"}
	out, err := cmd.CombinedOutput()
	t.Logf("e2e.mjs as %s:\n%s", name, out)
	if err != nil {
		t.Fatalf("e2e.mjs as a second user: %v", err)
	}
	if !strings.Contains(string(out), "isolation: agent is invisible") {
		t.Fatal("isolation step did not run")
	}
}

// The MCP Inspector's CLI is a second, independent client.
func TestInspectorListsTools(t *testing.T) {
	node, bin := setup(t, "@modelcontextprotocol/inspector")
	d := testdaemon.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cli := filepath.Join("node_modules", ".bin", "mcp-inspector")
	cmd := exec.CommandContext(ctx, node, cli, "--cli", bin, "mcp", "--socket", d.Socket, "--method", "tools/list")
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
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	want := slices.Sorted(slices.Values(mcpshim.DefaultToolNames()))
	if !slices.Equal(names, want) {
		t.Fatalf("inspector sees %v, want the default tools %v", names, want)
	}
	t.Logf("inspector lists %d tools", len(list.Tools))
}

// BenchmarkSpawnToolsList measures what a harness waits for: starting
// `mailctl mcp`, initializing and getting the tools/list answer.
func BenchmarkSpawnToolsList(b *testing.B) {
	bin := mailctlBinary(b)
	d := testdaemon.Start(b)
	ctx := context.Background()
	for b.Loop() {
		client := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil)
		cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: exec.Command(bin, "mcp", "--socket", d.Socket)}, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cs.ListTools(ctx, nil); err != nil {
			b.Fatal(err)
		}
		cs.Close()
	}
}
