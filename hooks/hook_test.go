package hooks

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/protocol"
)

func TestNormalize(t *testing.T) {
	long := strings.Repeat("a", MaxArgBytes)
	many := make([]string, MaxArgs)
	for i := range many {
		many[i] = "/bin/true"
	}
	tests := []struct {
		name    string
		in      protocol.Hook
		wantErr string // substring; empty means accepted
		check   func(t *testing.T, h protocol.Hook)
	}{
		{
			name: "defaults filled",
			in:   protocol.Hook{Event: "on_receive", Cmd: []string{"/usr/bin/true"}},
			check: func(t *testing.T, h protocol.Hook) {
				if h.TimeoutSecs != DefaultTimeoutSecs {
					t.Errorf("timeout = %d, want %d", h.TimeoutSecs, DefaultTimeoutSecs)
				}
				if want := DerivedName(protocol.Hook{Event: "on_receive", Cmd: []string{"/usr/bin/true"}}); h.Name != want {
					t.Errorf("name = %q, want derived %q", h.Name, want)
				}
			},
		},
		{
			name: "explicit values kept",
			in:   protocol.Hook{Name: "wake.claude_1-x", Event: "after_send", Cmd: []string{"/x/y", "--a", ""}, TimeoutSecs: 600},
			check: func(t *testing.T, h protocol.Hook) {
				if h.Name != "wake.claude_1-x" || h.TimeoutSecs != 600 || len(h.Cmd) != 3 {
					t.Errorf("hook changed: %+v", h)
				}
			},
		},
		{name: "fire_on_untrusted with on_receive", in: protocol.Hook{Event: "on_receive", Cmd: []string{"/a"}, FireOnUntrusted: true}},
		{name: "max args", in: protocol.Hook{Event: "on_receive", Cmd: many}},
		{name: "max arg length", in: protocol.Hook{Event: "on_receive", Cmd: []string{"/a", long}}},
		{name: "name 64 chars", in: protocol.Hook{Name: strings.Repeat("a", 64), Event: "on_receive", Cmd: []string{"/a"}}},
		{name: "timeout 1", in: protocol.Hook{Event: "on_receive", Cmd: []string{"/a"}, TimeoutSecs: 1}},

		{name: "missing event", in: protocol.Hook{Cmd: []string{"/a"}}, wantErr: "event is missing"},
		{name: "unknown event", in: protocol.Hook{Event: "on_send", Cmd: []string{"/a"}}, wantErr: `unknown event "on_send"`},
		{name: "empty cmd", in: protocol.Hook{Event: "on_receive"}, wantErr: "cmd is empty"},
		{name: "relative cmd", in: protocol.Hook{Event: "on_receive", Cmd: []string{"claude", "-p"}}, wantErr: "not an absolute path"},
		{name: "dot relative cmd", in: protocol.Hook{Event: "on_receive", Cmd: []string{"./run.sh"}}, wantErr: "not an absolute path"},
		{name: "unclean cmd", in: protocol.Hook{Event: "on_receive", Cmd: []string{"/usr/bin/../bin/sh"}}, wantErr: `use "/usr/bin/sh"`},
		{name: "trailing slash", in: protocol.Hook{Event: "on_receive", Cmd: []string{"/usr/bin/"}}, wantErr: "not a clean path"},
		{name: "root dir", in: protocol.Hook{Event: "on_receive", Cmd: []string{"/"}}, wantErr: "is a directory"},
		{name: "NUL in arg", in: protocol.Hook{Event: "on_receive", Cmd: []string{"/a", "x\x00y"}}, wantErr: "cmd[1] contains a NUL"},
		{name: "NUL in program", in: protocol.Hook{Event: "on_receive", Cmd: []string{"/a\x00"}}, wantErr: "cmd[0] contains a NUL"},
		{name: "NUL first in an arg", in: protocol.Hook{Event: "on_receive", Cmd: []string{"/a", "\x00"}}, wantErr: "cmd[1] contains a NUL"},
		{name: "too many args", in: protocol.Hook{Event: "on_receive", Cmd: append(many, "x")}, wantErr: "at most 64"},
		{name: "arg too long", in: protocol.Hook{Event: "on_receive", Cmd: []string{"/a", long + "b"}}, wantErr: "cmd[1] is 4097 bytes"},
		{name: "negative timeout", in: protocol.Hook{Event: "on_receive", Cmd: []string{"/a"}, TimeoutSecs: -1}, wantErr: "timeout_secs -1 is out of range"},
		{name: "timeout too long", in: protocol.Hook{Event: "on_receive", Cmd: []string{"/a"}, TimeoutSecs: 601}, wantErr: "use 1 to 600"},
		{name: "fire_on_untrusted on after_send", in: protocol.Hook{Event: "after_send", Cmd: []string{"/a"}, FireOnUntrusted: true}, wantErr: "fire_on_untrusted only applies"},
		{name: "fire_on_auto_submitted on after_send", in: protocol.Hook{Event: "after_send", Cmd: []string{"/a"}, FireOnAuto: true}, wantErr: "fire_on_auto_submitted only applies"},
		{name: "fire_on_lists on after_send", in: protocol.Hook{Event: "after_send", Cmd: []string{"/a"}, FireOnLists: true}, wantErr: "fire_on_lists only applies"},
		{name: "uppercase name", in: protocol.Hook{Name: "Wake", Event: "on_receive", Cmd: []string{"/a"}}, wantErr: `name "Wake" is not allowed`},
		{name: "name starts with dot", in: protocol.Hook{Name: ".hidden", Event: "on_receive", Cmd: []string{"/a"}}, wantErr: "is not allowed"},
		{name: "name with slash", in: protocol.Hook{Name: "a/b", Event: "on_receive", Cmd: []string{"/a"}}, wantErr: "is not allowed"},
		{name: "name with newline", in: protocol.Hook{Name: "a\n", Event: "on_receive", Cmd: []string{"/a"}}, wantErr: "is not allowed"},
		{name: "fullwidth name", in: protocol.Hook{Name: "\uff57\uff41\uff4b\uff45", Event: "on_receive", Cmd: []string{"/a"}}, wantErr: "is not allowed"},
		{name: "name with a line separator", in: protocol.Hook{Name: "a\u2028b", Event: "on_receive", Cmd: []string{"/a"}}, wantErr: "is not allowed"},
		{name: "name too long", in: protocol.Hook{Name: strings.Repeat("a", 65), Event: "on_receive", Cmd: []string{"/a"}}, wantErr: "is not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.in
			h.Cmd = append([]string(nil), tt.in.Cmd...)
			err := Normalize(&h)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Normalize: %v", err)
				}
				if tt.check != nil {
					tt.check(t, h)
				}
				return
			}
			if err == nil {
				t.Fatalf("Normalize accepted %+v, want error containing %q", tt.in, tt.wantErr)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error = %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
	if err := Normalize(nil); err == nil {
		t.Error("Normalize(nil) accepted")
	}
}

func TestDerivedName(t *testing.T) {
	hex12 := regexp.MustCompile(`^[0-9a-f]{12}$`)
	base := DerivedName(protocol.Hook{Event: "on_receive", Cmd: []string{"/bin/a", "b"}})
	if !hex12.MatchString(base) {
		t.Fatalf("DerivedName = %q, want 12 lowercase hex", base)
	}
	if again := DerivedName(protocol.Hook{Event: "on_receive", Cmd: []string{"/bin/a", "b"}}); again != base {
		t.Errorf("not stable: %q then %q", base, again)
	}
	// Fixed value: the name is part of stored state, so the encoding must not drift.
	if got, want := DerivedName(protocol.Hook{Event: "on_receive", Cmd: []string{"/usr/bin/true"}}), derivedTrue; got != want {
		t.Errorf("DerivedName(on_receive, [/usr/bin/true]) = %q, want %q", got, want)
	}
	others := map[string]string{
		"event":         DerivedName(protocol.Hook{Event: "after_send", Cmd: []string{"/bin/a", "b"}}),
		"flag":          DerivedName(protocol.Hook{Event: "on_receive", Cmd: []string{"/bin/a", "b"}, FireOnUntrusted: true}),
		"joined args":   DerivedName(protocol.Hook{Event: "on_receive", Cmd: []string{"/bin/ab"}}),
		"split differs": DerivedName(protocol.Hook{Event: "on_receive", Cmd: []string{"/bin/a", "", "b"}}),
		"moved to end":  DerivedName(protocol.Hook{Event: "on_receive", Cmd: []string{"/bin/a"}}),
		"event in cmd":  DerivedName(protocol.Hook{Event: "", Cmd: []string{"on_receive", "/bin/a", "b"}}),
		"auto flag":     DerivedName(protocol.Hook{Event: "on_receive", Cmd: []string{"/bin/a", "b"}, FireOnAuto: true}),
		"lists flag":    DerivedName(protocol.Hook{Event: "on_receive", Cmd: []string{"/bin/a", "b"}, FireOnLists: true}),
		"both flags":    DerivedName(protocol.Hook{Event: "on_receive", Cmd: []string{"/bin/a", "b"}, FireOnAuto: true, FireOnLists: true}),
	}
	seen := map[string]string{base: "base"}
	for what, n := range others {
		if prev, dup := seen[n]; dup {
			t.Errorf("%s collides with %s: %q", what, prev, n)
		}
		seen[n] = what
	}
}

// derivedTrue pins the derived name of a simple hook.
const derivedTrue = "7a75f1b17cb4"

func TestShouldFire(t *testing.T) {
	recv := protocol.Hook{Name: "h", Mailbox: "agent", Event: "on_receive", Cmd: []string{"/a"}}
	with := func(mod func(*protocol.Hook)) protocol.Hook {
		h := recv
		mod(&h)
		return h
	}
	trusted := Facts{Event: "on_receive", Mailbox: "agent", Trusted: "true"}
	fact := func(mod func(*Facts)) Facts {
		f := trusted
		mod(&f)
		return f
	}
	tests := []struct {
		name   string
		h      protocol.Hook
		f      Facts
		want   bool
		reason string
	}{
		{"trusted fires", recv, trusted, true, ReasonFire},
		{"untrusted skipped", recv, fact(func(f *Facts) { f.Trusted = "false" }), false, ReasonUntrusted},
		{"no trust policy skipped", recv, fact(func(f *Facts) { f.Trusted = "none" }), false, ReasonUntrusted},
		{"empty trust skipped", recv, fact(func(f *Facts) { f.Trusted = "" }), false, ReasonUntrusted},
		{"odd trust value skipped", recv, fact(func(f *Facts) { f.Trusted = "TRUE" }), false, ReasonUntrusted},
		{"untrusted with fire_on_untrusted", with(func(h *protocol.Hook) { h.FireOnUntrusted = true }), fact(func(f *Facts) { f.Trusted = "false" }), true, ReasonFireUntrusted},
		{"auto-submitted skipped", recv, fact(func(f *Facts) { f.AutoSubmitted = "auto-replied" }), false, ReasonAutoSubmitted},
		{"auto-submitted with params skipped", recv, fact(func(f *Facts) { f.AutoSubmitted = " Auto-Generated; owner-email=x@y" }), false, ReasonAutoSubmitted},
		{"auto-submitted no fires", recv, fact(func(f *Facts) { f.AutoSubmitted = " No " }), true, ReasonFire},
		{"auto-submitted with fire_on_auto", with(func(h *protocol.Hook) { h.FireOnAuto = true }), fact(func(f *Facts) { f.AutoSubmitted = "auto-replied" }), true, ReasonFire},
		{"auto-submitted untrusted even with fire_on_auto", with(func(h *protocol.Hook) { h.FireOnAuto = true }), fact(func(f *Facts) { f.AutoSubmitted = "auto-replied"; f.Trusted = "false" }), false, ReasonUntrusted},
		{"list skipped", recv, fact(func(f *Facts) { f.ListID = "<dev.lists.example.org>" }), false, ReasonList},
		{"list skipped even with fire_on_untrusted", with(func(h *protocol.Hook) { h.FireOnUntrusted = true }), fact(func(f *Facts) { f.ListID = "x"; f.Trusted = "false" }), false, ReasonList},
		{"list with fire_on_lists", with(func(h *protocol.Hook) { h.FireOnLists = true }), fact(func(f *Facts) { f.ListID = "x" }), true, ReasonFire},
		{"blank list id fires", recv, fact(func(f *Facts) { f.ListID = "  " }), true, ReasonFire},
		{"event mismatch", recv, fact(func(f *Facts) { f.Event = "after_send" }), false, ReasonEventMismatch},
		{"after_send hook on receive", with(func(h *protocol.Hook) { h.Event = "after_send" }), trusted, false, ReasonEventMismatch},
		{"other mailbox", recv, fact(func(f *Facts) { f.Mailbox = "other" }), false, ReasonMailboxMismatch},
		{"after_send fires without trust", with(func(h *protocol.Hook) { h.Event = "after_send" }), Facts{Event: "after_send", Mailbox: "agent", Trusted: "none", AutoSubmitted: "auto-replied"}, true, ReasonFire},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := ShouldFire(tt.h, tt.f)
			if got != tt.want || reason != tt.reason {
				t.Errorf("ShouldFire = %v, %q; want %v, %q", got, reason, tt.want, tt.reason)
			}
		})
	}
}

