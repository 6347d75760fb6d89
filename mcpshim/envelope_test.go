package mcpshim

import (
	"strings"
	"testing"
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
