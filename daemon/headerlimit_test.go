package daemon_test

import (
	"errors"
	"net/smtp"
	"net/textproto"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/daemon/ingest"
	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/protocol"
)

// A message whose own header is past ingest's bounds used to be stored as
// raw text with no header (no From to reply to, nothing for the trust
// checks); it is refused at the end of DATA with 552 5.3.4, held in memory
// or spooled, and nothing of it is kept. A part's header past the same
// bounds keeps the message (TestManyHeaderFieldsAreDelivered).
func TestHeaderTooLargeIsRefused(t *testing.T) {
	td := testdaemon.Start(t)
	td.Mailbox(t, "agent")
	to := "To: agent@" + testdaemon.Domain + "\r\n"
	fields := strings.Repeat("X-A: b\r\n", ingest.MaxHeaderFields)
	folded := "X-B: b\r\n" + strings.Repeat(" "+strings.Repeat("f", 900)+"\r\n", ingest.MaxHeaderBytes/900)
	for _, tc := range []struct{ name, raw string }{
		{"fields, held", "From: a@sender.example\r\n" + to + fields + "\r\nthe text\r\n"},
		{"bytes, spooled", "From: a@sender.example\r\n" + to + folded + "\r\n" + strings.Repeat("the text\r\n", 200000)},
	} {
		err := smtp.SendMail(td.SMTPAddr, nil, "a@sender.example", []string{"agent@" + testdaemon.Domain}, []byte(tc.raw))
		var te *textproto.Error
		if !errors.As(err, &te) || te.Code != 552 || !strings.HasPrefix(te.Msg, "5.3.4 ") {
			t.Errorf("%s: sending %d bytes: %v, want 552 5.3.4", tc.name, len(tc.raw), err)
		}
	}
	// The answer comes after the store: a message sent next is the only one.
	id := td.Deliver(t, "agent", testdaemon.Message{Subject: "after", Body: "kept"})
	for _, folder := range []string{protocol.FolderInbox, protocol.FolderJunk} {
		var l protocol.MessageList
		td.Call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "agent", Folder: folder}, &l)
		for _, m := range l.Messages {
			if m.ID != id {
				t.Errorf("%s holds %s, from %q, subject %q", folder, m.ID, m.From, m.Subject)
			}
		}
	}
}
