package mcpshim

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mailctl/mailctl/protocol"
)

// CheckLoopback refuses listen addresses that are not on a loopback interface:
// the HTTP transport acts with the user's uid and must not be reachable from
// other hosts.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--http %q: want HOST:PORT on a loopback address such as 127.0.0.1:8765: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--http %q: only loopback addresses (127.0.0.1, [::1], localhost) are allowed; the server acts as you", addr)
	}
	return nil
}

// ReadTokenFile reads the bearer token from path, refusing a file that other
// users could read, that belongs to someone else, or that holds more than
// MaxTokenFileBytes (refused, never cut short).
func ReadTokenFile(path string) (string, error) {
	f, err := openRegular(path)
	if errors.Is(err, errNotRegular) {
		return "", fmt.Errorf("token file %s is not a regular file", path)
	}
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("token file %s has mode %04o: make it readable by you only (chmod 600 %s)", path, perm, path)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Getuid() {
		return "", fmt.Errorf("token file %s belongs to uid %d, not to you (uid %d)", path, sys.Uid, os.Getuid())
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxTokenFileBytes+1))
	if err != nil {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	if len(b) > MaxTokenFileBytes {
		return "", fmt.Errorf("token file %s holds more than %d bytes: it must hold the token alone (e.g. openssl rand -hex 32 > %s)", path, MaxTokenFileBytes, path)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 {
		return "", fmt.Errorf("token file %s: the token must be at least 16 characters (e.g. openssl rand -hex 32)", path)
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c <= ' ' || c > '~' {
			return "", fmt.Errorf("token file %s: the token must be one word of printable ASCII (an Authorization header carries nothing else); byte %d is %q", path, i, c)
		}
	}
	return tok, nil
}

// MaxTokenFileBytes bounds the bearer token file, line end included.
const MaxTokenFileBytes = 4096

// HTTPHandler serves the Streamable HTTP transport behind a bearer token check.
// Its sessions idle for longer than HTTPSessionIdle are closed as new ones
// are made.
func (s *Server) HTTPHandler(token string) http.Handler {
	return s.httpHandler(token, new(requestCount), newSessionUse(s.now))
}

// httpHandler is HTTPHandler counting the POST requests it serves in posts
// and its sessions' use in sessions.
func (s *Server) httpHandler(token string, posts *requestCount, sessions *sessionUse) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{Logger: s.log,
		MaxRequestBodyBytes: MaxRequestBytes}) // the SDK's 4 MiB default would refuse a 3 MiB attachment
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The header came whole (ReadHeaderTimeout); the body must follow
		// within httpBodyTimeout. The deadline is lifted once it has, as
		// the answer may be an event stream that lasts.
		rc := http.NewResponseController(w)
		rc.SetReadDeadline(time.Now().Add(s.httpBodyTimeout))
		if o := r.Header.Get("Origin"); o != "" && !loopbackOrigin(o) {
			// A web page the user visits must not drive the server
			// (the SDK checks Host, which catches DNS rebinding).
			http.Error(w, fmt.Sprintf("Origin %q refused: only pages served from a loopback address may call this server", o), http.StatusForbidden)
			return
		}
		got := []byte(r.Header.Get("Authorization"))
		if token == "" || subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mailctl"`)
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodPost {
			posts.add()
			defer posts.done()
			bad, err := refusePost(r)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				// The deadline stays: the connection closes after the answer.
				b, _ := errorResponse(nil, jsonrpc.CodeInvalidRequest, fmt.Sprintf(
					"the request body did not arrive whole within %s of its header: send each message at once", s.httpBodyTimeout), protocol.CodeTimeout)
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Connection", "close")
				w.WriteHeader(http.StatusRequestTimeout)
				w.Write(b)
				return
			}
			if bad != nil {
				// A JSON-RPC error, as the stdio server answers the same.
				b, _ := errorResponse(bad.id, bad.code, bad.msg, protocol.CodeInvalidInput)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				w.Write(b)
				return
			}
			defer s.postCtx.register(r)()
		}
		rc.SetReadDeadline(time.Time{})
		id := r.Header.Get("Mcp-Session-Id")
		if id != "" {
			sessions.begin(id)
			defer sessions.end(id)
		}
		dw := &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: s.httpWriteTimeout}
		h.ServeHTTP(dw, r)
		dw.arm() // for what the server writes after the handler: the end of a chunked body
		if id == "" {
			if id = w.Header().Get("Mcp-Session-Id"); id != "" {
				s.closeSession(sessions.add(id), "least recently used")
				s.closeIdle(sessions)
			}
		}
	})
}

