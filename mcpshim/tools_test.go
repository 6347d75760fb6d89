package mcpshim

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// TestZeroIsNoDefault: a count or size of 0 would be taken for the default
// (a wait of 120 s, 50 rows, 20 000 characters), not for none, so the
// schemas start at 1 and a 0 is refused.
func TestZeroIsNoDefault(t *testing.T) {
	e := newEnv(t)
	e.d.Mailbox(t, "agent")
	e.fail("email_wait", map[string]any{"mailbox": "agent", "timeout_secs": 0}, protocol.CodeInvalidInput)
	e.fail("email_wait", map[string]any{"mailbox": "agent", "timeout_secs": 1, "max_chars": 0}, protocol.CodeInvalidInput)
	e.fail("email_list", map[string]any{"mailbox": "agent", "limit": 0}, protocol.CodeInvalidInput)
	e.fail("email_read", map[string]any{"mailbox": "agent", "id": "x", "max_chars": 0}, protocol.CodeInvalidInput)
	e.fail("email_attachment", map[string]any{"mailbox": "agent", "id": "x", "max_chars": 0}, protocol.CodeInvalidInput)
}

func TestDaemonDownEveryToolUnavailable(t *testing.T) {
	e := connect(t, filepath.Join(shortTempDir(t), "absent.sock"), func(o *Options) { o.Tools = []string{"all"} })
	args := map[string]map[string]any{
		"mailbox_list":      nil,
		"mailbox_create":    {"name": "a"},
		"mailbox_delete":    {"name": "a"},
		"email_list":        {"mailbox": "a"},
		"email_read":        {"mailbox": "a", "id": "x"},
		"email_send":        {"from_mailbox": "a", "to": "b@c.test", "subject": "s", "body": "b"},
		"email_reply":       {"mailbox": "a", "id": "x", "body": "b"},
		"email_forward":     {"mailbox": "a", "id": "x", "to": "b@c.test"},
		"email_mark_read":   {"mailbox": "a", "id": "x"},
		"email_mark_unread": {"mailbox": "a", "id": "x"},
		"email_move":        {"mailbox": "a", "id": "x", "action": "archive"},
		"email_wait":        {"mailbox": "a", "timeout_secs": 1},
		"email_attachment":  {"mailbox": "a", "id": "x"},
		"hook_create":       {"mailbox": "a", "event": "on_receive", "cmd": []string{"/bin/true"}},
		"hook_list":         nil,
		"hook_delete":       {"name": "h"},
		"email_label":       {"mailbox": "a", "id": "x", "star": true},
		"email_purge":       {"mailbox": "a", "id": "x"},
		"email_draft":       {"action": "delete", "mailbox": "a", "id": "x"},
	}
	if len(args) != len(allTools) {
		t.Fatalf("table covers %d tools, want %d", len(args), len(allTools))
	}
	for _, name := range allTools {
		sc := e.fail(name, args[name], protocol.CodeUnavailable)
		msg := sc["message"].(string)
		if !strings.Contains(msg, "mailctl dev") || !strings.Contains(msg, protocol.StartCommand()) || sc["retryable"] != true {
			t.Errorf("%s: unavailable message lacks the fix: %v", name, sc)
		}
	}
}

func TestReconnectAfterDaemonRestart(t *testing.T) {
	e := newEnv(t)
	e.ok("mailbox_list", nil, nil)
	e.d.Stop()
	testwait.For(t, "client to notice", func() bool {
		e.s.mu.Lock()
		defer e.s.mu.Unlock()
		select {
		case <-e.s.client.Done():
			return true
		default:
			return false
		}
	})
	e.fail("mailbox_list", nil, protocol.CodeUnavailable)
	e.d.Restart(t)
	e.ok("mailbox_list", nil, nil)
}

func TestNullArgumentsMeanAbsent(t *testing.T) {
	e := newEnv(t)
	e.d.Mailbox(t, "agent")
	var list EmailListData
	e.ok("email_list", map[string]any{"mailbox": "agent", "folder": nil, "limit": nil, "unread": nil}, &list)
	if list.Folder != "inbox" {
		t.Fatalf("folder %q", list.Folder)
	}
	e.fail("email_list", map[string]any{"mailbox": "agent", "surprise": 1}, protocol.CodeInvalidInput)
	// null means absent even for a name the tool does not know.
	e.ok("email_list", map[string]any{"mailbox": "agent", "surprise": nil}, &list)
}

// TestAbsentArgumentsMeanNone: a tools/call without an arguments member,
// with null, or with an empty object is a call without arguments, as a raw
// JSON-RPC client may send it.
func TestAbsentArgumentsMeanNone(t *testing.T) {
	d := testdaemon.Start(t)
	r := startRaw(t, New(Options{SocketPath: d.Socket}), 0)
	for i, params := range []string{`{"name":"mailbox_list"}`, `{"name":"mailbox_list","arguments":null}`, `{"name":"mailbox_list","arguments":{}}`} {
		id := strconv.Itoa(i + 1)
		r.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":` + params + `}`)
		m := r.reply(t, id)
		res, _ := m["result"].(map[string]any)
		if res == nil || res["isError"] == true {
			t.Errorf("tools/call %s: %v", params, m)
		}
	}
}

