package protocol

// VerbMailboxPrune applies the operator's retention policy ([storage.retention]
// in the config) now, or with DryRun says what it would do. The daemon also
// runs it on its own every storage.prune_every.
const VerbMailboxPrune = "mailbox.prune"

// MailboxPruneArgs asks for VerbMailboxPrune: every mailbox, or one.
type MailboxPruneArgs struct {
	Mailbox string `json:"mailbox,omitempty"`
	DryRun  bool   `json:"dry_run,omitempty"`
}

// PruneResult answers VerbMailboxPrune: per mailbox and folder, how many
// messages were (or would be) moved to trash, or removed from trash for good.
type PruneResult struct {
	DryRun bool       `json:"dry_run"`
	Rows   []PruneRow `json:"rows"`
	// Moved and Purged add up the rows.
	Moved  int `json:"moved"`
	Purged int `json:"purged"`
}

// PruneRow is one folder of one mailbox in a PruneResult.
type PruneRow struct {
	Mailbox string `json:"mailbox"`
	Folder  string `json:"folder"`
	// Action is "move_to_trash" (a folder's messages past its retention go
	// to trash first, where trash's retention removes them) or "purge"
	// (trash: removed for good).
	Action string `json:"action"`
	Count  int    `json:"count"`
	// OlderThanDays is the folder's retention.
	OlderThanDays float64 `json:"older_than_days"`
}
