package mcpshim

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/internal/testwait"
)

// TestSubscriptionsBelongToTheirSessions: sessions of one server (the
// clients of `mailctl mcp --http`) share the daemon watch of an inbox they
// subscribe to with resources/subscribe (protocol 2025-06-18, where nothing
// pairs a subscribe with its unsubscribe). A session unsubscribing what it
// never subscribed, or twice, must not end the watch another session is
// notified through; a session that ends without unsubscribing (deleted by
// its client, or closed by the server as the least recently used) must not
// keep the watch (one of the uid's daemon connections) once the others have
// gone.
func TestSubscriptionsBelongToTheirSessions(t *testing.T) {
	e := newEnv(t)
	e.d.Mailbox(t, "agent")
	uri := InboxURI("agent")
	const token = "0123456789abcdef-subs"
	srv := httptest.NewServer(e.s.HTTPHandler(token))
	defer srv.Close()

	// a reads its notifications and stays subscribed until the end.
	var updates atomic.Int64
	client := mcp.NewClient(&mcp.Implementation{Name: "a"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
			if r.Params.URI == uri {
				updates.Add(1)
			}
		}})
	a, err := client.Connect(e.ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL,
		HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Subscribe(e.ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the inbox watch", func() bool { return e.d.Watchers() == 1 })
	delivered := int64(0)
	aNotified := func(after string) {
		t.Helper()
		// Each delivery is one new_mail event, so one resources/updated.
		e.d.Deliver(t, "agent", testdaemon.Message{From: "a@x.test", Subject: after})
		delivered++
		testwait.For(t, "resources/updated to the session still subscribed, after "+after,
			func() bool { return updates.Load() == delivered })
	}
	aNotified("a's subscribe")

	// The other sessions speak 2025-06-18 over plain requests.
	open := func() string { t.Helper(); return openRawSession(t, srv.URL, token) }
	call := func(session, method string) {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":7,"method":"resources/` + method + `","params":{"uri":"` + uri + `"}}`
		if resp, out := rawHTTP(t, "POST", srv.URL, token, session, body); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: HTTP %d %s", method, resp.StatusCode, out)
		}
	}

	b := open()
	call(b, "unsubscribe")
	aNotified("another session's unsubscribe of what it never subscribed")
	call(b, "subscribe")
	call(b, "unsubscribe")
	call(b, "unsubscribe")
	aNotified("another session's second unsubscribe")

	// b ends without unsubscribing, its client deleting it; c the same,
	// closed by the server as the least recently used session.
	call(b, "subscribe")
	if resp, out := rawHTTP(t, "DELETE", srv.URL, token, b, ""); resp.StatusCode >= 300 {
		t.Fatalf("DELETE session: HTTP %d %s", resp.StatusCode, out)
	}
	c := open()
	call(c, "subscribe")
	e.s.closeSession(c, "least recently used")
	aNotified("the end of the other sessions")
	if n := e.d.Watchers(); n != 1 {
		t.Errorf("%d daemon watches for one inbox, want 1", n)
	}

	a.Close()
	testwait.For(t, "the daemon watch to end with the last session subscribed", func() bool { return e.d.Watchers() == 0 })
}

