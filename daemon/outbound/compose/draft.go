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
	p, err := parseRecipients(a, nil)
	if err != nil {
		return nil, err
	}
	th, err := threadOf(Input{Args: a}, nil)
	if err != nil {
		return nil, err
	}
	// The draft keeps what it is given in its frontmatter, which the store
	// reads back only up to store.MaxFrontmatter: each field is held to what
	// a header may hold, Bcc and References (which a send bounds otherwise)
	// too, so that no draft is written that could not be read again.
	if err := checkFieldSizes(th, p); err != nil {
		return nil, err
	}
	if n := addressBytes(p.bcc); n > MaxFieldBytes {
		return nil, invalid("bcc comes to %d bytes with %d addresses, over the %d a draft field may hold: send to fewer at once", n, len(p.bcc), MaxFieldBytes)
	}
	n := 0
	for _, r := range th.refs {
		n += len(r) + 3
	}
	if n > MaxFieldBytes {
		return nil, invalid("references come to %d bytes with %d ids, over the %d a draft field may hold", n, len(th.refs), MaxFieldBytes)
	}
	atts, _, err := attachments(a.Attachments)
	return atts, err
}
