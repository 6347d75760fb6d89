package main

import (
	"context"
	"encoding/json"
	"net/smtp"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// smtpDeliver hands one message to the dev server's SMTP listener.
func smtpDeliver(t *testing.T, addr, rcpt, subject string) {
	t.Helper()
	c, err := smtp.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := "From: Shop <shop@elsewhere.test>\r\nTo: " + rcpt + "\r\nSubject: " + subject +
		"\r\nMessage-ID: <" + time.Now().Format("150405.000000000") + "@elsewhere.test>\r\n\r\nbody of " + subject + "\r\n"
	if err := c.Mail("shop@elsewhere.test"); err != nil {
		t.Fatal(err)
	}
	if err := c.Rcpt(rcpt); err != nil {
		t.Fatal(err)
	}
	w, err := c.Data()
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(msg))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	c.Quit()
}

// `mailctl mail label` and `mailctl mail purge` against a dev daemon: a
// label and a star filter `mail list`; purge refuses a message outside trash
// and leaves nothing of one in trash.
func TestMailCLILabelAndPurge(t *testing.T) {
	_, banner, sock := startDev(t, t.TempDir())
	env := []string{"MAILCTL_SOCKET=" + sock}
	smtpAddr := regexp.MustCompile(`127\.0\.0\.1:\d+`).FindString(banner.String())
	if smtpAddr == "" {
		t.Fatalf("no SMTP address in the banner:\n%s", banner.String())
	}
	c, err := protocol.Dial(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	list := func(a protocol.MessageListArgs) []string {
		t.Helper()
		a.Mailbox = "agent"
		var out protocol.MessageList
		if err := c.Call(context.Background(), protocol.VerbMessageList, a, &out); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range out.Messages {
			ids = append(ids, m.ID)
		}
		return ids
	}
	run := func(want int, args ...string) (string, string) {
		t.Helper()
		out, e, code := mailctl(t, env, args...)
		if code != want {
			t.Fatalf("mailctl %s: exit %d, want %d: %s%s", strings.Join(args, " "), code, want, out, e)
		}
		return out, e
	}

	smtpDeliver(t, smtpAddr, "agent@mailctl.test", "Invoice März")
	smtpDeliver(t, smtpAddr, "agent@mailctl.test", "lunch")
	var ids []string
	testwait.For(t, "both messages in the inbox", func() bool { ids = list(protocol.MessageListArgs{}); return len(ids) == 2 })
	invoice, lunch := ids[1], ids[0]
	if !strings.HasSuffix(invoice, "-invoice-marz") {
		t.Errorf("id of \"Invoice März\": %s", invoice)
	}

	if out, _ := run(0, "mail", "label", invoice, "--add", "invoices,todo", "--star", "--mailbox", "agent"); !strings.Contains(out, "changed 1 of 1") {
		t.Errorf("label: %s", out)
	}
	run(0, "mail", "label", invoice, "--remove", "TODO", "--mailbox", "agent")
	if got := list(protocol.MessageListArgs{Label: "invoices", Starred: ptrOf(true)}); !slices.Equal(got, []string{invoice}) {
		t.Errorf("label invoices, starred: %v", got)
	}
	if got := list(protocol.MessageListArgs{Label: "todo"}); len(got) != 0 {
		t.Errorf("label todo after --remove: %v", got)
	}
	if out, _ := run(0, "mail", "list", "--mailbox", "agent", "--label", "invoices", "--starred"); !strings.Contains(out, invoice) || strings.Contains(out, lunch) ||
		!strings.Contains(out, "(starred) Invoice März [invoices]") {
		t.Errorf("mail list --label invoices --starred:\n%s", out)
	}
	run(2, "mail", "label", invoice, "--mailbox", "agent")
	run(2, "mail", "label", invoice, "--star", "--unstar", "--mailbox", "agent")

	// Purge: not from the inbox; from trash, everything goes.
	if _, e := run(3, "mail", "purge", lunch, "--mailbox", "agent"); !strings.Contains(e, "trash") {
		t.Errorf("purge of an inbox message: %s", e)
	}
	run(2, "mail", "purge", "--mailbox", "agent")
	run(2, "mail", "purge", lunch, "--before", "2026-01-01", "--mailbox", "agent")
	if err := c.Call(context.Background(), protocol.VerbMessageMove, protocol.MessageMoveArgs{Mailbox: "agent", ID: invoice, To: "trash"}, nil); err != nil {
		t.Fatal(err)
	}
	out, _ := run(0, "mail", "purge", invoice, "--mailbox", "agent", "--json")
	var purged protocol.MessagePurged
	if err := json.Unmarshal([]byte(out), &purged); err != nil || !slices.Equal(purged.Purged, []string{invoice}) {
		t.Fatalf("purge --json: %v %s", err, out)
	}
	var mb protocol.MailboxList
	if err := c.Call(context.Background(), protocol.VerbMailboxList, nil, &mb); err != nil {
		t.Fatal(err)
	}
	for _, m := range mb.Mailboxes {
		if m.Name != "agent" {
			continue
		}
		if left, err := os.ReadDir(filepath.Join(m.Path, "trash")); err != nil || len(left) != 0 {
			t.Errorf("trash after purge: %v %v", left, err)
		}
		if _, err := os.Stat(filepath.Join(m.Path, "inbox", lunch+".md")); err != nil {
			t.Errorf("inbox message: %v", err)
		}
	}
	if out, _ := run(0, "mail", "purge", "--before", "2100-01-01", "--mailbox", "agent"); !strings.Contains(out, "purged 0") {
		t.Errorf("purge --before on an empty trash: %s", out)
	}
}

func ptrOf[T any](v T) *T { return &v }
