package mcpshim

import (
	"strings"
	"testing"

	"github.com/mailctl/mailctl/protocol"
)

// A time with a zone offset of 24:00 to 24:59 parses as RFC 3339 in Go but
// cannot be written into a request: every tool that takes a time answers
// invalid_input naming the value, never an internal error.
func TestTimesARequestCannotCarryAreInvalidInput(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Tools = []string{"all"} })
	const bad = "2027-01-01T00:00:00+24:00"
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"email_list", map[string]any{"mailbox": "agent", "since": bad}},
		{"email_list", map[string]any{"mailbox": "agent", "until": "2027-01-01T00:00:00.5-24:30"}},
		{"email_send", map[string]any{"from_mailbox": "agent", "to": "boss@example.test", "subject": "s", "body": "b", "send_at": bad}},
		{"email_draft", map[string]any{"action": "create", "mailbox": "agent", "subject": "s", "send_at": bad}},
	} {
		sc := e.fail(c.tool, c.args, protocol.CodeInvalidInput)
		if msg, _ := sc["message"].(string); !strings.Contains(msg, "2027-01-01T00:00:00") {
			t.Errorf("%s: %q does not name the time given", c.tool, msg)
		}
	}
}
