package identtext

import "testing"

func TestCompatibilityChar(t *testing.T) {
	for _, c := range []struct {
		in     string
		r      rune
		folded string
	}{
		{"Boss \uff1cceo\uff20bank\uff1e", '\uff1c', "<"},
		{"ceo\ufe6bbank", '\ufe6b', "@"},
		{"\uff02x", '\uff02', `"`},
		{"a\uff0cb", '\uff0c', ","},
		{"\ufb01le", '\ufb01', "fi"},
		{"x\u00b2", '\u00b2', "2"},
	} {
		r, folded, ok := CompatibilityChar(c.in)
		if !ok || r != c.r || folded != c.folded {
			t.Errorf("CompatibilityChar(%q) = %U %q %v, want %U %q", c.in, r, folded, ok, c.r, c.folded)
		}
	}
	for _, s := range []string{"", "plain", "Zoë", "Zoe\u0308", "李雷", "Łódź", "a\u2028b"} {
		if r, _, ok := CompatibilityChar(s); ok {
			t.Errorf("CompatibilityChar(%q) reported %U", s, r)
		}
	}
}
