package protocol

import (
	"strings"
	"testing"
	"unicode"
)

// SubjectOf leaves no control character, no invalid UTF-8 and no word past
// MaxHeaderWord in what it returns, and changes nothing else.
func TestSubjectOf(t *testing.T) {
	for in, want := range map[string]string{
		"plain subject":            "plain subject",
		"a\x1b[31mb\x7fc\u0085d":   "a [31mb c d",
		"tab\there\r\nand NUL\x00": "tab here  and NUL ",
		"bad \xff byte":            "bad \uFFFD byte",
		"Grüße, 你好":                "Grüße, 你好",
	} {
		if got := SubjectOf(in); got != want {
			t.Errorf("SubjectOf(%q) = %q, want %q", in, got, want)
		}
	}
	long := SubjectOf("x " + strings.Repeat("é", 500))
	for _, w := range strings.Split(long, " ") {
		if len(w) > MaxHeaderWord {
			t.Errorf("a word of %d bytes is left", len(w))
		}
	}
	for r := rune(0); r < 0x100; r++ {
		if got := SubjectOf(string(r)); unicode.IsControl(r) && got != " " {
			t.Errorf("SubjectOf(%U) = %q, want a space", r, got)
		}
	}
}
