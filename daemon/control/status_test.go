package control

import (
	"testing"

	"github.com/mailctl/mailctl/protocol"
)

// A non-root caller's status keeps host-wide findings and those about its own
// mailboxes, and hides those naming another user's mailbox or paths in it.
func TestVisibleFinding(t *testing.T) {
	if !visibleFinding(protocol.Finding{ID: "dns.mx", Message: "no MX for example.test"}, nil, []string{"bob"}) {
		t.Error("host-wide finding hidden")
	}
	if visibleFinding(protocol.Finding{ID: "mailbox.owner_wrong", Message: "mailbox bob is owned by uid 7"}, []string{"alice"}, []string{"bob"}) {
		t.Error("another user's mailbox finding shown")
	}
	if !visibleFinding(protocol.Finding{ID: "mailbox.folder_missing", Message: "mailbox alice lacks inbox"}, []string{"alice"}, []string{"bob"}) {
		t.Error("own mailbox finding hidden")
	}
	if visibleFinding(protocol.Finding{ID: "paths.mode", Message: "/var/lib/mailctl/mailboxes/bob/inbox mode 0755"}, []string{"alice"}, []string{"bob"}) {
		t.Error("path inside another user's mailbox shown")
	}
}
