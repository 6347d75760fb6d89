package mcpshim

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestCheckLoopback(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:8765", true}, {"[::1]:8765", true}, {"localhost:1", true}, {"127.5.6.7:80", true},
		{"0.0.0.0:8765", false}, {":8765", false}, {"192.168.1.2:80", false}, {"[::]:80", false},
		{"example.com:80", false}, {"127.0.0.1", false},
	} {
		if err := CheckLoopback(tc.addr); (err == nil) != tc.ok {
			t.Errorf("CheckLoopback(%q) = %v, want ok=%v", tc.addr, err, tc.ok)
		}
	}
}

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(content), mode)
		os.Chmod(p, mode)
		return p
	}
	good := write("good", "0123456789abcdef0123\n", 0o600)
	if tok, err := ReadTokenFile(good); err != nil || tok != "0123456789abcdef0123" {
		t.Fatalf("good: %q %v", tok, err)
	}
	for name, p := range map[string]string{
		"group-readable": write("g", "0123456789abcdef0123", 0o640),
		"world-readable": write("w", "0123456789abcdef0123", 0o644),
		"short":          write("s", "abc", 0o600),
		"missing":        filepath.Join(dir, "none"),
		"directory":      dir,
	} {
		if _, err := ReadTokenFile(p); err == nil {
			t.Errorf("%s token file accepted", name)
		}
	}
	if os.Getuid() == 0 {
		other := write("other", "0123456789abcdef0123", 0o600)
		if err := os.Chown(other, 65534, 65534); err == nil {
			if _, err := ReadTokenFile(other); err == nil || !strings.Contains(err.Error(), "belongs to uid") {
				t.Errorf("file of another user accepted: %v", err)
			}
		}
	}
}

type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

func TestHTTPNeedsBearerToken(t *testing.T) {
	e := newEnv(t)
	const token = "s3cret-token-0123456789"
	srv := httptest.NewServer(e.s.HTTPHandler(token))
	defer srv.Close()
	for _, auth := range []string{"", "Bearer wrong", "Basic " + token, token} {
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q: status %d, want 401", auth, resp.StatusCode)
		}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "http-test"}, nil)
	cs, err := client.Connect(e.ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL,
		HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(e.ctx, &mcp.CallToolParams{Name: "mailbox_create", Arguments: map[string]any{"name": "web"}})
	if err != nil || res.IsError {
		t.Fatalf("tool over HTTP: %v %+v", err, res)
	}
	if err := e.s.RunHTTP(e.ctx, "0.0.0.0:0", token); err == nil {
		t.Fatal("RunHTTP accepted a non-loopback address")
	}
}

// The HTTP transport takes what stdio takes (the SDK's default refuses
// bodies over 4 MiB) and answers 413 past it.
func TestHTTPBodyLimit(t *testing.T) {
	srv := httptest.NewServer(New(Options{SocketPath: noDaemon(t)}).HTTPHandler("0123456789abcdef"))
	defer srv.Close()
	post := func(size int) int {
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1","pad":"` +
			strings.Repeat("A", size) + `"}}}`
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer 0123456789abcdef")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(6 << 20); code != http.StatusOK {
		t.Errorf("6 MiB request: HTTP %d, want 200", code)
	}
	if code := post(MaxRequestBytes); code != http.StatusRequestEntityTooLarge {
		t.Errorf("request over MaxRequestBytes: HTTP %d, want 413", code)
	}
}
