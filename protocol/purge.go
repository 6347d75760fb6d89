package protocol

import "time"

// VerbMessagePurge removes messages from trash for good.
const VerbMessagePurge = "message.purge"

// MessagePurgeArgs names the messages of trash to remove for good: the ids,
// or every message received before a time (not both). Folder, when given,
// must be trash: no other folder can be purged.
type MessagePurgeArgs struct {
	Mailbox string     `json:"mailbox"`
	Folder  string     `json:"folder,omitempty"` // default and only value: trash
	IDs     []string   `json:"ids,omitempty"`
	Before  *time.Time `json:"before,omitempty"`
}

// MessagePurged answers VerbMessagePurge.
type MessagePurged struct {
	Purged   []string      `json:"purged"`
	NotFound []string      `json:"not_found,omitempty"`
	Failed   []ItemFailure `json:"failed,omitempty"`
}
