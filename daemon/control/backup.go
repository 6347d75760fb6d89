package control

import (
	"context"

	"github.com/mailctl/mailctl/protocol"
)

// Snapshotter is a Backend that can take a backup snapshot; one that
// cannot answers backup.snapshot as unavailable.
type Snapshotter interface {
	BackupSnapshot(ctx context.Context) (protocol.BackupSnapshot, error)
}

// handleBackupSnapshot links what a backup holds into a directory only
// root can reach, for `mailctl backup` to read. Root only.
func handleBackupSnapshot(ctx context.Context, s *Server, _ *call, _ *protocol.Empty) (any, error) {
	b, ok := s.b.(Snapshotter)
	if !ok {
		return nil, protocol.Errorf(protocol.CodeUnavailable, "this daemon cannot take backup snapshots")
	}
	snap, err := b.BackupSnapshot(ctx)
	if err != nil {
		s.log.Error("backup snapshot failed", "err", err)
		return nil, protocol.Errorf(protocol.CodeUnavailable, "taking the backup snapshot: %v (the daemon's log says more; retry)", err)
	}
	s.log.Info("backup snapshot taken", "dir", snap.Dir, "mailboxes", len(snap.Mailboxes), "queue_items", snap.QueueItems, "queue_bytes", snap.QueueBytes)
	return snap, nil
}
