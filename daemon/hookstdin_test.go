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
		td.fireHooks(protocol.EventOnReceive, mb, hooks.Facts{Event: protocol.EventOnReceive, Mailbox: mb, ID: "2026-01-01-000000-x", Trusted: "none"},
			func() []byte { renders[mb]++; return []byte("+++\n+++\nbody\n") })
	}
	td.runner.Wait()
	if renders["quiet"] != 0 || renders["busy"] != 1 {
		t.Fatalf("renders %v: want none without hooks, one for two hooks", renders)
	}
}
