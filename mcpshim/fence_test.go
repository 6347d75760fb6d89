package mcpshim

import (
	"strings"
	"testing"

	"github.com/mailctl/mailctl/protocol"
)

// TestTrustWhyAuthentication: what the "why" of an untrusted message says
// about authentication. A DMARC pass is authentication even when no
// signature's domain is the From's or its parent's (relaxed alignment on a
// sibling subdomain); a message with no results at all is not authenticated.
func TestTrustWhyAuthentication(t *testing.T) {
	pass := func(d string) protocol.AuthResult { return protocol.AuthResult{Result: "pass", Domain: d} }
	sibling := pass("mail.org.test")
	tests := []struct {
		name string
		m    protocol.Message
		want string
	}{
		{"DMARC pass, signed by a sibling subdomain",
			protocol.Message{MessageSummary: protocol.MessageSummary{From: "a@news.org.test", Trusted: protocol.Untrusted}, DKIM: []protocol.AuthResult{sibling}, DMARC: &protocol.AuthResult{Result: "pass", Domain: "news.org.test"}},
			"authenticated, but the sender is not on"},
		{"DMARC fail, signed by a sibling subdomain",
			protocol.Message{MessageSummary: protocol.MessageSummary{From: "a@news.org.test", Trusted: protocol.Untrusted}, DKIM: []protocol.AuthResult{sibling}, DMARC: &protocol.AuthResult{Result: "fail", Domain: "news.org.test"}},
			"not authenticated"},
		{"no results at all",
			protocol.Message{MessageSummary: protocol.MessageSummary{From: "a@org.test", Trusted: protocol.Untrusted}},
			"not authenticated"},
		{"SPF pass for the From domain, no DMARC result",
			protocol.Message{MessageSummary: protocol.MessageSummary{From: "a@org.test", Trusted: protocol.Untrusted}, SPF: &protocol.AuthResult{Result: "pass", Domain: "org.test"}},
			"authenticated, but the sender is not on"},
	}
	for _, tc := range tests {
		if got := trustWhy(&tc.m); !strings.Contains(got, tc.want) {
			t.Errorf("%s: why %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestTrustWhyNamesWhatMadeItTrusted: a trusted message says which of the
// two ways made it so. A local submission is trusted by the submitting
// mailbox, a remote message by authentication; a local submission that is
// not trusted says what failed, never that the submission made it trusted.
func TestTrustWhyNamesWhatMadeItTrusted(t *testing.T) {
	tests := []struct {
		name string
		m    protocol.Message
		want string
	}{
		{"trusted remote mail",
			protocol.Message{MessageSummary: protocol.MessageSummary{From: "a@org.test", Trusted: protocol.Trusted}},
			"the sender's domain is authenticated (aligned DKIM or SPF)"},
		{"trusted local submission",
			protocol.Message{MessageSummary: protocol.MessageSummary{From: "bot@here.test", Trusted: protocol.Trusted}, SubmittedBy: "bot"},
			"submitted on this host by the mailbox bot"},
		{"untrusted local submission",
			protocol.Message{MessageSummary: protocol.MessageSummary{From: "bot@here.test", Trusted: protocol.Untrusted}, SubmittedBy: "bot"},
			"not authenticated"},
	}
	for _, tc := range tests {
		if got := trustWhy(&tc.m); !strings.Contains(got, tc.want) {
			t.Errorf("%s: why %q, want %q", tc.name, got, tc.want)
		}
	}
}
