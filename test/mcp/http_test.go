package mcpe2e

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/mcpshim"
)

type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

// `mailctl mcp --http` serves Streamable HTTP with a bearer token from a
// private file, and refuses a token file others can read.
func TestHTTPTransportOfTheBinary(t *testing.T) {
	bin := mailctlBinary(t)
	dir, _ := os.MkdirTemp("", "mcphttp")
	defer os.RemoveAll(dir)
	d := testdaemon.Start(t)
	token := "0123456789abcdef0123456789abcdef"
	tokFile := filepath.Join(dir, "token")
	os.WriteFile(tokFile, []byte(token+"\n"), 0o644)
	os.Chmod(tokFile, 0o644)
	out, err := exec.Command(bin, "mcp", "--socket", d.Socket, "--http", "127.0.0.1:0", "--token-file", tokFile).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "chmod 600") {
		t.Fatalf("world-readable token file accepted: %v %s", err, out)
	}
	os.Chmod(tokFile, 0o600)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := exec.CommandContext(ctx, bin, "mcp", "--socket", d.Socket, "--http", addr, "--token-file", tokFile)
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Signal(os.Interrupt); srv.Wait() }()
	url := "http://" + addr + "/"
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("mailctl mcp --http did not listen")
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := http.Post(url, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: status %d", resp.StatusCode)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "http-e2e"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url,
		HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "mailbox_create", Arguments: map[string]any{"name": "web"}})
	if err != nil || res.IsError {
		t.Fatalf("tool over HTTP: %v %+v", err, res)
	}
}

// The lines of docs/mcp.md that make the token for `mailctl mcp --http` work
// as written for a user who has never run mailctl: in a home with no
// ~/.config/mailctl, they make a token file the server accepts.
func TestDocsTokenLinesRunInAFreshHome(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl not installed: the docs' token line uses it")
	}
	raw, err := os.ReadFile("../../docs/mcp.md")
	if err != nil {
		t.Fatal(err)
	}
	var block string
	for _, m := range regexp.MustCompile("(?s)```[a-z]*\n(.*?)```").FindAllStringSubmatch(string(raw), -1) {
		if strings.Contains(m[1], "openssl rand") {
			block = m[1]
		}
	}
	var script []string
	tokenFile := ""
	for _, l := range strings.Split(block, "\n") {
		switch f := strings.Fields(l); {
		case len(f) == 0 || f[0] == "#":
		case f[0] == "mailctl":
			if i := slices.Index(f, "--token-file"); i >= 0 && i+1 < len(f) {
				tokenFile = f[i+1]
			}
		default:
			script = append(script, l)
		}
	}
	if len(script) == 0 || !strings.HasPrefix(tokenFile, "~/") {
		t.Fatalf("docs/mcp.md: no token lines and `mailctl mcp --http … --token-file ~/…` line found in:\n%s", block)
	}
	home := t.TempDir()
	cmd := exec.Command("/bin/sh", "-c", strings.Join(script, "\n"))
	cmd.Env = append(os.Environ(), "HOME="+home)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docs/mcp.md's token lines in a fresh home: %v\n%s", err, out)
	}
	if _, err := mcpshim.ReadTokenFile(filepath.Join(home, tokenFile[2:])); err != nil {
		t.Fatalf("the token file the docs make is refused: %v", err)
	}
}
