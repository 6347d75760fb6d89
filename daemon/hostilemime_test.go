package daemon_test

// Messages shaped to cost the daemon what their size does not, delivered
// over SMTP to a real daemon: each is stored, with what goes past a limit
// kept in the raw copy and said in the body.

import (
	"bytes"
	"fmt"
	"net/smtp"
	"os"
	"runtime"
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

// sendRaw hands raw to the daemon over SMTP for rcpt.
func sendRaw(t *testing.T, td *testdaemon.Daemon, rcpt string, raw []byte) {
	t.Helper()
	if err := smtp.SendMail(td.SMTPAddr, nil, "a@sender.example", []string{rcpt + "@" + testdaemon.Domain}, raw); err != nil {
		t.Fatal(err)
	}
}

// allocated is what the process allocated while f ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A message whose parts have headers of many short fields used to cost the
// daemon about 90 times its size as it was parsed (go-message keeps each
// field in a buffer of its own): 400 MB for this 4 MB one. A part's header
// past 1,000 fields now ends the parts read; the message is stored, the
// raw copy has the rest and the body says so.
func TestManyHeaderFieldsAreDelivered(t *testing.T) {
	td := testdaemon.Start(t)
	td.Mailbox(t, "agent")
	var b strings.Builder
	b.WriteString("From: a@sender.example\r\nTo: agent@" + testdaemon.Domain + "\r\nSubject: fields\r\nMessage-ID: <fields@sender.example>\r\n" +
		"Content-Type: multipart/mixed; boundary=x\r\n\r\n--x\r\nContent-Type: text/plain\r\n\r\nfirst part\r\n")
	for range 8 {
		b.WriteString("--x\r\n" + strings.Repeat("X:b\r\n", 100000) + "\r\nmore\r\n")
	}
	b.WriteString("--x--\r\n")
	raw := []byte(b.String())
	alloc := allocated(func() { sendRaw(t, td, "agent", raw) })
	t.Logf("delivering a %d MiB message allocated %d MiB", len(raw)>>20, alloc>>20)
	if alloc > 64<<20 {
		t.Errorf("delivering a %d MiB message allocated %d MiB", len(raw)>>20, alloc>>20)
	}
	m := readMessage(t, td, "agent", td.Find(t, "agent", protocol.FolderInbox, "fields@sender.example"))
	if m.Subject != "fields" || !strings.Contains(m.Body, "first part") || !strings.Contains(m.Body, "more than 1000 fields") {
		t.Errorf("stored %q: %.300q", m.Subject, m.Body)
	}
	if got, err := os.ReadFile(m.RawPath); err != nil || !bytes.HasSuffix(got, raw) {
		t.Errorf("raw copy: %d bytes, %v", len(got), err)
	}
}

// A To of 5,000 addresses used to be kept whole in the frontmatter, the
// index and every listing of the message; its first 1,000 are kept, read
// back as they were parsed, and the body says the raw copy has the rest.
func TestManyAddressesAreDelivered(t *testing.T) {
	td := testdaemon.Start(t)
	td.Mailbox(t, "agent")
	var to []string
	for i := range 5000 {
		to = append(to, fmt.Sprintf("\"Rcpt \\\"%d\\\"\" <r%d@rcpt.example>", i, i))
	}
	raw := []byte("From: a@sender.example\r\nTo: agent@" + testdaemon.Domain + ",\r\n " + strings.Join(to, ",\r\n ") +
		"\r\nSubject: crowd\r\nMessage-ID: <crowd@sender.example>\r\n\r\nhello all\r\n")
	sendRaw(t, td, "agent", raw)
	m := readMessage(t, td, "agent", td.Find(t, "agent", protocol.FolderInbox, "crowd@sender.example"))
	if len(m.To) != 1000 || m.To[0] != "agent@"+testdaemon.Domain || m.To[999] != `"Rcpt \"998\"" <r998@rcpt.example>` {
		t.Errorf("To read back: %d addresses, first %q, last %q", len(m.To), m.To[0], m.To[len(m.To)-1])
	}
	if !strings.Contains(m.Body, "hello all") || !strings.Contains(m.Body, "To has more than 1000 addresses") {
		t.Errorf("body %.300q", m.Body)
	}
}
