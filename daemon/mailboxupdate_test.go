package daemon

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/protocol"
)

func ptrTo[T any](v T) *T { return &v }

// An owner names its mailbox, the name survives a restart and outgoing From
// carries it; what it may not change (trusted senders, by default) is
// refused with the switch that would allow it.
func TestMailboxUpdateDisplayName(t *testing.T) {
	td := startDaemon(t, "")
	td.ensureMine(t, "alice")
	td.ensureMine(t, "bob")
	var mb protocol.Mailbox
	if err := td.call(t, protocol.VerbMailboxUpdate, protocol.MailboxUpdateArgs{Name: "alice", DisplayName: ptrTo("Alice Ändersson")}, &mb); err != nil {
		t.Fatal(err)
	}
	if mb.DisplayName != "Alice Ändersson" {
		t.Fatalf("answer: display_name %q", mb.DisplayName)
	}
	for _, bad := range []string{"Alice\r\nBcc: evil@x.test", "tab\there", strings.Repeat("x", protocol.MaxDisplayNameLen+1), " padded"} {
		if err := td.call(t, protocol.VerbMailboxUpdate, protocol.MailboxUpdateArgs{Name: "alice", DisplayName: &bad}, nil); protocol.CodeOf(err) != protocol.CodeInvalidInput {
			t.Errorf("display name %q: %v, want invalid_input", bad, err)
		}
	}
	if err := td.call(t, protocol.VerbMailboxUpdate, protocol.MailboxUpdateArgs{Name: "alice"}, nil); protocol.CodeOf(err) != protocol.CodeInvalidInput {
		t.Errorf("nothing to change: %v", err)
	}
	if os.Getuid() != 0 {
		err := td.call(t, protocol.VerbMailboxUpdate, protocol.MailboxUpdateArgs{Name: "alice", TrustedSenders: &[]string{"*@friend.test"}}, nil)
		if protocol.CodeOf(err) != protocol.CodeForbidden || !strings.Contains(err.Error(), "owners_may_set_trusted_senders") || strings.Contains(err.Error(), "mailctl ") {
			t.Errorf("trusted senders by an owner, not allowed: %v", err)
		}
	}

	var res protocol.SendResult
	if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "alice", To: []string{"bob@example.test"}, Subject: "named", Body: "b"}, &res); err != nil {
		t.Fatal(err)
	}
	var l protocol.MessageList
	td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "bob"}, &l)
	if len(l.Messages) != 1 || !strings.Contains(l.Messages[0].From, "Alice Ändersson") || !strings.Contains(l.Messages[0].From, "alice@example.test") {
		t.Fatalf("bob's inbox: %+v", l.Messages)
	}

	// The registry keeps it on disk.
	reg, _, err := registry.Open(td.cfg.Paths.RegistryDir())
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := reg.Mailbox("alice"); !ok || r.DisplayName != "Alice Ändersson" {
		t.Fatalf("registry on disk: %+v", r)
	}
}

