package mcpshim

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

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
	e.s.closeSession(c)
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