// postRefusal is what the server answers a POST itself, as a JSON-RPC
// error with status 400, before the SDK sees it: the SDK would answer a body
// that is not JSON, or a method no MCP server serves, with a line of text no
// JSON-RPC client reads, and mishandle the ids badID refuses.
type postRefusal struct {
	id   json.RawMessage // nil: null
	code int64
	msg  string
}

// refusePost reads the body of a POST (at most one byte past what the SDK
// takes, so that it still answers 413 past that) and puts it back for the
// SDK. It returns the refusal of the body, or of the first message of a
// batch that is refused, or nil when the SDK is to serve it; and the error
// that cut the body short, if one did.
func refusePost(r *http.Request) (*postRefusal, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxRequestBytes+1))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
	if err != nil || len(body) > MaxRequestBytes {
		return nil, err // the SDK meets the same error, or answers 413
	}
	return refuseBody(body), nil
}

// refuseBody is refusePost on a body read whole.
func refuseBody(body []byte) *postRefusal {
	var bad *postRefusal
	messages := 0
	valid, tooDeep := probeJSON(body, sdkMaxJSONDepth, true, func(p messageProbe, ok bool) {
		messages++
		if bad == nil {
			bad = refuseMessage(p, ok)
		}
	})
	switch {
	case tooDeep:
		// Valid JSON too (encoding/json's limit is 10000): the SDK's
		// decoder refuses it, with a line of text.
		return &postRefusal{code: jsonrpc.CodeParseError, msg: fmt.Sprintf("parse error: the body nests arrays and objects more than %d deep", sdkMaxJSONDepth)}
	case !valid:
		return &postRefusal{code: jsonrpc.CodeParseError, msg: "parse error: the body is not JSON: send one JSON-RPC message"}
	case messages == 0: // a body of one value is one message
		return &postRefusal{code: jsonrpc.CodeInvalidRequest, msg: "invalid request: an empty batch: send one JSON-RPC message"}
	}
	return bad
}

// refuseMessage refuses one JSON-RPC message of a valid body, read as
// probe (ok false: no object), that is no object, or whose id badID
// refuses, or whose method is not one a client sends a server. Anything
// else, a response included, is left to the SDK.
func refuseMessage(probe messageProbe, ok bool) *postRefusal {
	if !ok {
		// Valid JSON, and no object: no message of JSON-RPC's.
		return &postRefusal{code: jsonrpc.CodeInvalidRequest, msg: "invalid request: a JSON-RPC message is a JSON object"}
	}
	if id, why := probe.badID(); why != "" {
		return &postRefusal{id: id, code: jsonrpc.CodeInvalidRequest, msg: why}
	}
	if probe.Method == nil || clientMethods[*probe.Method] {
		return nil
	}
	var id json.RawMessage
	if validID(probe.ID) {
		id = probe.ID // a notification's (no id) is answered under null, as HTTP needs an answer
	}
	return &postRefusal{id: id, code: jsonrpc.CodeMethodNotFound,
		msg: fmt.Sprintf("method not found: %q is not a method of MCP this server serves", *probe.Method)}
}

// sdkMaxJSONDepth is the nesting of arrays and objects past which the
// SDK's decoder refuses a message, valid JSON or not.
const sdkMaxJSONDepth = 1000

// clientMethods are the methods of MCP a client sends a server: the
// requests and notifications of the specification that the SDK serves
// (TestHTTPServesEveryClientMethod).
var clientMethods = map[string]bool{
	"initialize":                       true,
	"ping":                             true,
	"completion/complete":              true,
	"logging/setLevel":                 true,
	"prompts/list":                     true,
	"prompts/get":                      true,
	"resources/list":                   true,
	"resources/templates/list":         true,
	"resources/read":                   true,
	"resources/subscribe":              true,
	"resources/unsubscribe":            true,
	"tools/list":                       true,
	"tools/call":                       true,
	"server/discover":                  true,
	"subscriptions/listen":             true,
	"notifications/initialized":        true,
	"notifications/cancelled":          true,
	"notifications/progress":           true,
	"notifications/roots/list_changed": true,
}

