package mcpshim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/protocol"
)

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"", 3, ""},
		{"abc", 3, "abc"},
		{"abcd", 3, "abc…"},
		{"ééé", 3, "ééé"}, // 6 bytes, 3 runes: whole
		{"éééé", 3, "ééé…"},
		{strings.Repeat("x", 200), 200, strings.Repeat("x", 200)},
	} {
		if got := clip(tc.in, tc.n); got != tc.want {
			t.Errorf("clip(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// TestStoppedErrorKeepsTheNextAction: a call the server's stop cancelled
// answers unavailable; the next action the call had (wait again with
// since, say) stays, and a call that had none, or failed with a plain
// error, gets none.
func TestStoppedErrorKeepsTheNextAction(t *testing.T) {
	next := &NextAction{Instruction: "wait again", Tool: "email_wait"}
	for _, tc := range []struct {
		name string
		err  error
		want *NextAction
	}{
		{"with a next action", withNext(fail(protocol.CodeTimeout, "timed out"), next), next},
		{"a tool error without one", fail(protocol.CodeTimeout, "timed out"), nil},
		{"a plain error", errors.New("cancelled"), nil},
	} {
		err := stoppedError(tc.err)
		var te *toolError
		if !errors.As(err, &te) || te.err.Code != protocol.CodeUnavailable {
			t.Errorf("%s: %v, want unavailable", tc.name, err)
			continue
		}
		if te.next != tc.want {
			t.Errorf("%s: next action %+v, want %+v", tc.name, te.next, tc.want)
		}
	}
}

// An error without a code of its own is named for what ended the call: a
// deadline is a timeout, a cancel is no timeout and no internal fault.
func TestContextErrorsGetTheirCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("reading: %w", context.DeadlineExceeded), protocol.CodeTimeout},
		{fmt.Errorf("reading: %w", context.Canceled), protocol.CodeUnavailable},
		{errors.New("disk on fire"), protocol.CodeInternal},
	} {
		if got := asProtocolError(tc.err).Code; got != tc.want {
			t.Errorf("%v: code %s, want %s", tc.err, got, tc.want)
		}
	}
}
