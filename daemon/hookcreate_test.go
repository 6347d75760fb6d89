package daemon

import (
	"errors"
	"testing"

	"github.com/mailctl/mailctl/protocol"
)

// TestHookCreateWithAnotherGateFlagIsAnotherHook: creating a hook again with
// fire_on_lists or fire_on_auto_submitted set, unnamed or under the same name,
// is not the idempotent repeat of the hook without it. An unnamed one gets a
// name of its own; a named one is a conflict. Before, both answered with the
// existing hook, whose flag stayed off, and the caller was told it was made.
func TestHookCreateWithAnotherGateFlagIsAnotherHook(t *testing.T) {
	td := startDaemon(t, "")
	td.ensureMine(t, "agent")
	create := func(a protocol.HookCreateArgs) (protocol.Hook, error) {
		a.Mailbox, a.Event, a.Cmd = "agent", protocol.EventOnReceive, []string{"/bin/true"}
		var h protocol.Hook
		err := td.call(t, protocol.VerbHookCreate, a, &h)
		return h, err
	}
	plain, err := create(protocol.HookCreateArgs{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []protocol.HookCreateArgs{{FireOnLists: true}, {FireOnAuto: true}} {
		h, err := create(a)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == plain.Name || h.FireOnLists != a.FireOnLists || h.FireOnAuto != a.FireOnAuto {
			t.Errorf("create %+v answered %+v; the hook without the flag is %q", a, h, plain.Name)
		}
	}
	if _, err := create(protocol.HookCreateArgs{Name: "named"}); err != nil {
		t.Fatal(err)
	}
	h, err := create(protocol.HookCreateArgs{Name: "named", FireOnLists: true})
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeConflict {
		t.Errorf("same name with fire_on_lists: %+v, %v; want a conflict", h, err)
	}
	if h, err := create(protocol.HookCreateArgs{Name: "named"}); err != nil || h.Name != "named" {
		t.Errorf("the same hook again: %+v, %v; want it answered", h, err)
	}
	// Unnamed, a definition that exists under another name (as one derived
	// before the flags counted in it) is that hook, not a second one that
	// would run beside it.
	if _, err := create(protocol.HookCreateArgs{Name: "older", TimeoutSecs: 7, FireOnLists: true}); err != nil {
		t.Fatal(err)
	}
	if h, err := create(protocol.HookCreateArgs{TimeoutSecs: 7, FireOnLists: true}); err != nil || h.Name != "older" {
		t.Errorf("the same definition again without a name: %+v, %v; want the hook named older", h, err)
	}
}
