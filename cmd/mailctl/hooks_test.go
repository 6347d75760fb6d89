package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/protocol"
)

// TestHooksCreateFireOnFlagsReachTheDaemon: --fire-on-auto-submitted and
// --fire-on-lists are carried to the daemon and kept there, each on its own
// hook, as `hooks create --json` and `hooks list --json` show.
func TestHooksCreateFireOnFlagsReachTheDaemon(t *testing.T) {
	_, _, sock := startDev(t, t.TempDir())
	env := []string{"MAILCTL_SOCKET=" + sock}
	tests := []struct {
		name      string
		flags     []string
		auto      bool
		lists     bool
		untrusted bool
	}{
		{name: "plain"},
		{name: "auto", flags: []string{"--fire-on-auto-submitted"}, auto: true},
		{name: "lists", flags: []string{"--fire-on-lists"}, lists: true},
		{name: "both", flags: []string{"--fire-on-auto-submitted", "--fire-on-lists"}, auto: true, lists: true},
	}
	for _, tc := range tests {
		args := append([]string{"hooks", "create", "--mailbox", "agent", "--event", "on_receive",
			"--name", tc.name, "--cmd", `["/bin/true"]`, "--json"}, tc.flags...)
		out, e, code := mailctl(t, env, args...)
		if code != 0 {
			t.Fatalf("hooks create %s: exit %d: %s", strings.Join(tc.flags, " "), code, e)
		}
		var h protocol.Hook
		if err := json.Unmarshal([]byte(out), &h); err != nil {
			t.Fatalf("hooks create --json is not JSON: %v\n%s", err, out)
		}
		if h.FireOnAuto != tc.auto || h.FireOnLists != tc.lists || h.FireOnUntrusted != tc.untrusted {
			t.Errorf("create %s %v: got auto=%v lists=%v untrusted=%v, want auto=%v lists=%v untrusted=%v",
				tc.name, tc.flags, h.FireOnAuto, h.FireOnLists, h.FireOnUntrusted, tc.auto, tc.lists, tc.untrusted)
		}
	}

	out, e, code := mailctl(t, env, "hooks", "list", "--mailbox", "agent", "--json")
	if code != 0 {
		t.Fatalf("hooks list: exit %d: %s", code, e)
	}
	var list protocol.HookList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("hooks list --json is not JSON: %v\n%s", err, out)
	}
	got := map[string]protocol.Hook{}
	for _, h := range list.Hooks {
		got[h.Name] = h
	}
	for _, tc := range tests {
		h, ok := got[tc.name]
		if !ok {
			t.Errorf("hooks list lacks %q: %s", tc.name, out)
			continue
		}
		if h.FireOnAuto != tc.auto || h.FireOnLists != tc.lists || h.FireOnUntrusted != tc.untrusted {
			t.Errorf("listed %s: got auto=%v lists=%v untrusted=%v, want auto=%v lists=%v untrusted=%v",
				tc.name, h.FireOnAuto, h.FireOnLists, h.FireOnUntrusted, tc.auto, tc.lists, tc.untrusted)
		}
	}
}
