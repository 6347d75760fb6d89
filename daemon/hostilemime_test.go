package daemon_test

// Messages shaped to cost the daemon what their size does not, delivered
// over SMTP to a real daemon: each is stored, with what goes past a limit
// kept in the raw copy and said in the body.

import (
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/protocol"
)

// readMessage reads a stored message, its whole body.
func readMessage(t *testing.T, td *testdaemon.Daemon, mailbox, id string) protocol.Message {
	t.Helper()
	var m protocol.Message
	td.Call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: mailbox, ID: id}, &m)
	return m
}

// Two attachments of one long name used to hang the delivery for good (the
// parse numbered the second name forever); both are stored, told apart.
func TestDuplicateLongAttachmentNamesAreDelivered(t *testing.T) {
	td := testdaemon.Start(t)
	td.Mailbox(t, "agent")
	name := strings.Repeat("n", 300) + ".txt"
	id := td.Deliver(t, "agent", testdaemon.Message{Subject: "twins", Body: "see attached", Attachments: []testdaemon.Attachment{
		{Filename: name, ContentType: "application/octet-stream", Data: []byte("one")},
		{Filename: name, ContentType: "application/octet-stream", Data: []byte("two")},
	}})
	m := readMessage(t, td, "agent", id)
	if len(m.AttachmentList) != 2 || m.AttachmentList[0].Filename == m.AttachmentList[1].Filename {
		t.Fatalf("attachments %+v, want two with distinct names", m.AttachmentList)
	}
	for _, a := range m.AttachmentList {
		if len(a.Filename) > 100 || a.Size != 3 {
			t.Errorf("attachment %+v", a)
		}
	}
}
