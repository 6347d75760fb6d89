package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mailctl/mailctl/internal/testmount"
	"github.com/mailctl/mailctl/internal/testwait"
)

// TestFormatCheckNeverAsksAMailboxThatIsAMount: at the first start after a
// release before format stamps, whether the mailbox tree holds anything is
// decided from its entries' names alone; a mailbox that is an owner's FUSE
// mount whose daemon never answers must not hold the start.
func TestFormatCheckNeverAsksAMailboxThatIsAMount(t *testing.T) {
	if !testmount.InNamespace(t) {
		return
	}
	dir := t.TempDir()
	mb := filepath.Join(dir, "agent")
	if err := os.Mkdir(mb, 0o700); err != nil {
		t.Fatal(err)
	}
	testmount.DeadFUSE(t, mb, false)
	if !testwait.Returns(t, "whether a tree whose mailbox is a FUSE mount holds files", func() bool { return holdsFiles(dir, false) }) {
		t.Error("a tree with a mailbox in it holds no files, it says")
	}
}