// loopbackOrigin reports whether a request's Origin is a page served from a
// loopback address (a local inspector, say).
func loopbackOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	if u.Hostname() == "localhost" {
		return true
	}
	ip := net.ParseIP(u.Hostname())
	return ip != nil && ip.IsLoopback()
}

// MaxHTTPSessions bounds the sessions an HTTP server keeps. The SDK keeps a
// session until its client deletes it, and a client that initializes anew
// for every call and never deletes would grow the server without end; past
// the bound, a new session closes the one least recently used among those
// with no request running (an open event stream counts as one). Its client
// gets 404 on its next request and, as the specification asks, initializes
// again.
const MaxHTTPSessions = 100

// HTTPSessionIdle is how long an HTTP session may go with no request
// running (an open event stream counts as one) and none starting or ending
// before the server closes it: a client gone without deleting its session
// (killed, or its machine asleep) would otherwise keep it, with its inbox
// watches and their daemon connections, until MaxHTTPSessions newer ones
// pushed it out. A client that keeps its event stream open, even one that
// only listens for notifications, is never idle.
const HTTPSessionIdle = 30 * time.Minute

// sessionUse tracks the HTTP sessions the server created, in order of use.
type sessionUse struct {
	mu   sync.Mutex
	max  int
	idle time.Duration
	now  func() time.Time
	tick uint64
	used map[string]*sessionUsed
}

func newSessionUse(now func() time.Time) *sessionUse {
	return &sessionUse{max: MaxHTTPSessions, idle: HTTPSessionIdle, now: now, used: map[string]*sessionUsed{}}
}

type sessionUsed struct {
	last    uint64    // tick of the last request's start or end
	at      time.Time // and its time
	running int
}

func (u *sessionUse) begin(id string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if s := u.used[id]; s != nil {
		u.tick++
		s.last, s.at, s.running = u.tick, u.now(), s.running+1
	}
}

func (u *sessionUse) end(id string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if s := u.used[id]; s != nil {
		u.tick++
		s.last, s.at, s.running = u.tick, u.now(), s.running-1
	}
}

// add records a new session and, past the bound, forgets and returns the
// least recently used idle one, to be closed ("" when none is).
func (u *sessionUse) add(id string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.tick++
	u.used[id] = &sessionUsed{last: u.tick, at: u.now()}
	if len(u.used) <= u.max {
		return ""
	}
	oldest := ""
	for k, s := range u.used {
		if k != id && s.running == 0 && (oldest == "" || s.last < u.used[oldest].last) {
			oldest = k
		}
	}
	delete(u.used, oldest)
	return oldest
}

// expired forgets and returns the sessions idle for longer than u.idle.
func (u *sessionUse) expired() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	now := u.now()
	var out []string
	for k, s := range u.used {
		if s.running == 0 && now.Sub(s.at) > u.idle {
			out = append(out, k)
			delete(u.used, k)
		}
	}
	return out
}

// closeIdle closes the sessions idle for longer than HTTPSessionIdle.
func (s *Server) closeIdle(u *sessionUse) {
	for _, id := range u.expired() {
		s.closeSession(id, "idle")
	}
}

// closeSession closes the session with that id, if it is still open; why
// says why, for the log.
func (s *Server) closeSession(id, why string) {
	if id == "" {
		return
	}
	for ss := range s.mcp.Sessions() {
		if ss.ID() == id {
			s.log.Info("closing an HTTP session", "session", id, "why", why, "max", MaxHTTPSessions, "idle_after", HTTPSessionIdle)
			ss.Close()
			return
		}
	}
}