// Regression: a cursor the store never issued, a malformed .md and a sent
// that is not a directory answered internal ("the daemon log has details"),
// and a cursor reused with other filters silently paged through other
// results. Each is a code an agent can act on now, with what to do.
func TestStoreErrorsAreActionable(t *testing.T) {
	e := newEnv(t)
	var ids []string
	for i := 0; i < 3; i++ {
		ids = append(ids, e.deliver("agent", testdaemon.Message{From: fmt.Sprintf("s%d@x.test", i), Subject: "m"}))
	}
	var page EmailListData
	e.ok("email_list", map[string]any{"mailbox": "agent", "limit": 1}, &page)
	for _, c := range []struct {
		what string
		args map[string]any
	}{
		{"a cursor never issued", map[string]any{"mailbox": "agent", "cursor": "bogus"}},
		{"a well-formed cursor never issued", map[string]any{"mailbox": "agent", "cursor": "MTIzfDIwMjYtMTEtMjQtMTgzNzUzLWZpbGVz"}},
		{"the cursor with another filter", map[string]any{"mailbox": "agent", "limit": 1, "cursor": page.NextCursor, "from": "s1"}},
		{"the cursor in another folder", map[string]any{"mailbox": "agent", "limit": 1, "cursor": page.NextCursor, "folder": "archive"}},
	} {
		sc := e.fail("email_list", c.args, protocol.CodeInvalidInput)
		if !strings.Contains(sc["message"].(string), "without cursor") {
			t.Errorf("%s: %v", c.what, sc["message"])
		}
	}
	e.ok("email_list", map[string]any{"mailbox": "agent", "limit": 1, "cursor": page.NextCursor}, &page)

	mb := e.d.Mailbox(t, "agent")
	os.WriteFile(filepath.Join(mb.InboxPath, ids[0]+".md"), []byte("no frontmatter at all"), 0o600)
	os.WriteFile(filepath.Join(mb.InboxPath, ids[1]+".md"), []byte("+++\nid = 5\n+++\n"), 0o600)
	for _, id := range ids[:2] {
		sc := e.fail("email_read", map[string]any{"mailbox": "agent", "id": id}, protocol.CodeConflict)
		if msg := sc["message"].(string); !strings.Contains(msg, id) || !strings.Contains(msg, "damaged") {
			t.Errorf("damaged %s: %v", id, msg)
		}
	}
	os.RemoveAll(mb.SentPath)
	os.WriteFile(mb.SentPath, []byte("not a folder"), 0o600)
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"email_list", map[string]any{"mailbox": "agent", "folder": "sent"}},
		{"email_send", map[string]any{"from_mailbox": "agent", "to": "agent@example.test", "subject": "s", "body": "b"}},
	} {
		sc := e.fail(c.tool, c.args, protocol.CodeConflict)
		if msg := sc["message"].(string); !strings.Contains(msg, "not a directory") || !strings.Contains(msg, "move it away") {
			t.Errorf("%s with sent a file: %v", c.tool, msg)
		}
	}
}

