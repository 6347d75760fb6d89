package daemon

import (
	"testing"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// TestRoleAddressesReservedForRoot has a local user try to create every
// role mailbox (postmaster, abuse, the CA/B Forum validation addresses...),
// which would let it read DMARC reports or approve a certificate for the
// domain: each is forbidden. Root may create them, for itself or a user.
func TestRoleAddressesReservedForRoot(t *testing.T) {
	testusers.RequireRoot(t)
	u := testusers.Create(t, "mcro")
	td := startDaemon(t, "")
	bin := testusers.Executable(t)
	user := startClient(t, bin, td.socket, principal{"user", u.UID, u.GID})
	root := startClient(t, bin, td.socket, principal{"root", 0, 0})
	for _, name := range []string{"postmaster", "hostmaster", "admin", "administrator", "webmaster", "abuse", "mailer-daemon", "root", "security", "noc", "info"} {
		if !config.IsRoleAddress(name) {
			t.Errorf("%s is not a role address", name)
		}
		if o := user.do(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: name}); o.Code != protocol.CodeForbidden {
			t.Errorf("a user creating %s: %q %s, want forbidden", name, o.Code, o.Msg)
		}
		if _, ok := td.lookupMailbox(name); ok {
			t.Errorf("%s exists after the refused attempt", name)
		}
	}
	if o := root.do(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "postmaster"}); o.Code != "" {
		t.Errorf("root creating postmaster: %+v", o)
	}
	if o := root.do(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "webmaster", Owner: u.Name}); o.Code != "" {
		t.Errorf("root creating webmaster for a user: %+v", o)
	}
	if o := user.do(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "postmasters"}); o.Code != "" {
		t.Errorf("an ordinary name near a role name: %+v", o)
	}
}
