package daemon

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// TestHookRunsOfAHookMadeAgainAreNotShown: a hook deleted and created
// again under its name is another hook (docs/hooks.md); `hooks runs NAME`
// and hook_list show none of the runs of the one before it, while the runs
// of a hook deleted with no successor stay listed. Root sees every run.
func TestHookRunsOfAHookMadeAgainAreNotShown(t *testing.T) {
	testusers.RequireRoot(t) // the owner's view: root's shows every run
	u := testusers.Create(t, "mchr")
	td := startDaemon(t, "")
	if err := td.EnsureMailbox("mine", u.UID, u.GID); err != nil {
		t.Fatal(err)
	}
	cp := startClient(t, testusers.Executable(t), td.socket, principal{name: u.Name, uid: u.UID, gid: u.GID})
	call := func(verb string, args, out any) {
		t.Helper()
		o := cp.do(t, verb, args)
		if o.Code != "" {
			t.Fatalf("%s as the owner: %+v", verb, o)
		}
		if err := json.Unmarshal(o.Data, out); err != nil {
			t.Fatal(err)
		}
	}
	var old protocol.Hook
	if err := td.call(t, protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "mine", Name: "wake", Event: "on_receive", Cmd: []string{"/bin/true"}}, &old); err != nil {
		t.Fatal(err)
	}
	var gone protocol.Hook
	if err := td.call(t, protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "mine", Name: "gone", Event: "on_receive", Cmd: []string{"/bin/true"}}, &gone); err != nil {
		t.Fatal(err)
	}
	for _, h := range []protocol.Hook{old, gone} {
		if err := td.hookLog.Append(protocol.HookRun{Hook: h.Name, HookID: h.ID, Mailbox: "mine", MailboxID: h.MailboxID, Event: h.Event,
			MessageID: "of-" + h.Name, StartedAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"wake", "gone"} {
		if err := td.call(t, protocol.VerbHookDelete, protocol.HookDeleteArgs{Mailbox: "mine", Name: name}, nil); err != nil {
			t.Fatal(err)
		}
	}
	var made protocol.Hook
	if err := td.call(t, protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "mine", Name: "wake", Event: "on_receive", Cmd: []string{"/bin/echo"}}, &made); err != nil {
		t.Fatal(err)
	}
	if made.ID == old.ID {
		t.Fatalf("the hook made again has the old identity %s", made.ID)
	}
	var runs protocol.HookRuns
	call(protocol.VerbHookRuns, protocol.HookRunsArgs{Name: "wake"}, &runs)
	if len(runs.Runs) != 0 {
		t.Errorf("hooks runs wake shows %+v, runs of the hook deleted before this one was made", runs.Runs)
	}
	runs = protocol.HookRuns{}
	call(protocol.VerbHookRuns, protocol.HookRunsArgs{}, &runs)
	if len(runs.Runs) != 1 || runs.Runs[0].Hook != "gone" {
		t.Errorf("hooks runs shows %+v; want the one run of the deleted hook gone, which nothing replaced", runs.Runs)
	}
	var list protocol.HookList
	call(protocol.VerbHookList, protocol.HookListArgs{Mailbox: "mine"}, &list)
	if len(list.Hooks) != 1 || list.Hooks[0].LastRun != nil {
		t.Errorf("hook list: %+v; want the new wake without a last run", list.Hooks)
	}
	if err := td.call(t, protocol.VerbHookRuns, protocol.HookRunsArgs{}, &runs); err != nil || len(runs.Runs) != 2 {
		t.Errorf("root's hooks runs: %+v, %v; want both runs", runs.Runs, err)
	}
}
