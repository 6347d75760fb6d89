package daemon

import (
	"testing"

	"github.com/mailctl/mailctl/hooks"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// A hook's stdin is the rendered message: rendered once however many hooks
// run, and not at all when none does (a large message was rendered a second
// time for every delivery just in case).
func TestHookStdinRenderedOnlyForHooks(t *testing.T) {
	testusers.RequireRoot(t) // hooks run as the mailbox owner, never as root
	u := testusers.Create(t, "mchs")
	td := startDaemon(t, "")
	for _, mb := range []string{"quiet", "busy"} {
		if err := td.EnsureMailbox(mb, u.UID, u.GID); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"h1", "h2"} {
		if err := td.call(t, protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "busy", Event: protocol.EventOnReceive, Name: name,
			Cmd: []string{"/bin/true"}, FireOnUntrusted: true}, nil); err != nil {
			t.Fatal(err)
		}
	}
	renders := map[string]int{}
	for _, mb := range []string{"quiet", "busy"} {
		td.fireHooks(protocol.EventOnReceive, mb, "", hooks.Facts{Event: protocol.EventOnReceive, Mailbox: mb, ID: "2026-01-01-000000-x", Trusted: "none"},
			func() []byte { renders[mb]++; return []byte("+++\n+++\nbody\n") })
	}
	td.runner.Wait()
	if renders["quiet"] != 0 || renders["busy"] != 1 {
		t.Fatalf("renders %v: want none without hooks, one for two hooks", renders)
	}
}

// A message routed to a mailbox that is deleted and made again under the
// same name by another user before its hooks are chosen fires none of the
// new mailbox's hooks: they would run with the first mailbox's message in
// their environment and stdin.
func TestHooksOfAMailboxMadeAgainAreNotFired(t *testing.T) {
	testusers.RequireRoot(t)
	u1 := testusers.Create(t, "mcre1")
	u2 := testusers.Create(t, "mcre2")
	td := startDaemon(t, "")
	if err := td.EnsureMailbox("again", u1.UID, u1.GID); err != nil {
		t.Fatal(err)
	}
	rt, err := td.route("again@example.test")
	if err != nil || rt.ID == "" {
		t.Fatalf("route: %+v %v", rt, err)
	}
	if err := td.call(t, protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "again", Force: true}, nil); err != nil {
		t.Fatal(err)
	}
	if err := td.EnsureMailbox("again", u2.UID, u2.GID); err != nil {
		t.Fatal(err)
	}
	if err := td.call(t, protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "again", Event: protocol.EventOnReceive, Name: "h",
		Cmd: []string{"/bin/true"}, FireOnUntrusted: true}, nil); err != nil {
		t.Fatal(err)
	}
	renders := 0
	fire := func(id string) {
		td.fireHooks(protocol.EventOnReceive, "again", id, hooks.Facts{Event: protocol.EventOnReceive, Mailbox: "again", ID: "2026-01-01-000000-x", Trusted: "none"},
			func() []byte { renders++; return []byte("+++\n+++\nu1's body\n") })
		td.runner.Wait()
	}
	fire(rt.ID)
	if renders != 0 || len(td.hookLog.List(nil, 0)) != 0 {
		t.Fatalf("the new mailbox's hook fired for the first one's message: %d renders, runs %+v", renders, td.hookLog.List(nil, 0))
	}
	now, err := td.route("again@example.test")
	if err != nil || now.ID == rt.ID {
		t.Fatalf("the mailbox made again has the first one's id: %+v %v", now, err)
	}
	fire(now.ID)
	if renders != 1 {
		t.Fatalf("a message routed to the new mailbox: %d renders, want its hook fired", renders)
	}
}
