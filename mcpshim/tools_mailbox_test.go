package mcpshim

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/protocol"
)

func TestMailboxTools(t *testing.T) {
	e := newEnv(t)
	var list MailboxListData
	sc := e.ok("mailbox_list", nil, &list)
	if len(list.Mailboxes) != 0 || sc["next_action"] == nil {
		t.Fatalf("empty list: %v", sc)
	}
	var created MailboxCreateData
	e.ok("mailbox_create", map[string]any{"name": "agent"}, &created)
	if !created.Created || created.Address != "agent@example.test" {
		t.Fatalf("create: %+v", created)
	}
	// Idempotent: a second create returns the same address, created=false.
	var again MailboxCreateData
	e.ok("mailbox_create", map[string]any{"name": "agent"}, &again)
	if again.Created || again.Address != created.Address {
		t.Fatalf("second create: %+v", again)
	}
	e.fail("mailbox_create", map[string]any{"name": "Bad Name"}, protocol.CodeInvalidInput)
	e.fail("mailbox_create", map[string]any{}, protocol.CodeInvalidInput)
	e.fail("mailbox_create", map[string]any{"name": "a", "owner": "root"}, protocol.CodeInvalidInput) // no owner parameter

	e.ok("mailbox_list", nil, &list)
	if len(list.Mailboxes) != 1 || list.Mailboxes[0].Name != "agent" || !list.Mailboxes[0].Registered || list.Mailboxes[0].InboxPath == "" {
		t.Fatalf("list: %+v", list)
	}

	e.deliver("agent", testdaemon.Message{Subject: "hi", Body: "x"})
	sc = e.fail("mailbox_delete", map[string]any{"name": "agent"}, protocol.CodeConflict)
	na := sc["next_action"].(map[string]any)
	if na["tool"] != "mailbox_delete" || na["arguments"].(map[string]any)["force"] != true {
		t.Fatalf("conflict next_action: %v", na)
	}
	var del protocol.Deleted
	e.ok("mailbox_delete", map[string]any{"name": "agent", "force": true}, &del)
	if !del.Deleted {
		t.Fatalf("delete: %+v", del)
	}
	e.fail("mailbox_delete", map[string]any{"name": "agent"}, protocol.CodeNotFound)
}

