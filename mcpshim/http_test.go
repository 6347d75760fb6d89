package mcpshim

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/internal/testwait"
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
	// The bound takes the line end too: a token that fills it is read
	// whole, one byte more is refused, never cut short.
	atBound := strings.Repeat("a", MaxTokenFileBytes-1)
	if tok, err := ReadTokenFile(write("at-bound", atBound+"\n", 0o600)); err != nil || tok != atBound {
		t.Errorf("a token file of %d bytes: %d characters, %v", MaxTokenFileBytes, len(tok), err)
	}
	if _, err := ReadTokenFile(write("past-bound", atBound+"a\n", 0o600)); err == nil || !strings.Contains(err.Error(), "more than 4096 bytes") {
		t.Errorf("a token file past the bound: %v", err)
	}
	for name, p := range map[string]string{
		"two lines":      write("two", "0123456789abcdef0123\nsecond-line-here\n", 0o600),
		"inner space":    write("sp", "0123456789 abcdef0123", 0o600),
		"not ASCII":      write("na", "0123456789abcdéf0123", 0o600),
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
		resp, err := http.DefaultClient.Do(rawRequest(context.Background(), "POST", srv.URL, "0123456789abcdef", "", body))
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

// Regression: over HTTP too, a call with id 1.5 was answered under id 1 and
// one with 9007199254740993 under 9007199254740992, and one with a null id
// was taken for a notification and never answered. Such a call, alone or in
// a batch, is refused with 400 naming the id; whole numbers up to 2^53 are
// served as before.
func TestHTTPNumericIDsAnsweredUnderTheSameID(t *testing.T) {
	const token = "0123456789abcdef"
	srv := httptest.NewServer(New(Options{SocketPath: noDaemon(t)}).HTTPHandler(token))
	defer srv.Close()
	session := openRawSession(t, srv.URL, token)
	for _, c := range []struct {
		body, want string
		code       int
	}{
		{`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, "the id 1.5 would not come back", http.StatusBadRequest},
		{`{"jsonrpc":"2.0","id":9007199254740993,"method":"ping"}`, "the id 9007199254740993 would not come back", http.StatusBadRequest},
		{`[{"jsonrpc":"2.0","id":"a","method":"ping"},{"jsonrpc":"2.0","id":2.5,"method":"ping"}]`, "the id 2.5 would not come back", http.StatusBadRequest},
		// Refusals are JSON-RPC errors under the id as written, as on stdio.
		{`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, `"id":1.5,"error":{"code":-32600`, http.StatusBadRequest},
		// A null id is no notification: answered, under a null id.
		{`{"jsonrpc":"2.0","id":null,"method":"ping"}`, `"id":null,"error":{"code":-32600,"data":{"code":"invalid_input"},"message":"invalid request: the id is null`, http.StatusBadRequest},
		// The id is the member the SDK reads, spelled "id" exactly.
		{`{"jsonrpc":"2.0","id":1.5,"ID":1,"method":"ping"}`, `"id":1.5,"error":{"code":-32600`, http.StatusBadRequest},
		{`{"jsonrpc":"2.0","id":4,"Id":4.5,"method":"ping"}`, `"id":4,"result":{}`, http.StatusOK},
		{`{"jsonrpc":"2.0","id":9007199254740992,"method":"ping"}`, `"id":9007199254740992,"result":{}`, http.StatusOK},
		{`{"jsonrpc":"2.0","id":"x","method":"ping"}`, `"id":"x","result":{}`, http.StatusOK},
	} {
		resp, body := rawHTTP(t, "POST", srv.URL, token, session, c.body)
		if resp.StatusCode != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s: HTTP %d %q, want %d with %q", c.body, resp.StatusCode, body, c.code, c.want)
		}
	}
}

