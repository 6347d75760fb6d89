package hooks

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mailctl/mailctl/protocol"
)

// FuzzNormalize checks that Normalize never panics and that every hook it
// accepts satisfies the invariants the runner relies on, and stays accepted
// and unchanged when normalized again. cmd is a JSON array when it parses as
// one, else lines.
func FuzzNormalize(f *testing.F) {
	f.Add("on_receive", `["/usr/bin/true"]`, "", 0, false)
	f.Add("after_send", `["/usr/local/bin/notify","--to","x"]`, "notify", 600, false)
	f.Add("on_receive", "/bin/sh\n-c\nclaude -p", "wake.claude", 60, true)
	f.Add("after_send", `["/a"]`, "", 0, true)
	f.Add("on_receive", `["/usr/bin/../bin/sh"]`, "Bad Name", -5, false)
	f.Add("on_receive", `["/a\u0000b"]`, "a..b", 601, false)
	f.Add("", "", "", 0, false)
	f.Add("on_receive", `["relative"]`, "x/y", 1, false)
	f.Fuzz(func(t *testing.T, event, cmdText, name string, timeout int, untrusted bool) {
		var cmd []string
		if json.Unmarshal([]byte(cmdText), &cmd) != nil {
			cmd = nil
			if cmdText != "" {
				cmd = strings.Split(cmdText, "\n")
			}
		}
		h := protocol.Hook{Event: event, Cmd: cmd, Name: name, TimeoutSecs: timeout, FireOnUntrusted: untrusted}
		if err := Normalize(&h); err != nil {
			if !utf8.ValidString(err.Error()) {
				t.Errorf("error message is not valid UTF-8: %q", err)
			}
			return
		}
		if h.Event != protocol.EventOnReceive && h.Event != protocol.EventAfterSend {
			t.Fatalf("accepted event %q", h.Event)
		}
		if len(h.Cmd) < 1 || len(h.Cmd) > MaxArgs {
			t.Fatalf("accepted %d args", len(h.Cmd))
		}
		if !filepath.IsAbs(h.Cmd[0]) || filepath.Clean(h.Cmd[0]) != h.Cmd[0] {
			t.Fatalf("accepted cmd[0] %q", h.Cmd[0])
		}
		for _, a := range h.Cmd {
			if len(a) > MaxArgBytes || strings.ContainsRune(a, 0) {
				t.Fatalf("accepted arg %q", a)
			}
		}
		if h.TimeoutSecs < 1 || h.TimeoutSecs > MaxTimeoutSecs {
			t.Fatalf("accepted timeout %d", h.TimeoutSecs)
		}
		if (h.FireOnUntrusted || h.FireOnAuto || h.FireOnLists) && h.Event != protocol.EventOnReceive {
			t.Fatal("accepted a gate flag on after_send")
		}
		if !nameRE.MatchString(h.Name) {
			t.Fatalf("accepted name %q", h.Name)
		}
		if name == "" && h.Name != DerivedName(h) {
			t.Fatalf("empty name became %q, not the derived name", h.Name)
		}
		again := h
		if err := Normalize(&again); err != nil {
			t.Fatalf("normalized hook rejected on second pass: %v", err)
		}
		if again.Name != h.Name || again.TimeoutSecs != h.TimeoutSecs {
			t.Fatalf("second pass changed the hook: %+v -> %+v", h, again)
		}
	})
}

// FuzzEnv feeds attacker-controlled message fields to Env: every value must
// stay on one line, be valid UTF-8 and within its bound, and the set of
// variables must not depend on the data.
func FuzzEnv(f *testing.F) {
	f.Add("on_receive", "Alice <a@example.com>", "hi\r\nX: y", "b@x,c@y", "a@x", "failed", "550 no\x00such;user", 550)
	f.Add("after_send", "\xff\xfe", strings.Repeat("é", 700), "", "a=b;c", "delivered", "", 0)
	f.Fuzz(func(t *testing.T, event, from, subject, to, rcpt, status, detail string, code int) {
		fa := Facts{Event: event, From: from, Subject: subject, To: strings.Split(to, ","), MessageID: subject, ThreadID: from,
			Recipients: []protocol.RecipientStatus{{Address: rcpt, Status: status, Detail: detail, Code: code}, {Address: from, Status: "delivered"}}}
		env := Env(protocol.Hook{Name: "h", Event: event}, fa, testOwner)
		wantKeys := len(baseKeys) + len(receiveKeys)
		if event == protocol.EventAfterSend {
			wantKeys += 2
		}
		if len(env) != wantKeys {
			t.Fatalf("%d variables, want %d", len(env), wantKeys)
		}
		for _, kv := range env {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || !utf8.ValidString(v) || strings.ContainsAny(v, "\r\n\x00") {
				t.Fatalf("unsafe entry %q", kv)
			}
			limit := MaxEnvValue
			if k == "MAILCTL_TO" || k == "MAILCTL_RECIPIENTS" {
				limit = MaxEnvListValue
			}
			if len(v) > limit {
				t.Fatalf("%s is %d bytes, bound %d", k, len(v), limit)
			}
		}
	})
}
