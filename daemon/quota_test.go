package daemon

import (
	"errors"
	"fmt"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/protocol"
)

// A mailbox fills to its quota and drains: at the quota SMTP answers
// 452 4.2.2 (the sender retries) and sends are refused with what to do;
// root raises the quota and mail flows; the owner removes files with
// ordinary tools and, once the usage is counted again from the files, the
// old quota has room again. Usage shows in mailbox.list.
func TestMailboxQuota(t *testing.T) {
	operatorOnly(t)
	clk := testclock.New()
	td := startDaemonWith(t, "[storage]\nquota_messages = 2\n", Options{Resolver: &resolver.Map{}, Clock: clk.Now})
	td.ensureMine(t, "alice")
	addr := td.SMTPAddrs()[0]
	n := 0
	deliver := func() error {
		n++
		return sendSMTP(t, addr, "a@remote.test", []string{"alice@example.test"}, fmt.Sprintf("From: a@remote.test\nTo: alice@example.test\nSubject: m%d\n\nhello\n", n))
	}
	usage := func() protocol.MailboxUsage {
		var m protocol.Mailbox
		if err := td.call(t, protocol.VerbMailboxShow, protocol.NameArgs{Name: "alice"}, &m); err != nil || m.Usage == nil {
			t.Fatalf("mailbox.show: %v %+v", err, m)
		}
		return *m.Usage
	}
	for range 2 {
		if err := deliver(); err != nil {
			t.Fatalf("under the quota: %v", err)
		}
	}
	if u := usage(); u.Messages != 2 || !u.OverQuota || u.QuotaMessages != 2 || u.QuotaSource != "default" || u.Bytes == 0 {
		t.Fatalf("usage at the quota: %+v", u)
	}
	var st protocol.Status
	if err := td.call(t, protocol.VerbStatus, nil, &st); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range st.Findings {
		found = found || f.ID == "mailbox.over_quota" && strings.Contains(f.Message, "alice")
	}
	if !found {
		t.Errorf("status has no mailbox.over_quota finding: %+v", st.Findings)
	}
	err := deliver()
	var te *textproto.Error
	if !errors.As(err, &te) || te.Code != 452 || !strings.HasPrefix(te.Msg, "4.2.2 ") {
		t.Fatalf("over the quota: %v, want 452 4.2.2", err)
	}
	err = td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "alice", To: []string{"x@example.test"}, Subject: "s", Body: "b"}, nil)
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeUnavailable || !strings.Contains(pe.Message, "over its quota") {
		t.Fatalf("send over the quota: %v", err)
	}

	// Root raises this mailbox's quota.
	if err := td.call(t, protocol.VerbMailboxUpdate, protocol.MailboxUpdateArgs{Name: "alice", QuotaMessages: new(int64(3))}, nil); err != nil {
		t.Fatal(err)
	}
	if err := deliver(); err != nil {
		t.Fatalf("after the quota was raised: %v", err)
	}
	if u := usage(); u.Messages != 3 || !u.OverQuota || u.QuotaSource != "mailbox" {
		t.Fatalf("usage after raising: %+v", u)
	}

	// The owner removes two messages by hand; the next count sees it.
	inbox := filepath.Join(td.store.Path("alice"), "inbox")
	mds, _ := filepath.Glob(filepath.Join(inbox, "*.md"))
	for _, p := range mds[:2] {
		os.Remove(p)
		os.Remove(strings.TrimSuffix(p, ".md") + ".eml")
	}
	if err := deliver(); err == nil {
		t.Fatal("accepted before the usage was counted again")
	}
	clk.Advance(usageRescan)
	if u := usage(); u.Messages != 1 || u.OverQuota {
		t.Fatalf("usage after the owner made room: %+v", u)
	}
	if err := deliver(); err != nil {
		t.Fatalf("after the owner made room: %v", err)
	}
	// Back to the default quota.
	if err := td.call(t, protocol.VerbMailboxUpdate, protocol.MailboxUpdateArgs{Name: "alice", InheritQuota: true}, nil); err != nil {
		t.Fatal(err)
	}
	if u := usage(); u.QuotaMessages != 2 || u.QuotaSource != "default" || !u.OverQuota {
		t.Fatalf("usage back on the default: %+v", u)
	}
}

// A bytes quota is checked with the message's size at the end of DATA: a
// message that would take the mailbox past it is deferred whole.
func TestMailboxQuotaBytesAtData(t *testing.T) {
	td := startDaemonWith(t, "[storage]\nquota_bytes = 20000\n", Options{Resolver: &resolver.Map{}})
	td.ensureMine(t, "alice")
	addr := td.SMTPAddrs()[0]
	small := "From: a@remote.test\nTo: alice@example.test\nSubject: small\n\nhello\n"
	if err := sendSMTP(t, addr, "a@remote.test", []string{"alice@example.test"}, small); err != nil {
		t.Fatal(err)
	}
	big := "From: a@remote.test\nTo: alice@example.test\nSubject: big\n\n" + strings.Repeat("0123456789abcdef0123456789abcdef\n", 1000)
	err := sendSMTP(t, addr, "a@remote.test", []string{"alice@example.test"}, big)
	var te *textproto.Error
	if !errors.As(err, &te) || te.Code != 452 || !strings.HasPrefix(te.Msg, "4.2.2 ") {
		t.Fatalf("a message past the bytes quota: %v, want 452 4.2.2", err)
	}
	var l protocol.MessageList
	td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "alice"}, &l)
	if len(l.Messages) != 1 {
		t.Fatalf("%d messages stored, want the small one only", len(l.Messages))
	}
}