// TestErrorQuotesAreBounded: a value quoted in an error is shown whole up to
// 80 bytes and cut with "..." beyond.
func TestErrorQuotesAreBounded(t *testing.T) {
	if got := truncateForError(strings.Repeat("x", 80)); got != strings.Repeat("x", 80) {
		t.Errorf("80 bytes became %q", got)
	}
	if got := truncateForError(strings.Repeat("x", 81)); got != strings.Repeat("x", 80)+"..." {
		t.Errorf("81 bytes became %q", got)
	}
	err := Normalize(&protocol.Hook{Event: "on_receive", Cmd: []string{strings.Repeat("r", 200)}})
	if err == nil || !strings.Contains(err.Error(), strings.Repeat("r", 80)+"...") || strings.Contains(err.Error(), strings.Repeat("r", 81)) {
		t.Errorf("error for a 200-byte relative cmd[0]: %v", err)
	}
}

// TestStoredAfterSendFlagsStillRun: an after_send hook stored with
// fire_on_auto_submitted or fire_on_lists (which earlier releases took and
// which never meant anything there) still starts; only creating one is
// refused.
func TestStoredAfterSendFlagsStillRun(t *testing.T) {
	owner := Owner{UID: uint32(os.Getuid())}
	if owner.UID == 0 {
		owner.UID = 65534
	}
	for _, h := range []protocol.Hook{
		{Name: "a", Event: protocol.EventAfterSend, Cmd: []string{"/bin/true"}, FireOnLists: true},
		{Name: "b", Event: protocol.EventAfterSend, Cmd: []string{"/bin/true"}, FireOnAuto: true},
	} {
		if err := Normalize(&protocol.Hook{Event: h.Event, Cmd: h.Cmd, FireOnLists: h.FireOnLists, FireOnAuto: h.FireOnAuto}); err == nil {
			t.Errorf("creating %+v was not refused", h)
		}
		if err := startable(&h, owner); err != nil {
			t.Errorf("stored %+v: %v, want it to start", h, err)
		}
	}
}
