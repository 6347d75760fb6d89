package mcpshim

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/mailctl/mailctl/internal/testwait"
)

// TestSubscriptionsBelongToTheirSessions: sessions of one server (the
// clients of `mailctl mcp --http`) share the daemon watch of an inbox they
// subscribe to with resources/subscribe (protocol 2025-06-18, where nothing
// pairs a subscribe with its unsubscribe). A session unsubscribing what it
// never subscribed, or twice, must not end another's watch; a session that
// ends without unsubscribing must not keep the watch (one of the uid's
// daemon connections) once the others let it go.
func TestSubscriptionsBelongToTheirSessions(t *testing.T) {
	e := newEnv(t)
	e.d.Mailbox(t, "agent")
	uri := InboxURI("agent")
	const token = "0123456789abcdef-subs"
	srv := httptest.NewServer(e.s.HTTPHandler(token))
	defer srv.Close()
	open := func() string {
		t.Helper()
		resp, _ := rawHTTP(t, "POST", srv.URL, token, "", initializeLine)
		id := resp.Header.Get("Mcp-Session-Id")
		if resp.StatusCode != http.StatusOK || id == "" {
			t.Fatalf("initialize: HTTP %d, session %q", resp.StatusCode, id)
		}
		rawHTTP(t, "POST", srv.URL, token, id, initializedLine)
		return id
	}
	call := func(session, method string) {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":7,"method":"resources/` + method + `","params":{"uri":"` + uri + `"}}`
		if resp, out := rawHTTP(t, "POST", srv.URL, token, session, body); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: HTTP %d %s", method, resp.StatusCode, out)
		}
	}
	watching := func() bool {
		e.s.subs.mu.Lock()
		defer e.s.subs.mu.Unlock()
		return e.s.subs.active["agent"] != nil
	}

	a, b := open(), open()
	call(b, "unsubscribe") // never subscribed
	call(a, "subscribe")
	call(b, "subscribe")
	testwait.For(t, "one watch for both sessions", func() bool { return e.d.Watchers() == 1 })
	call(b, "unsubscribe")
	call(b, "unsubscribe")
	if !watching() {
		t.Fatal("a session's second unsubscribe ended the watch of another session still subscribed")
	}

	// b subscribes again and ends (DELETE) without unsubscribing: once a
	// unsubscribes, no one holds the watch.
	call(b, "subscribe")
	if resp, out := rawHTTP(t, "DELETE", srv.URL, token, b, ""); resp.StatusCode >= 300 {
		t.Fatalf("DELETE session: HTTP %d %s", resp.StatusCode, out)
	}
	testwait.For(t, "the ended session to let its subscription go", func() bool {
		e.s.subs.mu.Lock()
		defer e.s.subs.mu.Unlock()
		w := e.s.subs.active["agent"]
		return w != nil && len(w.sessions) == 1
	})
	call(a, "unsubscribe")
	if watching() {
		t.Fatal("the watch outlived every session subscribed to it")
	}
	testwait.For(t, "the daemon watch to end", func() bool { return e.d.Watchers() == 0 })
}
