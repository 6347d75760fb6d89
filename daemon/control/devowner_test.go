package control_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/daemon/control"
	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/protocol"
)

// A daemon that is not root (mailctl dev, run by a user) keeps its
// mailboxes for that user only. Root creating one on it (`sudo mailctl
// mailboxes create NAME`, the README's road to production, with the dev
// socket) got "fchown ...: operation not permitted: check the modes of your
// mailbox folder" and a folder left behind; the refusal now says why,
// and leaves nothing.
func TestDevDaemonKeepsMailboxesForItsUserOnly(t *testing.T) {
	d := testdaemon.Start(t)
	const self = 4242424 // neither the test's uid nor root: the daemon's user
	keep := control.SwapDaemonUID(func() uint32 { return self })
	defer func() { control.SwapDaemonUID(keep) }()
	err := d.TryCall(protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "elsewhere"}, nil)
	if protocol.CodeOf(err) != protocol.CodeForbidden || !strings.Contains(err.Error(), "not as root (a mailctl dev instance)") ||
		!strings.Contains(err.Error(), "as that user") {
		t.Fatalf("create for another user than the daemon's: want forbidden saying the daemon is not root, got %v", err)
	}
	if _, err := os.Lstat(filepath.Join(d.Dir, "state", "mailboxes", "elsewhere")); !os.IsNotExist(err) {
		t.Errorf("the refused create left a folder: %v", err)
	}
	var list protocol.MailboxList
	d.Call(t, protocol.VerbMailboxList, nil, &list)
	for _, m := range list.Mailboxes {
		if m.Name == "elsewhere" {
			t.Errorf("the refused mailbox is listed: %+v", m)
		}
	}
}
