package mcpshim

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// A tool the server does not serve is -32602 "unknown tool" (docs/mcp.md,
// Conventions), and the error says what to call instead: the tools served,
// and for one that a --tools selection left out (`--tools basic` with a
// cached list), how it is served.
func TestUnknownToolSaysWhatIsServed(t *testing.T) {
	r := startRaw(t, New(Options{SocketPath: noDaemon(t), Tools: []string{"basic"}}), 0)
	for i, c := range []struct {
		tool string
		want []string
	}{
		{"hook_create", []string{`unknown tool "hook_create"`, "serves mailbox_list, email_list, email_read, email_send, email_reply, email_wait", "--tools all"}},
		{"no_such_tool", []string{`unknown tool "no_such_tool"`, "serves mailbox_list, email_list", "tools/list"}},
	} {
		id := fmt.Sprint(i + 1)
		r.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"` + c.tool + `","arguments":{}}}`)
		m := r.reply(t, id)
		e, _ := m["error"].(map[string]any)
		if e == nil || e["code"] != float64(-32602) {
			b, _ := json.Marshal(m)
			t.Errorf("%s: want JSON-RPC error -32602, got %s", c.tool, b)
			continue
		}
		for _, w := range c.want {
			if msg := fmt.Sprint(e["message"]); !strings.Contains(msg, w) {
				t.Errorf("%s: message %q lacks %q", c.tool, msg, w)
			}
		}
	}
}
