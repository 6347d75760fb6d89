package daemon_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// TestOwnerLimits: a user may create mailboxes while it owns fewer than
// mailbox_rules.max_per_owner, and hooks on a mailbox while it has fewer
// than hook_rules.max_per_mailbox (each is state in the root daemon, and a
// line of every listing); past either the answer is policy_blocked naming
// the key. Deleting one makes room again; root is not bound, and what root
// makes for the user counts.
func TestOwnerLimits(t *testing.T) {
	testusers.RequireRoot(t)
	u := testusers.Create(t, "mctlim")
	td := testdaemon.Start(t, testdaemon.Options{Extra: "\n[mailbox_rules]\nmax_per_owner = 2\n\n[hook_rules]\nmax_per_mailbox = 2\n"})
	bin := testusers.Executable(t)
	as := func(verb string, args any) callOutcome { return callAs(t, bin, td.Socket, u, verb, args) }
	create := func(name string) callOutcome {
		return as(protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: name})
	}
	blocked := func(o callOutcome, key string) bool {
		return o.Code == protocol.CodePolicyBlocked && strings.Contains(o.Msg, key)
	}
	for _, name := range []string{"lim1", "lim2"} {
		if o := create(name); o.Code != "" {
			t.Fatalf("creating %s: %s %s", name, o.Code, o.Msg)
		}
	}
	if o := create("lim3"); !blocked(o, "mailbox_rules.max_per_owner") {
		t.Fatalf("a third mailbox: %s %q, want policy_blocked naming mailbox_rules.max_per_owner", o.Code, o.Msg)
	}
	// Creating one it has again repairs it, and is no new mailbox.
	if o := create("lim1"); o.Code != "" {
		t.Errorf("creating lim1 again: %s %s", o.Code, o.Msg)
	}
	if o := as(protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "lim1"}); o.Code != "" {
		t.Fatalf("deleting lim1: %s %s", o.Code, o.Msg)
	}
	if o := create("lim3"); o.Code != "" {
		t.Fatalf("a mailbox after deleting one: %s %s", o.Code, o.Msg)
	}
	// Root is not bound, and what it makes for the user counts.
	if err := td.TryCall(protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "lim4", Owner: u.Name}, nil); err != nil {
		t.Fatalf("root creating a third for the user: %v", err)
	}
	if o := as(protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "lim2"}); o.Code != "" {
		t.Fatalf("deleting lim2: %s %s", o.Code, o.Msg)
	}
	if o := create("lim5"); !blocked(o, "max_per_owner") {
		t.Errorf("with two (one root made) a user's new mailbox: %s %q, want policy_blocked", o.Code, o.Msg)
	}

	hook := func(i int) callOutcome {
		return as(protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "lim3", Event: protocol.EventOnReceive, Cmd: []string{"/bin/true", fmt.Sprint(i)}})
	}
	for i := range 2 {
		if o := hook(i); o.Code != "" {
			t.Fatalf("hook %d: %s %s", i, o.Code, o.Msg)
		}
	}
	if o := hook(0); o.Code != "" {
		t.Errorf("the same hook again (idempotent, not a new one): %s %s", o.Code, o.Msg)
	}
	if o := hook(2); !blocked(o, "hook_rules.max_per_mailbox") {
		t.Fatalf("a third hook: %s %q, want policy_blocked naming hook_rules.max_per_mailbox", o.Code, o.Msg)
	}
	// Another mailbox has its own count.
	if o := as(protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "lim4", Event: protocol.EventOnReceive, Cmd: []string{"/bin/true"}}); o.Code != "" {
		t.Errorf("a hook on another mailbox: %s %s", o.Code, o.Msg)
	}
	if err := td.TryCall(protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "lim3", Event: protocol.EventOnReceive, Cmd: []string{"/bin/true", "root"}}, nil); err != nil {
		t.Errorf("root's third hook: %v", err)
	}
}
