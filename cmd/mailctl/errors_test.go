package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/protocol"
)

// TestErrorsAPersonCanActOn: each error a newcomer hit says what happened and
// what to do.
func TestErrorsAPersonCanActOn(t *testing.T) {
	_, _, sock := startDev(t, t.TempDir())
	env := []string{"MAILCTL_SOCKET=" + sock}
	check := func(name string, wantCode int, want []string, avoid []string, args ...string) {
		t.Helper()
		out, e, code := mailctl(t, env, args...)
		all := out + e
		if wantCode >= 0 && code != wantCode {
			t.Errorf("%s: exit %d, want %d: %s", name, code, wantCode, all)
		}
		for _, w := range want {
			if !strings.Contains(all, w) {
				t.Errorf("%s: output lacks %q:\n%s", name, w, all)
			}
		}
		for _, a := range avoid {
			if strings.Contains(all, a) {
				t.Errorf("%s: output has %q:\n%s", name, a, all)
			}
		}
	}
	check("upper-case name", 2, []string{`mailbox name "Agent" has an upper-case letter`}, []string{`"Agent": mailbox name`},
		"mailboxes", "create", "Agent")
	check("--from an address", 2, []string{"--from takes a mailbox name", "try --from agent"}, nil,
		"send", "--from", "agent+x@mailctl.test", "--to", "a@mailctl.test", "--subject", "s")
	mailctl(t, env, "send", "--from", "agent", "--to", "agent@mailctl.test", "--subject", "keep", "--body", "b")
	check("delete a mailbox with mail", 5, []string{"--force"}, []string{"with force"},
		"mailboxes", "delete", "agent")
	check("delete --force without a terminal", 2, []string{"add --yes"}, nil,
		"mailboxes", "delete", "agent", "--force")
	if out, _, code := mailctl(t, env, "mailboxes", "show", "agent"); code != 0 {
		t.Fatalf("the mailbox went away without confirmation: %s", out)
	}
	check("set a display name", 0, []string{`"Agent Smith" <agent@`}, nil, "mailboxes", "set", "agent", "--display-name", "Agent Smith")
	check("set a display name over two lines", 2, []string{"control character"}, nil, "mailboxes", "set", "agent", "--display-name", "A\nBcc: x@y.test")
	check("set nothing", 2, []string{"nothing to change"}, nil, "mailboxes", "set", "agent")
	if os.Getuid() != 0 {
		check("trusted senders, not allowed to owners", 4, []string{"only the operator sets trusted senders", "restart dev with --trust PATTERN"}, nil,
			"mailboxes", "set", "agent", "--trusted-senders", "*@friend.test")
	}
	check("singular command", 2, []string{"did you mean `mailctl mailboxes`"}, nil, "mailbox", "list")
	check("hook typo", 2, []string{"did you mean `mailctl hooks`"}, nil, "hook", "list")
	check("not a socket", 2, []string{"/etc/passwd is not a socket"}, []string{"systemctl start"},
		"mailboxes", "list", "--socket", "/etc/passwd")
	check("dkim without a config", 1, []string{"sudo mailctl setup", "--config"}, nil,
		"dkim", "list", "--config", filepath.Join(t.TempDir(), "none.toml"))
	check("runs of no hook", 3, []string{`no hook "nosuch" on your mailboxes`, "to see them: mailctl hooks list"}, []string{"no runs yet"},
		"hooks", "runs", "nosuch")
	// Every not_found in one wording (the daemon's: what, where, how to
	// see them), and the command that lists them as the next step.
	const ghost = "2026-01-01-000000-none"
	for _, nf := range []struct {
		name string
		want []string
		args []string
	}{
		{"read of no message", []string{`no message "` + ghost + `" in agent/inbox: list the folder to see its messages (not_found)`, "to see them: mailctl mail list --mailbox agent\n"},
			[]string{"mail", "read", ghost, "--mailbox", "agent"}},
		{"read in archive", []string{`in agent/archive`, "to see them: mailctl mail list --mailbox agent --folder archive"},
			[]string{"mail", "read", ghost, "--mailbox", "agent", "--folder", "archive"}},
		{"mark of no message", []string{`no message "` + ghost + `" in agent/inbox`, "to see them: mailctl mail list --mailbox agent"},
			[]string{"mail", "mark", ghost, "--read", "--mailbox", "agent"}},
		{"purge of no message", []string{`no message "` + ghost + `" in agent/trash`, "to see them: mailctl mail list --mailbox agent --folder trash"},
			[]string{"mail", "purge", ghost, "--mailbox", "agent"}},
		{"no mailbox", []string{`no mailbox "ghost" among yours: list your mailboxes`, "to see them: mailctl mailboxes list"},
			[]string{"mail", "list", "--mailbox", "ghost"}},
		{"no draft", []string{`no draft "` + ghost + `" in agent/drafts`, "to see them: mailctl drafts list agent"},
			[]string{"drafts", "delete", "agent", ghost}},
		{"show no draft", []string{`no message "` + ghost + `" in agent/drafts`, "to see them: mailctl drafts list agent"},
			[]string{"drafts", "show", "agent", ghost}},
		{"no hook", []string{`no hook "ghost" on your mailboxes`, "to see them: mailctl hooks list"},
			[]string{"hooks", "delete", "ghost"}},
		{"no queue item", []string{`no queue item "q-ghost" among yours: list the queue to see yours`, "to see them: mailctl queue list"},
			[]string{"queue", "show", "q-ghost"}},
	} {
		check(nf.name, 3, nf.want, nil, nf.args...)
	}
	check("usage header", 0, []string{"mailctl is a self-hosted mail exchange"}, []string{"mailctl dev: a self-hosted"}, "--help")
	dir := t.TempDir()
	plain := filepath.Join(dir, "script")
	os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644)
	check("hook program missing", 2, []string{"does not exist"}, nil,
		"hooks", "create", "--mailbox", "agent", "--event", "on_receive", "--cmd", `["`+filepath.Join(dir, "nope")+`"]`)
	check("hook program not executable", 2, []string{"not executable", "/bin/sh"}, nil,
		"hooks", "create", "--mailbox", "agent", "--event", "on_receive", "--cmd", `["`+plain+`"]`)
}