func TestHookTools(t *testing.T) {
	e := newEnv(t)
	e.d.Mailbox(t, "agent")
	var h protocol.Hook
	sc := e.ok("hook_create", map[string]any{"mailbox": "agent", "event": "on_receive", "cmd": []string{"/usr/bin/true", "x"}}, &h)
	if len(h.Name) != 12 || h.TimeoutSecs != 60 || !strings.Contains(sc["summary"].(string), h.Name) {
		t.Fatalf("hook: %+v %v", h, sc["summary"])
	}
	e.fail("hook_create", map[string]any{"mailbox": "agent", "event": "on_send", "cmd": []string{"/bin/x"}}, protocol.CodeInvalidInput)
	e.fail("hook_create", map[string]any{"mailbox": "agent", "event": "after_send", "cmd": []string{"/bin/x"}, "fire_on_untrusted": true}, protocol.CodeInvalidInput)
	e.fail("hook_create", map[string]any{"mailbox": "agent", "event": "after_send", "cmd": []string{"/bin/x"}, "fire_on_lists": true}, protocol.CodeInvalidInput)
	// fire_on_auto_submitted and fire_on_lists reach the daemon, which keeps them.
	var flagged protocol.Hook
	e.ok("hook_create", map[string]any{"mailbox": "agent", "event": "on_receive", "cmd": []string{"/bin/y"}, "name": "robots",
		"fire_on_auto_submitted": true, "fire_on_lists": true}, &flagged)
	var all protocol.HookList
	e.ok("hook_list", map[string]any{"mailbox": "agent"}, &all)
	for _, h := range all.Hooks {
		if h.Name == "robots" && (!h.FireOnAuto || !h.FireOnLists) {
			t.Fatalf("flags lost: %+v", h)
		}
	}
	e.ok("hook_delete", map[string]any{"name": "robots"}, nil)
	e.fail("hook_create", map[string]any{"mailbox": "agent", "event": "on_receive", "cmd": []string{"relative"}}, protocol.CodeInvalidInput)
	e.fail("hook_create", map[string]any{"mailbox": "agent", "event": "on_receive", "cmd": []string{"/bin/x"}, "timeout_secs": 601}, protocol.CodeInvalidInput)
	var named protocol.Hook
	e.ok("hook_create", map[string]any{"mailbox": "agent", "event": "after_send", "cmd": []string{"/bin/x"}, "name": "notify"}, &named)
	var hl protocol.HookList
	e.ok("hook_list", map[string]any{"mailbox": "agent"}, &hl)
	if len(hl.Hooks) != 2 {
		t.Fatalf("hook_list: %+v", hl)
	}
	// Hook names are unique per mailbox: with the same name on two of them,
	// hook_delete needs the mailbox, and deletes that one only.
	e.d.Mailbox(t, "other")
	e.ok("hook_create", map[string]any{"mailbox": "other", "event": "after_send", "cmd": []string{"/bin/x"}, "name": "notify"}, nil)
	e.call2("hook_delete", map[string]any{"name": "notify"})
	e.ok("hook_delete", map[string]any{"name": "notify", "mailbox": "other"}, nil)
	e.ok("hook_list", map[string]any{"mailbox": "agent"}, &hl)
	if len(hl.Hooks) != 2 {
		t.Fatalf("deleting other's notify touched agent's hooks: %+v", hl)
	}
	e.ok("hook_delete", map[string]any{"name": "notify"}, nil)
	sc = e.fail("hook_delete", map[string]any{"name": "notify"}, protocol.CodeNotFound)
	if sc["next_action"].(map[string]any)["tool"] != "hook_list" {
		t.Fatalf("next_action: %v", sc["next_action"])
	}
	e.ok("hook_list", nil, &hl)
	if len(hl.Hooks) != 1 {
		t.Fatalf("after delete: %+v", hl)
	}
}

// The owner sees the policy that governs its mailbox in mailbox_list, and the
// daemon enforces what it shows.
func TestMailboxListShowsPolicy(t *testing.T) {
	d := testdaemon.Start(t, testdaemon.Options{Extra: "[send]\nper_hour = 30\nmax_recipients = 3\nallow_domains = [\"example.test\"]\n"})
	e := connect(t, d.Socket)
	d.Mailbox(t, "agent")
	var list MailboxListData
	e.ok("mailbox_list", nil, &list)
	r := list.Mailboxes[0]
	if r.Send == nil || r.Send.PerHour != 30 || r.Send.MaxRecipients != 3 || !slices.Equal(r.Send.AllowDomains, []string{"example.test"}) || !r.Send.Enabled || r.Send.Hold {
		t.Fatalf("send_policy: %+v", r.Send)
	}
	if !slices.Contains(r.TrustedSenders, "*@"+testdaemon.TrustedDomain) {
		t.Fatalf("trusted_senders: %v", r.TrustedSenders)
	}
	if want := []protocol.SendRate{{Window: "minute", Limit: 20, Remaining: 20}, {Window: "hour", Limit: 30, Remaining: 30}, {Window: "day", Limit: 1000, Remaining: 1000}}; !slices.Equal(r.Send.Rate, want) {
		t.Fatalf("rate before sending: %+v, want %+v", r.Send.Rate, want)
	}
	e.fail("email_send", map[string]any{"from_mailbox": "agent", "to": "x@elsewhere.test", "subject": "s", "body": "b"}, protocol.CodePolicyBlocked)
	e.ok("email_send", map[string]any{"from_mailbox": "agent", "to": "agent@example.test", "subject": "s", "body": "b"}, nil)
	// The send counts against the hour; the refused one and dry runs do not.
	e.ok("email_send", map[string]any{"from_mailbox": "agent", "to": "agent@example.test", "subject": "s", "body": "b", "dry_run": true}, nil)
	e.ok("mailbox_list", nil, &list)
	if want := []protocol.SendRate{{Window: "minute", Limit: 20, Used: 1, Remaining: 19}, {Window: "hour", Limit: 30, Used: 1, Remaining: 29}, {Window: "day", Limit: 1000, Used: 1, Remaining: 999}}; !slices.Equal(list.Mailboxes[0].Send.Rate, want) {
		t.Fatalf("rate after one send: %+v, want %+v", list.Mailboxes[0].Send.Rate, want)
	}
}

