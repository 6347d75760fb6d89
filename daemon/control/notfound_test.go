package control_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/protocol"
)

// Every not_found the daemon answers is worded one way: "no KIND "NAME" WHERE:
// list ... to see ...", naming what was asked for and where it was looked
// for, with what it missed in Error.Missing; a batch names its ids. A
// symlink planted where a message would be (what another user's file also
// looks like to the store) answers in exactly the words of a missing one.
func TestNotFoundWording(t *testing.T) {
	d := testdaemon.Start(t)
	d.Mailbox(t, "agent")
	const ghost = "2026-01-01-000000-none"
	shape := regexp.MustCompile(`^no (mailbox|message|draft|hook|queue item|folder) "[^"]+"( or "[^"]+")? (in|among|on|to) [^:]+: list [a-z ]+ to see [a-z ]+`)
	for _, tc := range []struct {
		verb    string
		args    any
		missing string
		where   string
	}{
		{protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "ghost"}, protocol.MissingMailbox, `"ghost" among yours`},
		{protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "agent", ID: ghost}, protocol.MissingMessage, `"` + ghost + `" in agent/inbox`},
		{protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "agent", ID: ghost, Folder: "archive"}, protocol.MissingMessage, "in agent/archive"},
		{protocol.VerbMessageMark, protocol.MessageMarkArgs{Mailbox: "agent", IDs: []string{ghost, ghost + "2"}, Read: true}, protocol.MissingMessage, `"` + ghost + `" or "` + ghost + `2" in agent/inbox`},
		{protocol.VerbMessageMove, protocol.MessageMoveArgs{Mailbox: "agent", ID: ghost, To: "archive"}, protocol.MissingMessage, "in agent/inbox"},
		{protocol.VerbMessageLabel, protocol.MessageLabelArgs{Mailbox: "agent", IDs: []string{ghost}, Add: []string{"x"}}, protocol.MissingMessage, "in agent/inbox"},
		{protocol.VerbMessagePurge, protocol.MessagePurgeArgs{Mailbox: "agent", IDs: []string{ghost}}, protocol.MissingMessage, "in agent/trash"},
		{protocol.VerbSendStatus, protocol.SendStatusArgs{Mailbox: "agent", ID: ghost}, protocol.MissingMessage, "in agent/sent"},
		{protocol.VerbSend, protocol.SendArgs{FromMailbox: "agent", ReplyToID: ghost, Body: "b"}, protocol.MissingMessage, "to reply to in agent/inbox, archive or sent"},
		{protocol.VerbDraftUpdate, protocol.DraftUpdateArgs{Mailbox: "agent", ID: ghost}, protocol.MissingDraft, "in agent/drafts"},
		{protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "agent", ID: ghost}, protocol.MissingDraft, "in agent/drafts"},
		{protocol.VerbDraftDelete, protocol.DraftIDArgs{Mailbox: "agent", ID: ghost}, protocol.MissingDraft, "in agent/drafts"},
		{protocol.VerbHookDelete, protocol.HookDeleteArgs{Name: "ghost"}, protocol.MissingHook, `"ghost" on your mailboxes`},
		{protocol.VerbQueueShow, protocol.QueueIDArgs{ID: "q-ghost"}, protocol.MissingQueueItem, `"q-ghost" among yours`},
	} {
		err := d.TryCall(tc.verb, tc.args, nil)
		pe, ok := err.(*protocol.Error)
		if !ok || pe.Code != protocol.CodeNotFound {
			t.Errorf("%s %+v: %v, want not_found", tc.verb, tc.args, err)
			continue
		}
		if pe.Missing != tc.missing || !shape.MatchString(pe.Message) || !strings.Contains(pe.Message, tc.where) {
			t.Errorf("%s: missing %q, message %q; want missing %q and the one wording, naming %s", tc.verb, pe.Missing, pe.Message, tc.missing, tc.where)
		}
	}

	// A planted symlink reads as missing, in the same words.
	id := d.Deliver(t, "agent", testdaemon.Message{Subject: "real", Date: time.Now()})
	var m protocol.Message
	d.Call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "agent", ID: id}, &m)
	dir := m.Path[:strings.LastIndex(m.Path, "/")]
	planted := "2026-01-02-000000-planted"
	if err := os.Symlink(m.Path, dir+"/"+planted+".md"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{planted, "2026-01-02-000000-absent"} {
		err := d.TryCall(protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "agent", ID: name}, nil)
		want := `no message "` + name + `" in agent/inbox: list the folder to see its messages`
		if pe, ok := err.(*protocol.Error); !ok || pe.Message != want {
			t.Errorf("read %s: %v, want %q", name, err, want)
		}
	}
}

// TestQueryErrorNamesNoCLI: a query that does not parse says which token
// and where its operators are documented, in words for any client: no CLI
// command (the protocol does not say which client asks).
func TestQueryErrorNamesNoCLI(t *testing.T) {
	d := testdaemon.Start(t)
	d.Mailbox(t, "agent")
	err := d.TryCall(protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "agent", Query: `from:"unclosed`}, nil)
	pe, ok := err.(*protocol.Error)
	if !ok || pe.Code != protocol.CodeInvalidInput {
		t.Fatalf("a query that does not parse: %v, want invalid_input", err)
	}
	if !strings.Contains(pe.Message, "docs/mcp.md") || strings.Contains(pe.Message, "mailctl ") || strings.Contains(pe.Message, "--") {
		t.Errorf("%q: want the operators' page named, and no CLI command", pe.Message)
	}
}