// Regression: over HTTP a body that is not JSON, and a method no MCP server
// serves, were refused by the SDK with status 400 and a line of text, which
// a JSON-RPC client cannot read. They are JSON-RPC errors, as on stdio:
// -32700 under a null id, -32601 under the request's id (null for a
// notification, which over HTTP still needs an answer), in a batch too.
func TestHTTPBadBodyAndUnknownMethodAreRPCErrors(t *testing.T) {
	const token = "0123456789abcdef"
	srv := httptest.NewServer(New(Options{SocketPath: noDaemon(t)}).HTTPHandler(token))
	defer srv.Close()
	session := openRawSession(t, srv.URL, token)
	parse := `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"data":{"code":"invalid_input"},"message":"parse error: the body is not JSON: send one JSON-RPC message"}}`
	notObject := `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"data":{"code":"invalid_input"},"message":"invalid request: a JSON-RPC message is a JSON object"}}`
	for _, c := range []struct {
		session, body, want string
	}{
		{session, `{"jsonrpc":"2.0","id":1,"method":"ping"`, parse},
		{"", `not json`, parse},
		{session, "", parse},
		{session, `[]`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"data":{"code":"invalid_input"},"message":"invalid request: an empty batch: send one JSON-RPC message"}}`},
		{session, ` 5`, notObject},
		{session, `[{"jsonrpc":"2.0","id":1,"method":"ping"},"ping"]`, notObject},
		{session, strings.Repeat("[", 10001), `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"data":{"code":"invalid_input"},"message":"parse error: the body nests arrays and objects more than 1000 deep"}}`},
		// Valid JSON past the nesting the SDK's decoder takes.
		{session, `{"jsonrpc":"2.0","id":9,"method":"ping","params":{"_meta":{"x":` + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + `}}}`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"data":{"code":"invalid_input"},"message":"parse error: the body nests arrays and objects more than 1000 deep"}}`},
		{session, `{"jsonrpc":"2.0","id":7,"method":"tools/nope","params":{}}`, `{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"data":{"code":"invalid_input"},"message":"method not found: \"tools/nope\" is not a method of MCP this server serves"}}`},
		{"", `{"jsonrpc":"2.0","id":"q","method":"sampling/createMessage"}`, `{"jsonrpc":"2.0","id":"q","error":{"code":-32601,"data":{"code":"invalid_input"},"message":"method not found: \"sampling/createMessage\" is not a method of MCP this server serves"}}`},
		{session, `{"jsonrpc":"2.0","method":"notifications/nope"}`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32601,"data":{"code":"invalid_input"},"message":"method not found: \"notifications/nope\" is not a method of MCP this server serves"}}`},
		// The method is the member the SDK reads, spelled "method" exactly.
		{session, `{"jsonrpc":"2.0","id":8,"method":"nope","Method":"ping"}`, `{"jsonrpc":"2.0","id":8,"error":{"code":-32601,"data":{"code":"invalid_input"},"message":"method not found: \"nope\" is not a method of MCP this server serves"}}`},
		{session, `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"nope"}]`, `{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"data":{"code":"invalid_input"},"message":"method not found: \"nope\" is not a method of MCP this server serves"}}`},
	} {
		resp, body := rawHTTP(t, "POST", srv.URL, token, c.session, c.body)
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/json" || body != c.want {
			t.Errorf("%.40q: HTTP %d %s %q, want 400 application/json %s", c.body, resp.StatusCode, resp.Header.Get("Content-Type"), body, c.want)
		}
	}
	if resp, body := rawHTTP(t, "POST", srv.URL, token, session, `{"jsonrpc":"2.0","id":3,"method":"ping"}`); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"id":3,"result":{}`) {
		t.Errorf("ping after the refusals: HTTP %d %q", resp.StatusCode, body)
	}
}