// A settled queue item shows no next attempt.
func TestNextAttemptOfSettledItem(t *testing.T) {
	it := protocol.QueueItem{Recipients: []protocol.RecipientStatus{{Status: "delivered"}, {Status: "failed"}}}
	if got := nextAttempt(it); got != "none (settled)" {
		t.Fatalf("settled item: next attempt %q", got)
	}
	it.Recipients = append(it.Recipients, protocol.RecipientStatus{Status: "deferred"})
	if got := nextAttempt(it); got == "none (settled)" {
		t.Fatal("an item with a deferred recipient shown as settled")
	}
}

// `queue approve` takes the id that send printed for held mail.
func TestQueueApproveTakesTheSentID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("approving held mail is root's")
	}
	td := testdaemon.Start(t, testdaemon.Options{Extra: "\n[[mailboxes]]\nname = \"ops\"\nowner = \"root\"\n[mailboxes.send]\nhold = true\n"})
	env := []string{"MAILCTL_SOCKET=" + td.Socket}
	out, e, code := mailctl(t, env, "send", "--from", "ops", "--to", "someone@"+testdaemon.Domain, "--subject", "held", "--body", "b", "--json")
	var res protocol.SendResult
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Status != "held" {
		t.Fatalf("send: exit %d %s %s", code, out, e)
	}
	if strings.HasPrefix(res.ID, "ops.") {
		t.Fatalf("send printed the queue id already: %s", res.ID)
	}
	if out, e, code := mailctl(t, env, "queue", "approve", res.ID); code != 0 {
		t.Fatalf("queue approve %s: exit %d %s %s", res.ID, code, out, e)
	}
}

// `mailctl mail wait --timeout 10` (docs/cli.md shows --timeout 5m; the MCP
// email_wait counts timeout_secs) got only the flag package's "parse error":
// the error now says the flag takes a unit.
func TestDurationFlagWithoutUnitSaysTheForm(t *testing.T) {
	for _, args := range [][]string{{"mail", "wait", "--timeout", "10"}, {"send", "--from", "agent", "--to", "b@example.org", "--send-at", "x"}} {
		_, e, code := mailctl(t, []string{"MAILCTL_SOCKET=/nonexistent"}, args...)
		if args[0] == "mail" && (code != 2 || !strings.Contains(e, "--timeout takes a duration with its unit, e.g. 30s, 5m or 2h")) {
			t.Errorf("mailctl %v: exit %d, want 2 and the duration's form:\n%s", args, code, e)
		}
		if args[0] == "send" && strings.Contains(e, "takes a duration") {
			t.Errorf("mailctl %v: a flag that is no duration got the duration hint:\n%s", args, e)
		}
	}
}
