package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/daemon/backup"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// TestBackupSnapshotOfDamagedStateFiles: the snapshot copies the daemon's
// own files, each opened without waiting on a FIFO and read no further
// than its bound. An idempotency record no send made (larger than a record
// may be, or a FIFO) is left out, and the rest of the records are taken;
// a FIFO where the bounce key goes ends the snapshot with an error naming
// it, never hangs it.
func TestBackupSnapshotOfDamagedStateFiles(t *testing.T) {
	td := startDaemon(t, "")
	idem := filepath.Join(td.cfg.Paths.QueueDir(), queue.IdempotencyDir)
	if err := os.MkdirAll(idem, 0o700); err != nil {
		t.Fatal(err)
	}
	name := func(i int) string { return fmt.Sprintf("%064x.json", i) }
	os.WriteFile(filepath.Join(idem, name(1)), []byte(`{"sent_id":"2026-11-29-120000-a","mailbox":"agent"}`), 0o600)
	os.WriteFile(filepath.Join(idem, name(2)), make([]byte, backup.MaxIdemRecord+1), 0o600)
	testwait.FIFO(t, filepath.Join(idem, name(3)))
	type result struct {
		snap protocol.BackupSnapshot
		err  error
	}
	snapshot := func() result {
		return testwait.Returns(t, "the snapshot", func() result {
			snap, err := td.backupSnapshot(context.Background())
			return result{snap, err}
		})
	}
	r := snapshot()
	if r.err != nil {
		t.Fatalf("snapshot with damaged idempotency records: %v", r.err)
	}
	defer os.RemoveAll(r.snap.Dir)
	var got []string
	ents, _ := os.ReadDir(filepath.Join(r.snap.Dir, "queue", queue.IdempotencyDir))
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if len(got) != 1 || got[0] != name(1) {
		t.Errorf("the snapshot's records: %v, want only %s", got, name(1))
	}

	bounce := filepath.Join(td.cfg.Paths.StateDir, "bounce.key")
	os.Remove(bounce)
	testwait.FIFO(t, bounce)
	if r := snapshot(); r.err == nil || !strings.Contains(r.err.Error(), "bounce.key") {
		if r.err == nil {
			os.RemoveAll(r.snap.Dir)
		}
		t.Errorf("snapshot with a FIFO where the bounce key goes: %v, want an error naming it", r.err)
	}
}
