package protocol

import "time"

// VerbBackupSnapshot takes a consistent snapshot of the daemon's state for
// `mailctl backup`. Root only.
const VerbBackupSnapshot = "backup.snapshot"

// BackupSnapshot answers VerbBackupSnapshot: the daemon has hard-linked the
// registry, a copy of the queue journal, the bounce key and every
// mailbox's committed messages into Dir, a directory only root can reach
// inside the store. The caller reads it and removes it; one left behind is
// removed at the daemon's next start.
type BackupSnapshot struct {
	Dir string `json:"dir"`
	// CutAt is when the snapshot began: every message acknowledged before
	// it is in the snapshot, and every item queued before it.
	CutAt      time.Time       `json:"cut_at"`
	QueueBytes int64           `json:"queue_bytes"`
	QueueItems int             `json:"queue_items"`
	Mailboxes  []BackupMailbox `json:"mailboxes"`
}

// BackupMailbox is one mailbox in a BackupSnapshot: its owner as the
// daemon's host numbers it, and what was linked.
type BackupMailbox struct {
	Name     string `json:"name"`
	UID      uint32 `json:"uid"`
	GID      uint32 `json:"gid"`
	Messages int    `json:"messages"`
	Files    int    `json:"files"`
	Bytes    int64  `json:"bytes"`
	// Skipped counts entries that are not a committed message's regular
	// files of the owner (deliveries in progress, symlinks, others' files).
	Skipped int `json:"skipped"`
	// Warnings name what was left out that an operator may miss (a
	// mount inside the mailbox).
	Warnings []string `json:"warnings,omitempty"`
}