// Every not_found tells the agent which tool to call next, and trust facts
// say in words which condition of trust failed.
func TestEveryNotFoundHasNextAction(t *testing.T) {
	e := newEnv(t)
	e.d.Mailbox(t, "agent")
	calls := map[string]map[string]any{
		"mailbox_delete":    {"name": "ghost"},
		"email_list":        {"mailbox": "ghost"},
		"email_read":        {"mailbox": "agent", "id": "2026-01-01-000000-none"},
		"email_send":        {"from_mailbox": "ghost", "to": "b@c.test", "subject": "s", "body": "b"},
		"email_reply":       {"mailbox": "agent", "id": "2026-01-01-000000-none", "body": "b"},
		"email_forward":     {"mailbox": "agent", "id": "2026-01-01-000000-none", "to": "b@c.test"},
		"email_mark_read":   {"mailbox": "agent", "id": "2026-01-01-000000-none"},
		"email_mark_unread": {"mailbox": "ghost", "id": "2026-01-01-000000-none"},
		"email_move":        {"mailbox": "agent", "id": "2026-01-01-000000-none", "action": "archive"},
		"email_wait":        {"mailbox": "ghost", "timeout_secs": 1},
		"email_attachment":  {"mailbox": "agent", "id": "2026-01-01-000000-none"},
		"hook_create":       {"mailbox": "ghost", "event": "on_receive", "cmd": []string{"/bin/true"}},
		"hook_delete":       {"name": "ghost"},
	}
	for _, name := range allTools {
		args, ok := calls[name]
		if !ok {
			continue
		}
		sc := e.fail(name, args, protocol.CodeNotFound)
		na, _ := sc["next_action"].(map[string]any)
		if na == nil || na["tool"] == nil || na["tool"] == "" {
			t.Errorf("%s: not_found without a tool to call next: %v", name, sc)
			continue
		}
		// A missing message id is found with email_list on its mailbox; a
		// missing mailbox with mailbox_list.
		want := "mailbox_list"
		if args["mailbox"] == "agent" {
			want = "email_list"
		}
		if na["tool"] != want && name != "hook_delete" {
			t.Errorf("%s %v: next_action %v, want tool %s", name, args, na, want)
		}
		if want == "email_list" {
			if a, _ := na["arguments"].(map[string]any); a["mailbox"] != "agent" {
				t.Errorf("%s: next_action %v does not name the mailbox", name, na)
			}
		}
		// The message says what is missing, in words that fit an agent
		// as well as a person at a shell: no CLI command.
		if msg, _ := sc["message"].(string); strings.Contains(msg, "mailctl ") {
			t.Errorf("%s: message names a CLI command: %q", name, msg)
		}
	}
	// Attachments a message does not have are found by reading it.
	id := e.deliver("agent", testdaemon.Message{Subject: "no files"})
	sc := e.fail("email_attachment", map[string]any{"mailbox": "agent", "id": id}, protocol.CodeNotFound)
	if na, _ := sc["next_action"].(map[string]any); na == nil || na["tool"] != "email_read" {
		t.Errorf("email_attachment without attachments: next_action %v", sc["next_action"])
	}
	// Marking only ids that do not exist points at the listing too.
	sc = e.fail("email_mark_read", map[string]any{"mailbox": "agent", "ids": []string{"2026-01-01-000000-none"}}, protocol.CodeNotFound)
	if na, _ := sc["next_action"].(map[string]any); na == nil || na["tool"] != "email_list" {
		t.Errorf("email_mark_read of missing ids: next_action %v", sc["next_action"])
	}
}

func TestTrustWhy(t *testing.T) {
	d := testdaemon.Start(t, testdaemon.Options{Open: true})
	e := connect(t, d.Socket)
	d.Mailbox(t, "agent")
	for _, c := range []struct {
		mailbox string
		m       testdaemon.Message
		want    string
	}{
		{"agent", testdaemon.Message{From: "boss@" + testdaemon.TrustedDomain, Sign: true}, "is on this mailbox's trusted senders"},
		{"agent", testdaemon.Message{From: "boss@" + testdaemon.TrustedDomain}, "not authenticated"},
		{"agent", testdaemon.Message{From: "x@evil.test", Sign: true}, "authenticated, but the sender is not on"},
		{"agent", testdaemon.Message{From: "x@evil.test", SignAs: "unrelated.test"}, "not authenticated"},
		{testdaemon.OpenMailbox, testdaemon.Message{From: "boss@" + testdaemon.TrustedDomain, Sign: true}, "no trusted senders configured"},
	} {
		c.m.Subject = "s"
		id := d.Deliver(t, c.mailbox, c.m)
		var m EmailReadData
		e.ok("email_read", map[string]any{"mailbox": c.mailbox, "id": id}, &m)
		if !strings.Contains(m.Trust.Why, c.want) {
			t.Errorf("%s from %s (sign %v %s): why %q, want %q", c.mailbox, c.m.From, c.m.Sign, c.m.SignAs, m.Trust.Why, c.want)
		}
	}
	// Mail one local mailbox sends another is trusted as a submission on
	// this host, and why says so rather than crediting DKIM.
	d.Mailbox(t, "boss")
	var sent SendData
	e.ok("email_send", map[string]any{"from_mailbox": "boss", "to": "agent@" + testdaemon.Domain, "subject": "local", "body": "b"}, &sent)
	if sent.Status != "delivered" { // the answer waits for the first attempt, which stores it
		t.Fatalf("local send: %+v", sent.SendResult)
	}
	var l EmailListData
	e.ok("email_list", map[string]any{"mailbox": "agent", "subject": "local"}, &l)
	if len(l.Messages) != 1 {
		t.Fatalf("the local message: %+v", l.Messages)
	}
	var local EmailReadData
	e.ok("email_read", map[string]any{"mailbox": "agent", "id": l.Messages[0].ID}, &local)
	if !strings.Contains(local.Trust.Why, "submitted on this host by the mailbox boss") || local.SubmittedBy != "boss" {
		t.Errorf("local submission: why %q, submitted_by %q", local.Trust.Why, local.SubmittedBy)
	}
	// A mailbox that trusts no one says so in its row: trusted_senders is
	// there, empty, not left out.
	var list MailboxListData
	e.ok("mailbox_list", nil, &list)
	for _, r := range list.Mailboxes {
		if r.Name == testdaemon.OpenMailbox && (r.TrustedSenders == nil || len(r.TrustedSenders) != 0) {
			t.Errorf("%s row: trusted_senders %#v, want []", r.Name, r.TrustedSenders)
		}
	}
}