// A mailbox at its limit says so, and when the next send fits.
func TestMailboxListRateExhausted(t *testing.T) {
	d := testdaemon.Start(t, testdaemon.Options{Extra: "[send]\nper_minute = 1\nper_day = 5\n"})
	e := connect(t, d.Socket)
	d.Mailbox(t, "agent")
	e.ok("email_send", map[string]any{"from_mailbox": "agent", "to": "agent@example.test", "subject": "s", "body": "b"}, nil)
	var list MailboxListData
	e.ok("mailbox_list", nil, &list)
	rate := list.Mailboxes[0].Send.Rate
	if len(rate) != 3 || rate[0].Window != "minute" || rate[0].Remaining != 0 || rate[0].NextFreeMS <= 0 || rate[0].NextFreeMS > 60000 ||
		rate[2] != (protocol.SendRate{Window: "day", Limit: 5, Used: 1, Remaining: 4}) {
		t.Fatalf("rate: %+v", rate)
	}
	e.fail("email_send", map[string]any{"from_mailbox": "agent", "to": "agent@example.test", "subject": "s", "body": "b"}, protocol.CodeRateLimited)
}

// An owner names its mailbox and, where the operator allows it, chooses
// whom it trusts, through mailbox_create on a new or existing mailbox.
func TestMailboxCreateSetsNameAndTrust(t *testing.T) {
	d := testdaemon.Start(t, testdaemon.Options{Extra: "[mailbox_rules]\nowners_may_set_trusted_senders = true\n"})
	e := connect(t, d.Socket)
	var out MailboxCreateData
	e.ok("mailbox_create", map[string]any{"name": "agent", "display_name": "Research Agent", "trusted_senders": []string{"*@partner.test"}}, &out)
	if !out.Created || out.DisplayName != "Research Agent" || !slices.Equal(out.TrustedSenders, []string{"*@partner.test"}) {
		t.Fatalf("created: %+v", out)
	}
	e.ok("mailbox_create", map[string]any{"name": "agent", "trusted_senders": []string{}}, &out)
	if out.Created || out.DisplayName != "Research Agent" || out.TrustedSenders == nil || len(out.TrustedSenders) != 0 {
		t.Fatalf("updated: %+v", out)
	}
	e.fail("mailbox_create", map[string]any{"name": "agent", "display_name": "x\r\nBcc: evil@x.test"}, protocol.CodeInvalidInput)
	e.fail("mailbox_create", map[string]any{"name": "agent", "trusted_senders": []string{"a*b@x.test"}}, protocol.CodeInvalidInput)
	var sent protocol.SendResult
	e.ok("email_send", map[string]any{"from_mailbox": "agent", "to": "agent@example.test", "subject": "named", "body": "b"}, &sent)
	var list EmailListData
	e.ok("email_list", map[string]any{"mailbox": "agent"}, &list)
	if len(list.Messages) != 1 || !strings.Contains(list.Messages[0].From, "Research Agent") {
		t.Fatalf("From does not carry the display name: %+v", list.Messages)
	}

	// Without the operator's permission, trusted senders are refused and
	// the answer says which switch allows them.
	d2 := testdaemon.Start(t)
	e2 := connect(t, d2.Socket)
	if os.Getuid() != 0 {
		sc := e2.fail("mailbox_create", map[string]any{"name": "agent", "trusted_senders": []string{"*@partner.test"}}, protocol.CodeForbidden)
		if msg, _ := sc["message"].(string); !strings.Contains(msg, "owners_may_set_trusted_senders") {
			t.Errorf("refusal: %q", msg)
		}
	}
}