// HTTPWriteTimeout bounds each write to an HTTP client. The SDK writes
// every notification (resources/updated to all subscribed sessions, one
// after another) straight to the client's connection and never gives up, so
// one client that stopped reading its event stream would stall the
// notifications of every other session; its writes fail after this instead,
// which ends its stream. A client that reads never comes near it: a write
// blocks only once the kernel's buffers for the connection are full.
const HTTPWriteTimeout = 30 * time.Second

// HTTPIdleTimeout closes a connection left unused after its last answer:
// any local user can connect, and one kept alive for good would hold a
// descriptor of the server's. A client connects again when it needs to.
const HTTPIdleTimeout = 2 * time.Minute

// HTTPBodyTimeout bounds how long a request's body may take to arrive once
// its header has: a POST's body is held in memory until it ends (up to
// MaxRequestBytes), and a client that sent part of one and stopped would
// hold it, and its connection, for good. Past it the client is answered
// 408 and the connection closed.
const HTTPBodyTimeout = 30 * time.Second

// deadlineWriter sets a fresh write deadline on the connection before each
// write or flush of the response. It is the writer the SDK is given, so its
// Write also gives the SDK's answers of code 0 their JSON-RPC code.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (d *deadlineWriter) arm() { d.rc.SetWriteDeadline(time.Now().Add(d.timeout)) }

func (d *deadlineWriter) WriteHeader(code int) { d.arm(); d.ResponseWriter.WriteHeader(code) }

// Write writes b, an answer given its JSON-RPC code when the SDK left it
// without one (withRPCCodeSSE).
func (d *deadlineWriter) Write(b []byte) (int, error) {
	d.arm()
	if fixed, ok := withRPCCodeSSE(b); ok {
		if _, err := d.ResponseWriter.Write(fixed); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return d.ResponseWriter.Write(b)
}

// withRPCCodeSSE gives an answer of code 0 its JSON-RPC code, as the stdio
// transport does as it writes one (withRPCCode). The SDK refuses some calls
// with a plain error before any middleware sees them (a call on a POST
// without a session, made before initialize) and writes the answer with
// code 0, a code JSON-RPC does not define. b is what the SDK writes at once:
// one server-sent event ("data: " and the message on its last line) or a
// message alone. ok is false when b needs no change.
func withRPCCodeSSE(b []byte) (fixed []byte, ok bool) {
	if !bytes.Contains(b, []byte(`"code":0`)) {
		return nil, false // the common case, found cheaply
	}
	start, end := 0, len(b)
	if b[0] != '{' {
		i := bytes.LastIndex(b, []byte("\ndata: "))
		if !bytes.HasPrefix(b, []byte("data: ")) && i < 0 || !bytes.HasSuffix(b, []byte("\n\n")) {
			return nil, false
		}
		start, end = max(i+1, 0)+len("data: "), len(b)-len("\n\n")
	}
	msg, err := jsonrpc.DecodeMessage(b[start:end])
	if err != nil {
		return nil, false
	}
	r, isResp := msg.(*jsonrpc.Response)
	var rpc *jsonrpc.Error
	if !isResp || !errors.As(r.Error, &rpc) || rpc.Code != 0 {
		return nil, false
	}
	r.Error = withRPCCode(errors.New(rpc.Message))
	data, err := jsonrpc.EncodeMessage(r)
	if err != nil {
		return nil, false
	}
	return slices.Concat(b[:start], data, b[end:]), true
}

// FlushError is what http.ResponseController.Flush calls, which the SDK uses.
func (d *deadlineWriter) FlushError() error { d.arm(); return d.rc.Flush() }

func (d *deadlineWriter) Flush() { d.FlushError() }

// Unwrap lets http.ResponseController reach the connection's writer.
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }

// requestCount counts requests being served and says when none is.
type requestCount struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n next reaches 0; nil while nobody waits
}

func (c *requestCount) add() {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}

func (c *requestCount) done() {
	c.mu.Lock()
	c.n--
	if c.n == 0 && c.zero != nil {
		close(c.zero)
		c.zero = nil
	}
	c.mu.Unlock()
}

// idle returns a channel closed once no request is being served.
func (c *requestCount) idle() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	if c.zero == nil {
		c.zero = make(chan struct{})
	}
	return c.zero
}