// Where the operator allows it, an owner sets whom its mailbox trusts; the
// patterns are checked, the answer and mailbox.list show the list, and the
// mailbox can go back to the global one.
func TestMailboxUpdateTrustedSenders(t *testing.T) {
	td := startDaemon(t, "[trust]\ntrusted_senders = [\"*@global.test\"]\n[mailbox_rules]\nowners_may_set_trusted_senders = true\nowners_may_set_display_name = false\n")
	td.ensureMine(t, "alice")
	var mb protocol.Mailbox
	if err := td.call(t, protocol.VerbMailboxUpdate, protocol.MailboxUpdateArgs{Name: "alice", TrustedSenders: &[]string{"boss@corp.test", "*@*.partner.test"}}, &mb); err != nil {
		t.Fatal(err)
	}
	if mb.Trust == nil || mb.Trust.Source != "mailbox" || !slices.Equal(mb.Trust.TrustedSenders, []string{"boss@corp.test", "*@*.partner.test"}) {
		t.Fatalf("trust: %+v", mb.Trust)
	}
	if got := td.trustedSendersOf(t, "alice"); !slices.Equal(got, []string{"boss@corp.test", "*@*.partner.test"}) {
		t.Fatalf("trust check uses %v", got)
	}
	for _, bad := range []string{"a*b@corp.test", "corp.test", "*@corp*.test", "x@y.test\r\n"} {
		if err := td.call(t, protocol.VerbMailboxUpdate, protocol.MailboxUpdateArgs{Name: "alice", TrustedSenders: &[]string{bad}}, nil); protocol.CodeOf(err) != protocol.CodeInvalidInput {
			t.Errorf("pattern %q: %v, want invalid_input", bad, err)
		}
	}
	if err := td.call(t, protocol.VerbMailboxUpdate, protocol.MailboxUpdateArgs{Name: "alice", TrustedSenders: &[]string{}}, &mb); err != nil || mb.Trust.Source != "mailbox" || len(mb.Trust.TrustedSenders) != 0 {
		t.Fatalf("trust no one: %+v %v", mb.Trust, err)
	}
	if err := td.call(t, protocol.VerbMailboxUpdate, protocol.MailboxUpdateArgs{Name: "alice", InheritTrustedSenders: true}, &mb); err != nil || mb.Trust.Source != "global" || !slices.Equal(mb.Trust.TrustedSenders, []string{"*@global.test"}) {
		t.Fatalf("back to the global list: %+v %v", mb.Trust, err)
	}
	if os.Getuid() != 0 {
		err := td.call(t, protocol.VerbMailboxUpdate, protocol.MailboxUpdateArgs{Name: "alice", DisplayName: ptrTo("A")}, nil)
		if protocol.CodeOf(err) != protocol.CodeForbidden || !strings.Contains(err.Error(), "owners_may_set_display_name") {
			t.Errorf("display name by an owner, not allowed: %v", err)
		}
	}
}

// trustedSendersOf is the list the inbound trust check uses for mailbox.
func (td *testDaemon) trustedSendersOf(t *testing.T, mailbox string) []string {
	t.Helper()
	p, _ := td.trustedSenders(mailbox)
	return p
}

// A display name is checked as a reader's software may show it: the
// fullwidth and small forms of < @ > (which NFKC folds to them) are refused
// over the socket like the ASCII ones, so no signed From can read
// `"Boss ＜ceo＠bank.example＞" <alice@…>`. A name stored before the check
// grew is not put on outgoing mail.
func TestMailboxUpdateDisplayNameFoldsToAnAddress(t *testing.T) {
	td := startDaemon(t, "")
	td.ensureMine(t, "alice")
	td.ensureMine(t, "bob")
	for _, c := range []struct{ name, char string }{
		{"Boss \uff1cceo\uff20bank.example\uff1e", "U+FF1C"},
		{"ceo\ufe6bbank.example", "U+FE6B"},
		{"Boss \u2039ceo\u203a", "U+2039"},
		{"line\u2028break", "U+2028"},
	} {
		err := td.call(t, protocol.VerbMailboxUpdate, protocol.MailboxUpdateArgs{Name: "alice", DisplayName: &c.name}, nil)
		if protocol.CodeOf(err) != protocol.CodeInvalidInput || !strings.Contains(err.Error(), c.char) {
			t.Errorf("display name %q: %v, want invalid_input naming %s", c.name, err, c.char)
		}
	}
	var mb protocol.Mailbox
	if err := td.call(t, protocol.VerbMailboxShow, protocol.NameArgs{Name: "alice"}, &mb); err != nil || mb.DisplayName != "" {
		t.Fatalf("after the refusals: display_name %q, %v", mb.DisplayName, err)
	}

	// As if set by an earlier version: kept in the registry, left off the From.
	if _, err := td.reg.UpdateMailbox("alice", td.currentID("alice"), func(r *registry.Record) { r.DisplayName = "Boss \uff1cceo\uff20bank.example\uff1e" }); err != nil {
		t.Fatal(err)
	}
	if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "alice", To: []string{"bob@example.test"}, Subject: "named", Body: "b"}, nil); err != nil {
		t.Fatal(err)
	}
	var l protocol.MessageList
	td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "bob"}, &l)
	if len(l.Messages) != 1 || strings.Contains(l.Messages[0].From, "\uff1c") || strings.Contains(l.Messages[0].From, "ceo") {
		t.Fatalf("bob's inbox: %+v", l.Messages)
	}
}