// TestSubscriptionOutlivesADaemonRestart: a daemon restart (an upgrade,
// systemctl restart) ends the watch behind an inbox subscription. The
// shim watches again as soon as the daemon answers, tells the session the
// inbox changed (mail may have come meanwhile), and goes on notifying it,
// without the agent subscribing again.
func TestSubscriptionOutlivesADaemonRestart(t *testing.T) {
	e := newEnv(t)
	e.d.Mailbox(t, "agent")
	uri := InboxURI("agent")
	if err := e.cs.Subscribe(e.ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the inbox watch", func() bool { return e.d.Watchers() == 1 })
	e.d.Restart(t)
	testwait.For(t, "the inbox watched again after the restart", func() bool { return e.d.Watchers() == 1 })
	testwait.For(t, "resources/updated for what the gap may hold", func() bool { return len(e.updates()) == 1 })
	e.d.Deliver(t, "agent", testdaemon.Message{From: "a@x.test", Subject: "after the restart"})
	testwait.For(t, "resources/updated for mail after the restart", func() bool { return len(e.updates()) == 2 })
	if err := e.cs.Unsubscribe(e.ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the watch to end at the unsubscribe", func() bool { return e.d.Watchers() == 0 })
}

// TestSlowDaemonHoldsUpOnlyItsOwnSubscribe: a subscribe dials the daemon
// for a new watch, and a daemon that is slow to answer (busy, or starting)
// must hold up that subscribe only: another session's unsubscribe, and a
// request given up while it waits, go on; the subscribe succeeds once the
// daemon answers.
func TestSlowDaemonHoldsUpOnlyItsOwnSubscribe(t *testing.T) {
	d := testdaemon.Start(t)
	d.Mailbox(t, "agent")
	d.Mailbox(t, "other")
	p := newHoldingProxy(t, d.Socket)
	e := connect(t, p.path)
	e.d = d
	const token = "0123456789abcdef-slow"
	srv := httptest.NewServer(e.s.HTTPHandler(token))
	defer srv.Close()
	if err := e.cs.Subscribe(e.ctx, &mcp.SubscribeParams{URI: InboxURI("agent")}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the agent inbox watch", func() bool { return d.Watchers() == 1 })

	// The daemon stops answering new connections; a second session's
	// subscribe waits for it.
	p.hold()
	subscribe := func(ctx context.Context, session string) error {
		body := `{"jsonrpc":"2.0","id":9,"method":"resources/subscribe","params":{"uri":"` + InboxURI("other") + `"}}`
		resp, out, err := sendRaw(ctx, "POST", srv.URL, token, session, body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || !strings.Contains(out, `"result"`) {
			return fmt.Errorf("HTTP %d %s", resp.StatusCode, out)
		}
		return nil
	}
	second, third := openRawSession(t, srv.URL, token), openRawSession(t, srv.URL, token)
	subscribed := make(chan error, 1)
	go func() { subscribed <- subscribe(e.ctx, second) }()
	testwait.For(t, "the second session's watch to dial the held daemon", func() bool { return p.heldCount() == 1 })

	// A third session joins the watch being made, then its client gives up.
	gaveUp, giveUp := context.WithCancel(e.ctx)
	cancelled := make(chan error, 1)
	go func() { cancelled <- subscribe(gaveUp, third) }()
	testwait.For(t, "the third session to wait for the same watch", func() bool { return e.s.subs.waiting("other") == 2 })
	giveUp()
	if err := <-cancelled; err == nil {
		t.Error("a subscribe given up before the daemon answered succeeded")
	}
	testwait.For(t, "the session that gave up to let go", func() bool { return e.s.subs.waiting("other") == 1 })

	// Meanwhile the first session unsubscribes, and its watch ends.
	if err := e.cs.Unsubscribe(e.ctx, &mcp.UnsubscribeParams{URI: InboxURI("agent")}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the agent watch to end while another subscribe waits for the daemon", func() bool { return d.Watchers() == 0 })
	select {
	case err := <-subscribed:
		t.Fatalf("the subscribe answered before the daemon did: %v", err)
	default:
	}

	// The daemon answers: the waiting subscribe succeeds, and its watch
	// notifies (the first session joins it to see).
	p.release()
	if err := <-subscribed; err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the other inbox watch", func() bool { return d.Watchers() == 1 })
	if err := e.cs.Subscribe(e.ctx, &mcp.SubscribeParams{URI: InboxURI("other")}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "both sessions on the watch", func() bool { return e.s.subs.waiting("other") == 2 })
	d.Deliver(t, "other", testdaemon.Message{From: "a@x.test", Subject: "after the wait"})
	testwait.For(t, "resources/updated through the watch that waited", func() bool {
		return slices.Contains(e.updates(), InboxURI("other"))
	})
	if n := d.Watchers(); n != 1 {
		t.Errorf("%d daemon watches, want 1", n)
	}
}

// TestSlowDaemonHoldsNoCallBeyondItsContext: the tools share one daemon
// connection, and while it is being made (a daemon slow to answer) every
// call needing it waits for that one dial, each no longer than its own
// request allows: a call its client gives up returns at once, and the
// others succeed on the same connection once the daemon answers.
func TestSlowDaemonHoldsNoCallBeyondItsContext(t *testing.T) {
	d := testdaemon.Start(t)
	d.Mailbox(t, "agent")
	p := newHoldingProxy(t, d.Socket)
	p.hold()
	e := connect(t, p.path)
	e.d = d
	e.s.dialTimeout = time.Minute
	list := func(ctx context.Context) error {
		res, err := e.cs.CallTool(ctx, &mcp.CallToolParams{Name: "mailbox_list", Arguments: map[string]any{}})
		if err == nil && res.IsError {
			err = fmt.Errorf("tool error: %+v", res.Content)
		}
		return err
	}
	first := make(chan error, 1)
	go func() { first <- list(e.ctx) }()
	testwait.For(t, "the first call to dial the held daemon", func() bool { return p.heldCount() == 1 })

	// The server's side of a call its client gave up (the client's own
	// CallTool returns at once whatever the server does).
	gaveUp, giveUp := context.WithCancel(e.ctx)
	var returned atomic.Bool
	go func() {
		if _, err := e.s.conn(gaveUp); err == nil {
			t.Error("a call given up before the daemon answered got a connection")
		}
		returned.Store(true)
	}()
	giveUp()
	testwait.For(t, "a call given up while the daemon is dialled to return", returned.Load)

	p.release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := list(e.ctx); err != nil {
		t.Fatal(err)
	}
	if n := p.accepted(); n != 1 {
		t.Errorf("%d connections to the daemon, want the one shared", n)
	}
}

// holdingProxy stands between the shim and the daemon's socket. While held,
// the connections it accepts are neither read nor forwarded: to the shim, a
// daemon that is slow to answer.
type holdingProxy struct {
	path, target string
	mu           sync.Mutex
	held         bool
	parked       []net.Conn
	conns        []net.Conn
	accepts      int
}

func newHoldingProxy(t *testing.T, target string) *holdingProxy {
	p := &holdingProxy{path: filepath.Join(t.TempDir(), "proxy.sock"), target: target}
	ln, err := net.Listen("unix", p.path)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.accepts++
			p.conns = append(p.conns, c)
			if p.held {
				p.parked = append(p.parked, c)
				p.mu.Unlock()
				continue
			}
			p.mu.Unlock()
			p.forward(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	return p
}

func (p *holdingProxy) forward(c net.Conn) {
	u, err := net.Dial("unix", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, u)
	p.mu.Unlock()
	go func() { io.Copy(u, c); u.Close(); c.Close() }()
	go func() { io.Copy(c, u); u.Close(); c.Close() }()
}

func (p *holdingProxy) hold() { p.mu.Lock(); p.held = true; p.mu.Unlock() }

func (p *holdingProxy) heldCount() int { p.mu.Lock(); defer p.mu.Unlock(); return len(p.parked) }

func (p *holdingProxy) accepted() int { p.mu.Lock(); defer p.mu.Unlock(); return p.accepts }

func (p *holdingProxy) release() {
	p.mu.Lock()
	parked := p.parked
	p.held, p.parked = false, nil
	p.mu.Unlock()
	for _, c := range parked {
		p.forward(c)
	}
}

// waiting reports how many sessions mailbox's watch holds.
func (ss *subscriptions) waiting(mailbox string) int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if w := ss.active[mailbox]; w != nil {
		return len(w.sessions)
	}
	return 0
}