// Every method clientMethods lets through is one the SDK serves: none is
// refused as unsupported, so the list takes nothing from a client that the
// SDK would have answered.
func TestHTTPServesEveryClientMethod(t *testing.T) {
	const token = "0123456789abcdef"
	srv := httptest.NewServer(New(Options{SocketPath: noDaemon(t)}).HTTPHandler(token))
	defer srv.Close()
	session := openRawSession(t, srv.URL, token)
	methods := slices.Sorted(maps.Keys(clientMethods))
	for i, m := range methods {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{}}`, i+100, m)
		if strings.HasPrefix(m, "notifications/") {
			body = fmt.Sprintf(`{"jsonrpc":"2.0","method":%q,"params":{}}`, m)
		}
		ctx, cancel := context.WithCancel(context.Background())
		resp, err := http.DefaultClient.Do(rawRequest(ctx, "POST", srv.URL, token, session, body))
		if err != nil {
			cancel()
			t.Fatalf("%s: %v", m, err)
		}
		// A method that streams (subscriptions/listen) answers only
		// its status at once: what follows it is not read.
		var got string
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			got = string(b)
		}
		resp.Body.Close()
		cancel()
		if strings.Contains(got, "unsupported") || strings.Contains(got, "-32601") {
			t.Errorf("%s: the SDK does not serve it: HTTP %d %q", m, resp.StatusCode, got)
		}
	}
}

// Over HTTP too, a second initialize on a session is -32600, not code 0.
func TestHTTPSecondInitializeHasRPCCode(t *testing.T) {
	const token = "0123456789abcdef"
	srv := httptest.NewServer(New(Options{SocketPath: noDaemon(t)}).HTTPHandler(token))
	defer srv.Close()
	session := openRawSession(t, srv.URL, token)
	_, body := rawHTTP(t, "POST", srv.URL, token, session, initializeLine)
	if !strings.Contains(body, `"code":-32600`) || !strings.Contains(body, `"data":{"code":"invalid_input"}`) {
		t.Fatalf("second initialize: want -32600 with data.code invalid_input, got %s", body)
	}
}

// Regression: over HTTP a call made before initialize (a POST without a
// session) was refused under code 0, which JSON-RPC does not define; it is
// -32600 with data.code, as on stdio (TestSessionStateErrorsHaveRPCCodes),
// alone or in a batch. A ping before initialize is still answered.
func TestHTTPCallBeforeInitializeHasRPCCode(t *testing.T) {
	const token = "0123456789abcdef"
	srv := httptest.NewServer(New(Options{SocketPath: noDaemon(t)}).HTTPHandler(token))
	defer srv.Close()
	for _, c := range []struct{ body, want string }{
		{`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, `{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"method \"tools/list\" is invalid during session initialization","data":{"code":"invalid_input"}}}`},
		{`[{"jsonrpc":"2.0","id":"b","method":"resources/list"}]`, `{"jsonrpc":"2.0","id":"b","error":{"code":-32600,"message":"method \"resources/list\" is invalid during session initialization","data":{"code":"invalid_input"}}}`},
		{`{"jsonrpc":"2.0","id":2,"method":"ping"}`, `{"jsonrpc":"2.0","id":2,"result":{}}`},
	} {
		resp, body := rawHTTP(t, "POST", srv.URL, token, "", c.body)
		if resp.StatusCode != http.StatusOK || body != "event: message\ndata: "+c.want+"\n\n" {
			t.Errorf("%s before initialize: HTTP %d %q, want %s", c.body, resp.StatusCode, body, c.want)
		}
	}
}

// withRPCCodeSSE changes an answer of code 0 only, in an event or alone,
// and nothing that only looks like one.
func TestWithRPCCodeSSE(t *testing.T) {
	const coded = `{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"no","data":{"code":"invalid_input"}}}`
	for _, c := range []struct{ in, want string }{
		{"event: message\nid: 7\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":0,\"message\":\"no\"}}\n\n", "event: message\nid: 7\ndata: " + coded + "\n\n"},
		{"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":0,\"message\":\"no\"}}\n\n", "data: " + coded + "\n\n"},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":0,"message":"no"}}`, coded},
		{"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32603,\"message\":\"no\"}}\n\n", ""},
		{"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"error\":{\"code\":0,\"message\":\"a tool's\"}}}\n\n", ""},
		{"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"code\":0}}\n\n", ""},
		{"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":0,\"message\":\"cut\"", ""},
	} {
		got, ok := withRPCCodeSSE([]byte(c.in))
		if ok != (c.want != "") || string(got) != c.want {
			t.Errorf("%q: got %q, %v; want %q", c.in, got, ok, c.want)
		}
	}
}

