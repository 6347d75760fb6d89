package main

import (
	"bytes"
	"testing"
)

// termFilterCases are what an owner's editor may write to root's terminal
// and what reaches it.
var termFilterCases = []struct{ name, in, want string }{
	{"text and UTF-8", "héllo › wörld\r\n", "héllo › wörld\r\n"},
	{"what vim draws", "\x1b[?1049h\x1b[22;0;0t\x1b[1;24r\x1b[?12h\x1b[?12l\x1b[27m\x1b[23m\x1b[29m\x1b[m\x1b[H\x1b[2J\x1b[?25l\x1b[24;1H\"x.md\" 3L\x1b[1;1H\x1b[38;5;12mhi\x1b[m\x1b7\x1b(B\x1b8\x1b=\x1b>",
		"\x1b[?1049h\x1b[1;24r\x1b[?12h\x1b[?12l\x1b[27m\x1b[23m\x1b[29m\x1b[m\x1b[H\x1b[2J\x1b[?25l\x1b[24;1H\"x.md\" 3L\x1b[1;1H\x1b[38;5;12mhi\x1b[m\x1b7\x1b(B\x1b8\x1b=\x1b>"},
	{"clipboard write, BEL", "a\x1b]52;c;cm0gLXJmIH4K\x07b", "ab"},
	{"clipboard read, ST", "a\x1b]52;c;?\x1b\\b", "ab"},
	{"title", "a\x1b]0;TITLE\x07b", "ab"},
	{"title report", "a\x1b[21tb\x1b[20t", "ab"},
	{"DECRQSS", "a\x1bP$qm\x1b\\b", "ab"},
	{"XTGETTCAP", "a\x1bP+q544e\x1b\\b", "ab"},
	{"tmux passthrough", "a\x1bPtmux;\x1b\x1b]52;c;eA==\x07\x1b\\b", "ab"},
	{"APC graphics", "a\x1b_Gf=100,t=f;L2V0Yy9zaGFkb3c=\x1b\\b", "ab"},
	{"PM and SOS", "a\x1b^x\x1b\\\x1bXy\x1b\\b", "ab"},
	{"8-bit CSI as UTF-8", "a\u009b21tb\u009b1mc", "ab\x1b[1mc"},
	{"8-bit OSC as UTF-8, 8-bit ST", "a\u009d52;c;eA==\u009cb", "ab"},
	{"raw 8-bit OSC", "a\x9d52;c;eA==\x07b", "ab"},
	{"raw 8-bit CSI", "a\x9b21tb", "ab"},
	{"other C1", "a\u0085b\x84c", "abc"},
	{"printer controller", "a\x1b[5ib\x1b[4i", "ab"},
	{"ENQ", "a\x05b", "ab"},
	{"string ended by another ESC", "a\x1b]52;c;eA==\x1b[1mb", "a\x1b[1mb"},
	{"huge CSI", "a\x1b[" + string(bytes.Repeat([]byte("1;"), 400)) + "mb", "ab"},
	{"unfinished CSI", "a\x1b[12\nb", "a\nb"},
}

// TestEditorOutputPassesOnlyWhatDraws: the relay from the owner's editor to
// root's terminal passes what an editor draws (text, cursor moves,
// colours, screens) byte for byte, and drops what would act on root
// beyond the screen: clipboard writes and reads, strings (OSC, DCS, APC,
// PM, SOS), window operations and reports, printer control, ENQ, 8-bit C1
// controls; however the output is cut into writes.
func TestEditorOutputPassesOnlyWhatDraws(t *testing.T) {
	for _, c := range termFilterCases {
		var whole bytes.Buffer
		f := &termFilter{w: &whole}
		f.Write([]byte(c.in))
		if whole.String() != c.want {
			t.Errorf("%s: passed %q, want %q", c.name, whole.String(), c.want)
		}
		for cut := 1; cut < len(c.in); cut++ {
			var got bytes.Buffer
			f := &termFilter{w: &got}
			f.Write([]byte(c.in[:cut]))
			f.Write([]byte(c.in[cut:]))
			if got.String() != c.want {
				t.Errorf("%s cut at %d: passed %q, want %q", c.name, cut, got.String(), c.want)
				break
			}
		}
	}
}

// FuzzTermFilter: whatever the editor writes, what passes holds no string
// introducer, no window operation or printer control and no C1 control.
func FuzzTermFilter(f *testing.F) {
	for _, c := range termFilterCases {
		f.Add([]byte(c.in), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, cut uint8) {
		var got bytes.Buffer
		tf := &termFilter{w: &got}
		at := min(int(cut), len(in))
		tf.Write(in[:at])
		tf.Write(in[at:])
		out := got.Bytes()
		for i, b := range out {
			if b == 0x05 || (b >= 0x80 && b <= 0x9f && (i == 0 || out[i-1] == 0xc2 || !continues(out, i))) {
				t.Fatalf("passed %q: byte %#x at %d", out, b, i)
			}
			if b == 0x1b && i+1 < len(out) {
				switch out[i+1] {
				case ']', 'P', 'X', '^', '_':
					t.Fatalf("passed a string introducer: %q", out)
				}
			}
		}
	})
}

// continues reports whether out[i], a byte 0x80 to 0xbf, is a continuation
// of the UTF-8 character before it (other than one that makes a C1).
func continues(out []byte, i int) bool {
	for j := i - 1; j >= 0 && j >= i-3; j-- {
		if out[j] >= 0xc3 && out[j] <= 0xf4 {
			return true
		}
		if out[j] < 0x80 || out[j] > 0xbf {
			return false
		}
	}
	return false
}
