package protocol

// VerbMessageLabel adds and removes labels and sets or clears the star of
// messages.
const VerbMessageLabel = "message.label"

// MessageLabelArgs changes the labels and star of one or more messages of a
// folder. Labels compare ignoring case (Unicode simple case folding, as
// strings.EqualFold and store.LabelKey); at least one change must be asked.
type MessageLabelArgs struct {
	Mailbox string   `json:"mailbox"`
	Folder  string   `json:"folder,omitempty"` // default inbox
	IDs     []string `json:"ids"`
	Add     []string `json:"add,omitempty"`
	Remove  []string `json:"remove,omitempty"`
	Star    *bool    `json:"star,omitempty"` // true stars, false unstars, absent leaves as is
}

// MessageLabeled answers VerbMessageLabel: the ids whose labels or star
// changed, the ids not in the folder and those that could not be changed.
type MessageLabeled struct {
	Changed  []string      `json:"changed"`
	NotFound []string      `json:"not_found,omitempty"`
	Failed   []ItemFailure `json:"failed,omitempty"`
}