// Regression: stopping `mailctl mcp --http` (SIGTERM or SIGINT) returned at
// once and left a call in flight an empty reply. A stop now cancels the call,
// which answers with a retryable error saying the server is stopping, closes
// its watch and the client's open event stream, and returns once that answer
// is written. The client here speaks raw HTTP, so that it can hold the
// session's event stream itself.
func TestHTTPStopAnswersACallInFlight(t *testing.T) {
	d := testdaemon.Start(t)
	d.Mailbox(t, "agent")
	const token = "0123456789abcdef-stop"
	s := New(Options{SocketPath: d.Socket})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- s.serveHTTP(ctx, ln, token) }()
	url := "http://" + ln.Addr().String() + "/"
	session := ""
	do := func(method, body string) *http.Response {
		t.Helper()
		resp, err := http.DefaultClient.Do(rawRequest(context.Background(), method, url, token, session, body))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode/100 != 2 {
			t.Fatalf("%s %s: HTTP %d", method, body, resp.StatusCode)
		}
		return resp
	}
	resp := do("POST", initializeLine)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if session = resp.Header.Get("Mcp-Session-Id"); session == "" {
		t.Fatal("initialize: no session id")
	}
	do("POST", initializedLine).Body.Close()
	stream := do("GET", "")
	defer stream.Body.Close()
	streamEnded := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, stream.Body); streamEnded <- err }()
	answered := make(chan string, 1)
	go func() {
		resp := do("POST", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"email_wait","arguments":{"mailbox":"agent","subject":"never","timeout_secs":600}}}`)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answered <- string(b)
	}()
	testwait.For(t, "the wait's watch", func() bool { return d.Watchers() > 0 })
	stop()
	var answer string
	select {
	case answer = <-answered:
	case <-time.After(testwait.Timeout):
		d.Stop()
		t.Fatal("the call in flight was not answered after the stop")
	}
	if !strings.Contains(answer, `"isError":true`) || !strings.Contains(answer, "stopping") ||
		!strings.Contains(answer, `\"code\":\"unavailable\"`) || !strings.Contains(answer, `\"retryable\":true`) {
		t.Fatalf("the call in flight: want a retryable unavailable error saying the server is stopping, got %q", answer)
	}
	select {
	case err := <-streamEnded:
		if err != nil {
			t.Fatalf("the open event stream was cut rather than ended: %v", err)
		}
	case <-time.After(testwait.Timeout):
		t.Fatal("the open event stream did not end after the stop")
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serveHTTP after the stop: %v", err)
		}
	case <-time.After(testwait.Timeout):
		t.Fatal("serveHTTP did not return after the stop")
	}
	testwait.For(t, "the wait's watch to end", func() bool { return d.Watchers() == 0 })
	if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Fatal("still listening after the stop")
	}
}

// smallBuffers gives each accepted connection a small send buffer, so that
// a client that does not read blocks the server's writes after a few
// kilobytes rather than megabytes.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}

// Regression: the SDK writes resources/updated to every subscribed session
// in turn, straight to its event stream, and never gave up on one: a client
// that opened its event stream and stopped reading stalled the
// notifications of every other session for good, once its connection's
// buffers were full. Each write now has a deadline (HTTPWriteTimeout),
// which ends the stuck client's stream.
func TestHTTPStuckStreamDoesNotStallOthers(t *testing.T) {
	d := testdaemon.Start(t)
	d.Mailbox(t, "agent")
	const token = "0123456789abcdef-stuck"
	s := New(Options{SocketPath: d.Socket})
	s.httpWriteTimeout = 100 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.serveHTTP(ctx, smallBuffers{ln}, token) }()
	defer func() { stop(); <-served }()
	addr := ln.Addr().String()
	uri := InboxURI("agent")

	// The stuck client: a session subscribed to the inbox whose event
	// stream is opened on a raw connection that is never read.
	session := ""
	post := func(body string) {
		t.Helper()
		resp, err := http.DefaultClient.Do(rawRequest(context.Background(), "POST", "http://"+addr+"/", token, session, body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("%s: HTTP %d", body, resp.StatusCode)
		}
		session = cmp.Or(session, resp.Header.Get("Mcp-Session-Id"))
	}
	post(initializeLine)
	post(initializedLine)
	post(`{"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"` + uri + `"}}`)
	stuck, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	stuck.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(stuck, "GET / HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\nMcp-Session-Id: %s\r\nMcp-Protocol-Version: 2025-06-18\r\n\r\n",
		addr, token, session)

	// The client that reads, subscribed to the same inbox.
	var got atomic.Int64
	client := mcp.NewClient(&mcp.Implementation{Name: "reader"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(context.Context, *mcp.ResourceUpdatedNotificationRequest) { got.Add(1) }})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/",
		HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}

	const n = 1000 // about 150 kB of events: far past the stuck connection's buffers
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for range n {
			s.mcp.ResourceUpdated(context.Background(), &mcp.ResourceUpdatedNotificationParams{URI: uri})
		}
	}()
	select {
	case <-sent:
	case <-time.After(testwait.Timeout):
		t.Fatal("resources/updated stalled behind a client that does not read its event stream")
	}
	testwait.For(t, "every notification to the client that reads", func() bool { return got.Load() == n })
}

// openRawSession initializes a session of protocol 2025-06-18 over plain
// requests and returns its id.
func openRawSession(t *testing.T, url, token string) string {
	t.Helper()
	resp, _ := rawHTTP(t, "POST", url, token, "", initializeLine)
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("initialize: HTTP %d, session %q", resp.StatusCode, id)
	}
	rawHTTP(t, "POST", url, token, id, initializedLine)
	return id
}

