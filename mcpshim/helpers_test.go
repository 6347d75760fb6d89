package mcpshim

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mailctl/mailctl/internal/testdaemon"
)

// env is one shim connected in memory to a client, with the real daemon
// behind it (run in-process, unprivileged, in a temp dir).
type env struct {
	t   *testing.T
	d   *testdaemon.Daemon
	s   *Server
	cs  *mcp.ClientSession
	ctx context.Context

	schemas map[string]*jsonschema.Resolved

	mu       sync.Mutex
	updated  []string
	progress []*mcp.ProgressNotificationParams
}

type envOpt func(*Options)

func shortTempDir(t testing.TB) string {
	// Unix socket paths are limited to 108 bytes; t.TempDir can be longer.
	dir, err := os.MkdirTemp("", "mcpshim")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func newEnv(t *testing.T, opts ...envOpt) *env {
	t.Helper()
	d := testdaemon.Start(t)
	e := connect(t, d.Socket, opts...)
	e.d = d
	return e
}

// deliver sends m to mailbox (created, owned by the test's user, when
// needed) over SMTP and returns its id.
func (e *env) deliver(mailbox string, m testdaemon.Message) string {
	e.t.Helper()
	e.d.Mailbox(e.t, mailbox)
	return e.d.Deliver(e.t, mailbox, m)
}

// deliverSignedBy delivers m with a valid DKIM signature of domain, which
// need not be the From's.
func (e *env) deliverSignedBy(mailbox, domain string, m testdaemon.Message) string {
	e.t.Helper()
	e.d.Mailbox(e.t, mailbox)
	m.SignAs = domain
	return e.d.Deliver(e.t, mailbox, m)
}

// trusted is a message the daemon marks trusted: signed for a trusted domain.
func trusted(m testdaemon.Message) testdaemon.Message {
	if m.From == "" {
		m.From = "sender@" + testdaemon.TrustedDomain
	}
	m.Sign = true
	return m
}

func connect(t *testing.T, socket string, opts ...envOpt) *env {
	t.Helper()
	o := Options{SocketPath: socket, Version: "test"}
	for _, f := range opts {
		f(&o)
	}
	s := New(o)
	s.progressEvery = 30 * time.Millisecond
	s.dialTimeout = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	e := &env{t: t, s: s, ctx: ctx}
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.mcp.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
			e.mu.Lock()
			e.updated = append(e.updated, r.Params.URI)
			e.mu.Unlock()
		},
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			e.mu.Lock()
			e.progress = append(e.progress, r.Params)
			e.mu.Unlock()
		},
	})
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.cs = cs
	t.Cleanup(func() { cs.Close(); ss.Close(); s.Close() })
	return e
}

// call runs a tool and returns the raw result and its structured content.
func (e *env) call(name string, args map[string]any) (*mcp.CallToolResult, map[string]any) {
	e.t.Helper()
	res, err := e.cs.CallTool(e.ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		e.t.Fatalf("%s: protocol error: %v", name, err)
	}
	sc, _ := res.StructuredContent.(map[string]any)
	if sc == nil {
		e.t.Fatalf("%s: no structured content: %+v", name, res)
	}
	if len(res.Content) != 1 {
		e.t.Fatalf("%s: want one text content, got %d", name, len(res.Content))
	}
	var fromText map[string]any
	if err := json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &fromText); err != nil {
		e.t.Fatalf("%s: text content is not the JSON: %v", name, err)
	}
	a, _ := json.Marshal(sc)
	b, _ := json.Marshal(fromText)
	if string(a) != string(b) {
		e.t.Fatalf("%s: text content differs from structured content", name)
	}
	return res, sc
}

// ok calls a tool that must succeed and decodes its data into out.
func (e *env) ok(name string, args map[string]any, out any) map[string]any {
	e.t.Helper()
	res, sc := e.call(name, args)
	if res.IsError {
		e.t.Fatalf("%s(%v) failed: %v", name, args, sc)
	}
	for _, k := range []string{"summary", "data", "meta"} {
		if _, ok := sc[k]; !ok {
			e.t.Fatalf("%s: result lacks %q: %v", name, k, sc)
		}
	}
	e.validateOutput(name, sc)
	meta := sc["meta"].(map[string]any)
	if _, err := time.Parse(time.RFC3339Nano, meta["now_utc"].(string)); err != nil {
		e.t.Fatalf("%s: meta.now_utc: %v", name, err)
	}
	if out != nil {
		b, _ := json.Marshal(sc["data"])
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("%s: decoding data: %v", name, err)
		}
	}
	return sc
}

// call2 calls a tool that must fail and returns its error content.
func (e *env) call2(name string, args map[string]any) map[string]any {
	e.t.Helper()
	res, sc := e.call(name, args)
	if !res.IsError {
		e.t.Fatalf("%s(%v) succeeded, want an error: %v", name, args, sc)
	}
	return sc
}

// fail calls a tool that must fail with code.
func (e *env) fail(name string, args map[string]any, code string) map[string]any {
	e.t.Helper()
	res, sc := e.call(name, args)
	if !res.IsError {
		e.t.Fatalf("%s(%v) succeeded, want error %s: %v", name, args, code, sc)
	}
	e.validateOutput(name, sc)
	if sc["code"] != code {
		e.t.Fatalf("%s(%v): code %v, want %s (%v)", name, args, sc["code"], code, sc["message"])
	}
	if _, ok := sc["retryable"].(bool); !ok {
		e.t.Fatalf("%s: error lacks retryable: %v", name, sc)
	}
	return sc
}

// validateOutput checks a result against the tool's declared output schema,
// as strict clients (the TypeScript SDK) do.
func (e *env) validateOutput(name string, sc map[string]any) {
	e.t.Helper()
	if e.schemas == nil {
		e.schemas = map[string]*jsonschema.Resolved{}
		res, err := e.cs.ListTools(e.ctx, nil)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, tool := range res.Tools {
			b, _ := json.Marshal(tool.OutputSchema)
			var s jsonschema.Schema
			if err := json.Unmarshal(b, &s); err != nil {
				e.t.Fatal(err)
			}
			r, err := s.Resolve(nil)
			if err != nil {
				e.t.Fatalf("%s: output schema: %v", tool.Name, err)
			}
			e.schemas[tool.Name] = r
		}
	}
	if err := e.schemas[name].Validate(sc); err != nil {
		e.t.Fatalf("%s: result does not match its output schema: %v", name, err)
	}
}

func (e *env) updates() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.updated...)
}

func (e *env) progressCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.progress)
}
