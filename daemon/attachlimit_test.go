package daemon

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/protocol"
)

// A send with more attachments than the mailbox's send.max_attachments is
// refused as too_large, naming the limit; the owner sees the limit in its
// mailbox's send policy.
func TestSendAttachmentCountLimit(t *testing.T) {
	td := startDaemon(t, "[send]\nmax_attachments = 3\n")
	td.ensureMine(t, "alice")
	atts := func(n int) []protocol.SendAttachment {
		var out []protocol.SendAttachment
		for i := range n {
			out = append(out, protocol.SendAttachment{Filename: fmt.Sprintf("f%d.txt", i), ContentType: "text/plain", Data: []byte("x")})
		}
		return out
	}
	args := protocol.SendArgs{FromMailbox: "alice", To: []string{"bob@remote.test"}, Subject: "files", Body: "see attached", DryRun: true}
	args.Attachments = atts(3)
	if err := td.call(t, protocol.VerbSend, args, nil); err != nil {
		t.Fatalf("3 attachments: %v", err)
	}
	args.Attachments = atts(4)
	err := td.call(t, protocol.VerbSend, args, nil)
	if protocol.CodeOf(err) != protocol.CodeTooLarge || !strings.Contains(err.Error(), "limit of 3") || !strings.Contains(err.Error(), "send.max_attachments") {
		t.Fatalf("4 attachments: %v", err)
	}
	var l protocol.MailboxList
	if err := td.call(t, protocol.VerbMailboxList, nil, &l); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mb := range l.Mailboxes {
		if mb.Name == "alice" {
			found = true
			if mb.Send == nil || mb.Send.MaxAttachments != 3 {
				t.Fatalf("alice's send policy: %+v", mb.Send)
			}
		}
	}
	if !found {
		t.Fatalf("alice not listed: %+v", l.Mailboxes)
	}
}
