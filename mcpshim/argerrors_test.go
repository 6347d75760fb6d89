package mcpshim

import (
	"fmt"
	"strings"
	"testing"
)

// Arguments a model gets wrong (docs/mcp.md, Conventions: validated against
// the input schema, an unknown argument is invalid_input; Windows and sizes:
// a limit or timeout_secs of 0 is refused) are answered with the argument,
// what it must be and what the tool takes, never the validator's schema
// paths, which name no fix.
func TestArgumentErrorsNameTheFix(t *testing.T) {
	r := startRaw(t, New(Options{SocketPath: noDaemon(t), Tools: []string{"all"}}), 0)
	for i, c := range []struct {
		tool, args string
		want       []string
	}{
		{"email_list", `{"mailbox": "agent", "bogus": 1}`, []string{`no argument "bogus"`, "takes mailbox, folder?, limit?"}},
		{"email_list", `{}`, []string{`needs the argument "mailbox"`, "takes mailbox, folder?"}},
		{"email_list", `{"mailbox": "agent", "limit": 0}`, []string{"limit is 0", "at least 1"}},
		{"email_wait", `{"mailbox": "agent", "timeout_secs": 0}`, []string{"timeout_secs is 0", "a whole number, at least 1, at most 600"}},
		{"email_list", `{"mailbox": "agent", "folder": "bogus"}`, []string{`folder is "bogus"`, "one of inbox, sent, archive, trash, drafts, junk"}},
		{"mailbox_create", `{"name": "Bad"}`, []string{`name is "Bad"`, "matching ^[a-z0-9._-]+$"}},
	} {
		id := fmt.Sprint(i + 1)
		r.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"` + c.tool + `","arguments":` + c.args + `}}`)
		m := r.reply(t, id)
		res, _ := m["result"].(map[string]any)
		sc, _ := res["structuredContent"].(map[string]any)
		msg := fmt.Sprint(sc["message"])
		if res["isError"] != true || sc["code"] != "invalid_input" {
			t.Errorf("%s %s: want an invalid_input tool error, got %v", c.tool, c.args, m)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s %s: message %q lacks %q", c.tool, c.args, msg, w)
			}
		}
		if strings.Contains(msg, "validating") {
			t.Errorf("%s %s: message %q speaks the validator's language", c.tool, c.args, msg)
		}
	}
}
