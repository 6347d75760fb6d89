package protocol

import "time"

// Verbs of drafts and scheduled sends. A draft is listed and read with
// VerbMessageList and VerbMessageRead in FolderDrafts.
const (
	VerbDraftCreate     = "draft.create"
	VerbDraftUpdate     = "draft.update"
	VerbDraftSend       = "draft.send"
	VerbDraftDelete     = "draft.delete"
	VerbQueueReschedule = "queue.reschedule"
)

// DraftArgs creates a draft (VerbDraftCreate) in Mailbox's drafts folder.
// The fields are those of SendArgs that a message keeps on disk.
type DraftArgs struct {
	Mailbox     string           `json:"mailbox"`
	To          []string         `json:"to,omitempty"`
	Cc          []string         `json:"cc,omitempty"`
	Bcc         []string         `json:"bcc,omitempty"`
	ReplyTo     []string         `json:"reply_to,omitempty"`
	Subject     string           `json:"subject,omitempty"`
	Body        string           `json:"body,omitempty"`
	Attachments []SendAttachment `json:"attachments,omitempty"`
	InReplyTo   string           `json:"in_reply_to,omitempty"`
	References  []string         `json:"references,omitempty"`
	// ReplyToID is a stored message (inbox, archive or sent) the draft
	// answers: its Message-ID, References, recipients and "Re:" subject are
	// filled in unless given.
	ReplyToID string     `json:"reply_to_id,omitempty"`
	SendAt    *time.Time `json:"send_at,omitempty"`
}

// DraftUpdateArgs changes a draft (VerbDraftUpdate). Only the fields given
// change; an empty list clears it (`"cc": []`), and clear_send_at removes
// a schedule.
type DraftUpdateArgs struct {
	Mailbox     string            `json:"mailbox"`
	ID          string            `json:"id"`
	To          *[]string         `json:"to,omitempty"`
	Cc          *[]string         `json:"cc,omitempty"`
	Bcc         *[]string         `json:"bcc,omitempty"`
	ReplyTo     *[]string         `json:"reply_to,omitempty"`
	Subject     *string           `json:"subject,omitempty"`
	Body        *string           `json:"body,omitempty"`
	Attachments *[]SendAttachment `json:"attachments,omitempty"`
	SendAt      *time.Time        `json:"send_at,omitempty"`
	ClearSendAt bool              `json:"clear_send_at,omitempty"`
}

// DraftIDArgs names one draft (VerbDraftDelete).
type DraftIDArgs struct {
	Mailbox string `json:"mailbox"`
	ID      string `json:"id"`
}

// DraftSendArgs sends a draft as it is on disk now (VerbDraftSend).
type DraftSendArgs struct {
	Mailbox string `json:"mailbox"`
	ID      string `json:"id"`
	// SendAt overrides the draft's own send_at.
	SendAt *time.Time `json:"send_at,omitempty"`
	DryRun bool       `json:"dry_run,omitempty"`
	WaitMS int        `json:"wait_ms,omitempty"`
}

// Draft answers VerbDraftCreate and VerbDraftUpdate: the draft's id and
// the file a person may edit.
type Draft struct {
	ID      string     `json:"id"`
	Mailbox string     `json:"mailbox"`
	Path    string     `json:"path"`
	Subject string     `json:"subject"`
	To      []string   `json:"to"`
	SendAt  *time.Time `json:"send_at,omitempty"`
}

// DraftDeleted answers VerbDraftDelete.
type DraftDeleted struct {
	ID      string `json:"id"`
	Deleted bool   `json:"deleted"`
}

// QueueRescheduleArgs sets when a queued, not yet attempted item goes out
// (VerbQueueReschedule).
type QueueRescheduleArgs struct {
	ID     string    `json:"id"`
	SendAt time.Time `json:"send_at"`
}
