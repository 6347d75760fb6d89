package doctor

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/testmount"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// TestDoctorNeverAsksAMountInsideAMailbox: doctor, which root runs and the
// daemon runs for any caller, checks every mailbox's folders. An owner's
// FUSE file system whose daemon never answers, mounted on a folder of the
// mailbox or on the whole mailbox, must not hold it: each is named as a
// mount, which is not the mailbox's, and the rest of the report comes.
func TestDoctorNeverAsksAMountInsideAMailbox(t *testing.T) {
	if !testmount.InNamespace(t) {
		return
	}
	in := newInstall(t)
	boxes := in.cfg.Paths.MailboxesDir()
	inbox := filepath.Join(boxes, "agent", "inbox")
	testmount.DeadFUSE(t, inbox, false)
	var whole string
	for _, m := range in.cfg.Mailboxes {
		whole = filepath.Join(boxes, m.Name)
		break
	}
	if whole == "" {
		t.Fatal("setup declared no mailbox")
	}
	testmount.DeadFUSE(t, whole, false)
	f := testwait.Returns(t, "doctor with FUSE mounts inside mailboxes", func() []protocol.Finding { return in.check(t) })
	for _, path := range []string{inbox, whole} {
		found := false
		for _, x := range f {
			if x.ID == "mailbox.mount" && x.Severity == Fail && strings.Contains(x.Message, path) && x.Fix != "" {
				found = true
			}
		}
		if !found {
			t.Errorf("no Fail mailbox.mount finding naming %s in %+v", path, f)
		}
	}
	for _, x := range f {
		if x.ID == "queue.ok" {
			return
		}
	}
	t.Errorf("the checks after the mailboxes' did not run: %+v", f)
}