// openEventStream opens session's event stream (GET), which stays open
// until its body is closed.
func openEventStream(t *testing.T, url, token, session string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("event stream: %v", err)
	}
	if stream.StatusCode != http.StatusOK {
		stream.Body.Close()
		t.Fatalf("event stream: %s", stream.Status)
	}
	return stream
}

// rawRequest is a request as an MCP client sends it over HTTP: with the
// token, and in a session when session is not empty. header adds headers in
// pairs of name and value; a "Host" one sets the request's host.
func rawRequest(ctx context.Context, method, url, token, session, body string, header ...string) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	if host := req.Header.Get("Host"); host != "" {
		req.Host = host
	}
	return req
}

// sendRaw sends rawRequest's request and returns the response with its body
// read; it needs no testing.T, so a goroutine may call it.
func sendRaw(ctx context.Context, method, url, token, session, body string, header ...string) (*http.Response, string, error) {
	resp, err := http.DefaultClient.Do(rawRequest(ctx, method, url, token, session, body, header...))
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// rawHTTP is sendRaw, failing t on an error.
func rawHTTP(t *testing.T, method, url, token, session, body string, header ...string) (*http.Response, string) {
	t.Helper()
	resp, b, err := sendRaw(context.Background(), method, url, token, session, body, header...)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// Regression: the server kept every session until its client deleted it,
// so a client that initialized for every call grew the process without end
// (about 5 kB and a goroutine each). Past MaxHTTPSessions a new session
// closes the least recently used idle one; one with a request running (an
// open event stream here) is kept however old.
func TestHTTPSessionsAreBounded(t *testing.T) {
	const token = "0123456789abcdef-many"
	s := New(Options{SocketPath: noDaemon(t)})
	srv := httptest.NewServer(s.HTTPHandler(token))
	defer srv.Close()
	open := func() string { t.Helper(); return openRawSession(t, srv.URL, token) }
	streaming := open()
	defer openEventStream(t, srv.URL, token, streaming).Body.Close()
	idle := open()
	var last string
	for range MaxHTTPSessions + 20 {
		last = open()
	}
	sessions := func() int {
		n := 0
		for range s.mcp.Sessions() {
			n++
		}
		return n
	}
	testwait.For(t, fmt.Sprintf("at most %d sessions", MaxHTTPSessions), func() bool { return sessions() <= MaxHTTPSessions })
	list := `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`
	if resp, _ := rawHTTP(t, "POST", srv.URL, token, idle, list); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the least recently used idle session: HTTP %d, want 404 (closed)", resp.StatusCode)
	}
	for name, id := range map[string]string{"the session with an open event stream": streaming, "the newest session": last} {
		if resp, body := rawHTTP(t, "POST", srv.URL, token, id, list); resp.StatusCode != http.StatusOK || !strings.Contains(body, "email_wait") {
			t.Errorf("%s: HTTP %d %.200s", name, resp.StatusCode, body)
		}
	}
}

// TestHTTPIdleSessionsAreClosed: a client gone without deleting its
// session (killed, its machine asleep) must not keep it, and the inbox
// watch it subscribed to, for good. A session with no request running for
// HTTPSessionIdle is closed; one whose event stream stays open (an agent
// that only listens) and one used meanwhile are kept.
func TestHTTPIdleSessionsAreClosed(t *testing.T) {
	d := testdaemon.Start(t)
	d.Mailbox(t, "agent")
	const token = "0123456789abcdef-idle"
	clock := testclock.New()
	s := New(Options{SocketPath: d.Socket})
	s.now = clock.Now
	defer s.Close()
	srv := httptest.NewServer(s.HTTPHandler(token))
	defer srv.Close()
	open := func() string { t.Helper(); return openRawSession(t, srv.URL, token) }
	list := `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`
	status := func(id string) int {
		t.Helper()
		resp, _ := rawHTTP(t, "POST", srv.URL, token, id, list)
		return resp.StatusCode
	}

	gone := open()
	subscribe := `{"jsonrpc":"2.0","id":4,"method":"resources/subscribe","params":{"uri":"` + InboxURI("agent") + `"}}`
	if resp, body := rawHTTP(t, "POST", srv.URL, token, gone, subscribe); resp.StatusCode != http.StatusOK {
		t.Fatalf("subscribe: HTTP %d %s", resp.StatusCode, body)
	}
	testwait.For(t, "the inbox watch", func() bool { return d.Watchers() == 1 })
	listening := open()
	defer openEventStream(t, srv.URL, token, listening).Body.Close()
	used := open()

	clock.Advance(HTTPSessionIdle - time.Minute)
	if got := status(used); got != http.StatusOK {
		t.Fatalf("the session in use: HTTP %d", got)
	}
	clock.Advance(2 * time.Minute)
	open() // a new session closes the idle ones, as the server's minute tick does
	testwait.For(t, "the idle session's inbox watch to end", func() bool { return d.Watchers() == 0 })
	if got := status(gone); got != http.StatusNotFound {
		t.Errorf("the session idle for %v: HTTP %d, want 404 (closed)", HTTPSessionIdle+time.Minute, got)
	}
	for name, id := range map[string]string{"the session with an open event stream": listening, "the session used meanwhile": used} {
		if got := status(id); got != http.StatusOK {
			t.Errorf("%s: HTTP %d", name, got)
		}
	}
}

// A page in a browser must not reach the server: not one from another
// origin (Origin), nor one whose name was made to resolve to 127.0.0.1 (DNS
// rebinding: Host), even holding the token.
func TestHTTPRefusesForeignPages(t *testing.T) {
	const token = "0123456789abcdef-origin"
	srv := httptest.NewServer(New(Options{SocketPath: noDaemon(t)}).HTTPHandler(token))
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":"):]
	for _, tc := range []struct {
		header []string
		want   int
	}{
		{nil, http.StatusOK},
		{[]string{"Origin", "http://localhost:6274"}, http.StatusOK},
		{[]string{"Origin", "http://127.0.0.1" + port}, http.StatusOK},
		{[]string{"Origin", "http://[::1]:3000"}, http.StatusOK},
		{[]string{"Host", "localhost" + port}, http.StatusOK},
		{[]string{"Origin", "https://evil.example"}, http.StatusForbidden},
		{[]string{"Origin", "http://127.0.0.1.evil.example" + port}, http.StatusForbidden},
		{[]string{"Origin", "null"}, http.StatusForbidden},
		{[]string{"Host", "evil.example" + port}, http.StatusForbidden},
		{[]string{"Host", "evil.example" + port, "Origin", "http://evil.example" + port}, http.StatusForbidden},
	} {
		if resp, body := rawHTTP(t, "POST", srv.URL, token, "", initializeLine, tc.header...); resp.StatusCode != tc.want {
			t.Errorf("%q: HTTP %d, want %d (%.100s)", tc.header, resp.StatusCode, tc.want, body)
		}
	}
}