// RunHTTP serves Streamable HTTP on a loopback addr until ctx ends.
func (s *Server) RunHTTP(ctx context.Context, addr, token string) error {
	if err := CheckLoopback(addr); err != nil {
		return err
	}
	if token == "" {
		return errors.New("a bearer token is required (--token-file)")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		s.Close()
		return err
	}
	return s.serveHTTP(ctx, ln, token)
}

// httpStopGrace bounds each step of an HTTP server's stop: the calls in
// flight answering, then the connections closing.
const httpStopGrace = 5 * time.Second

// serveHTTP serves on ln until ctx ends, then stops: it takes no new
// connection, cancels every call still running (each answers with an error
// saying the server is stopping, rather than leaving its client an empty
// reply), waits for those answers to be written, closes every session (which
// ends the clients' open event streams) and returns once every connection has
// closed.
func (s *Server) serveHTTP(ctx context.Context, ln net.Listener, token string) error {
	defer s.Close()
	posts := new(requestCount)
	sessions := newSessionUse(s.now)
	srv := &http.Server{Handler: s.httpHandler(token, posts, sessions), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: s.httpIdleTimeout}
	ctx, cancel := context.WithCancel(ctx) // cancelled once Serve returns, whyever it does
	stopped := make(chan struct{})
	go func() {
		// Idle sessions are closed as new ones come, and at least
		// once a minute while none does.
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.closeIdle(sessions)
			}
		}
	}()
	go func() {
		defer close(stopped)
		<-ctx.Done()
		s.stop()
		sctx, cancelShutdown := context.WithTimeout(context.Background(), 2*httpStopGrace)
		defer cancelShutdown()
		shut := make(chan error, 1)
		go func() { shut <- srv.Shutdown(sctx) }()
		grace := time.NewTimer(httpStopGrace)
		defer grace.Stop()
		select {
		case <-posts.idle():
		case <-grace.C:
		}
		for ss := range s.mcp.Sessions() {
			ss.Close()
		}
		if <-shut != nil {
			srv.Close()
		}
	}()
	s.log.Info("serving MCP over HTTP", "addr", ln.Addr().String())
	err := srv.Serve(ln)
	cancel()
	<-stopped
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// postHeader carries, from the HTTP handler to the calls a POST holds, the
// key of that POST's context (the SDK hands each call its request's header,
// not its context). The handler sets it, replacing any a client sent.
const postHeader = "Mailctl-Post"

// postContexts holds the context of every POST being served.
type postContexts struct {
	mu   sync.Mutex
	next uint64
	ctx  map[string]context.Context
}

// register records r's context under a fresh key set in r's header, and
// returns the function that forgets it.
func (p *postContexts) register(r *http.Request) func() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx == nil {
		p.ctx = map[string]context.Context{}
	}
	p.next++
	key := strconv.FormatUint(p.next, 10)
	p.ctx[key] = r.Context()
	r.Header.Set(postHeader, key)
	return func() {
		p.mu.Lock()
		delete(p.ctx, key)
		p.mu.Unlock()
	}
}

// lookup returns the context of the POST with that key; ok is false when
// that POST has ended.
func (p *postContexts) lookup(key string) (ctx context.Context, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ctx, ok = p.ctx[key]
	return ctx, ok
}

var errClientGone = errors.New("the HTTP client closed the request")

// cancelWithPOST cancels a call received over HTTP once the POST that
// carried it ends unanswered (its client closed the connection or gave
// up). The SDK keeps such a call running, for a client that resumes the
// stream, but this server keeps no events to resume from: the answer could
// never be read, and an email_wait would hold its daemon connection (one of
// the uid's control.max_connections_per_uid) for up to MaxWaitSecs.
func (s *Server) cancelWithPOST(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		extra := req.GetExtra()
		if extra == nil || extra.Header.Get(postHeader) == "" || strings.HasPrefix(method, "notifications/") {
			return next(ctx, method, req) // not over HTTP, or answered at once (202)
		}
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		post, ok := s.postCtx.lookup(extra.Header.Get(postHeader))
		if !ok {
			cancel(errClientGone) // the POST ended before the call began
		} else {
			defer context.AfterFunc(post, func() { cancel(errClientGone) })()
		}
		return next(ctx, method, req)
	}
}
