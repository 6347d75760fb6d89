package compose

import (
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// CheckDraft checks what a draft holds as Build would, without requiring
// it to be complete (a draft may have no recipient yet), and returns its
// attachments ready for the store.
func CheckDraft(a protocol.SendArgs) ([]store.AttachmentData, error) {
	if err := checkHeaderValue("subject", a.Subject); err != nil {
		return nil, err
	}
	if _, err := parseRecipients(a, nil); err != nil {
		return nil, err
	}
	if _, err := threadOf(Input{Args: a}, nil); err != nil {
		return nil, err
	}
	atts, _, err := attachments(a.Attachments)
	return atts, err
}
