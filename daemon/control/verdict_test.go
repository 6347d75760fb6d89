package control

import (
	"testing"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// TestVerdictSpelling holds the store's frontmatter spelling of a trusted
// message to the wire verdict: the store filters on it without importing
// protocol, and the daemon converts between the two.
func TestVerdictSpelling(t *testing.T) {
	if store.TrustedValue != string(protocol.Trusted) {
		t.Fatalf("store.TrustedValue %q, protocol.Trusted %q", store.TrustedValue, protocol.Trusted)
	}
	for v, want := range map[protocol.Verdict]bool{protocol.Trusted: true, protocol.Untrusted: false, protocol.NoPolicy: false, "": false, "TRUE": false} {
		if v.IsTrusted() != want {
			t.Errorf("%q.IsTrusted() = %v", v, !want)
		}
	}
	if trustedOrNone("") != protocol.NoPolicy {
		t.Error("a missing verdict does not read as none")
	}
}
