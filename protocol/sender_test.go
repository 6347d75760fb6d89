package protocol

import "testing"

// Regression: a wait for the service's mail (`from: "noreply@service.example"`)
// took a message from anyone who wrote that text as their display name, and
// handed the agent that sender's code and links.
func TestSenderMatches(t *testing.T) {
	for _, c := range []struct {
		from, filter string
		want         bool
	}{
		{`"noreply@service.example" <attacker@evil.example>`, "noreply@service.example", false},
		{`"github.com" <attacker@evil.example>`, "github.com", false},
		{`"@service.example" <attacker@evil.example>`, "@service.example", false},
		{`Service <noreply@service.example>`, "noreply@service.example", true},
		{`Service <NoReply@Service.Example>`, "noreply@service.example", true},
		{`GitHub <noreply@github.com>`, "github.com", true},
		{`noreply@github.com`, "@github.com", true},
		{`Alice Smith <as@corp.example>`, "alice", true},
		{`Alice Smith <as@corp.example>`, "Alice Smith", true},
		{`Alice Smith <as@corp.example>`, "bob", false},
		{`not an address at all`, "x@y.example", false},
		{`anything`, "", true},
	} {
		if got := SenderMatches(c.from, c.filter); got != c.want {
			t.Errorf("SenderMatches(%q, %q) = %v, want %v", c.from, c.filter, got, c.want)
		}
	}
}