// Regression: a call whose client went away (closed the connection, or its
// HTTP client gave up) kept running, since the SDK keeps a call for a client
// that resumes its stream and this server keeps nothing to resume from. An
// email_wait so held its daemon connection, one of the uid's
// control.max_connections_per_uid, for up to 10 minutes: a client that
// timed out and retried every minute used ten. The call now ends with its
// POST.
func TestHTTPClientGoneEndsTheWait(t *testing.T) {
	d := testdaemon.Start(t)
	d.Mailbox(t, "agent")
	const token = "0123456789abcdef-gone"
	srv := httptest.NewServer(New(Options{SocketPath: d.Socket}).HTTPHandler(token))
	defer srv.Close()
	resp, _ := rawHTTP(t, "POST", srv.URL, token, "", initializeLine)
	id := resp.Header.Get("Mcp-Session-Id")
	rawHTTP(t, "POST", srv.URL, token, id, initializedLine)

	ctx, hangUp := context.WithCancel(context.Background())
	defer hangUp()
	req := rawRequest(ctx, "POST", srv.URL, token, id,
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"email_wait","arguments":{"mailbox":"agent","subject":"never","timeout_secs":600}}}`,
		postHeader, "1") // a client's own value must not tie the call to another POST
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	testwait.For(t, "the wait's watch", func() bool { return d.Watchers() == 1 })
	hangUp()
	<-gone
	testwait.For(t, "the wait's watch to end with its POST", func() bool { return d.Watchers() == 0 })
	if resp, body := rawHTTP(t, "POST", srv.URL, token, id, `{"jsonrpc":"2.0","id":8,"method":"tools/list"}`); resp.StatusCode != http.StatusOK || !strings.Contains(body, "email_wait") {
		t.Fatalf("the session after its client hung up a call: HTTP %d %.200s", resp.StatusCode, body)
	}
}
