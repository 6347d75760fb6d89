package smtpin

import (
	"bytes"
	"testing"
)

// bareEOLByDefinition is hasBareEOL written as its definition, byte by byte.
func bareEOLByDefinition(b []byte) bool {
	for i, c := range b {
		if c == '\r' && (i+1 == len(b) || b[i+1] != '\n') || c == '\n' && (i == 0 || b[i-1] != '\r') {
			return true
		}
	}
	return false
}

var bareEOLCases = []string{"", "a", "\r\n", "a\r\nb\r\n", "\r", "\n", "a\rb", "a\nb", "\r\r\n", "\r\n\n", "\n\r",
	"x\r\n\r\n.\r\n", "line\r\nline\r", "\r\n\r\n\r\n", "a\r\n\rb\r\n", "ab\r\n\x00\n"}

func TestHasBareEOL(t *testing.T) {
	for _, c := range bareEOLCases {
		if got, want := hasBareEOL([]byte(c)), bareEOLByDefinition([]byte(c)); got != want {
			t.Errorf("hasBareEOL(%q) = %v, want %v", c, got, want)
		}
	}
	long := bytes.Repeat([]byte("0123456789 abcdefghij\r\n"), 50000)
	if hasBareEOL(long) {
		t.Error("a long message of CRLF lines has a bare line end")
	}
	for _, at := range []int{0, 1, 22, len(long) / 2, len(long) - 2, len(long) - 1} {
		for _, c := range []byte{'\r', '\n'} {
			m := bytes.Clone(long)
			if m[at] == c {
				continue
			}
			m[at] = c
			if got, want := hasBareEOL(m), bareEOLByDefinition(m); got != want {
				t.Errorf("%q at %d: hasBareEOL = %v, want %v", c, at, got, want)
			}
		}
	}
}

// FuzzBareEOL: hasBareEOL agrees with its definition on any bytes.
func FuzzBareEOL(f *testing.F) {
	for _, c := range bareEOLCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := hasBareEOL(b), bareEOLByDefinition(b); got != want {
			t.Fatalf("hasBareEOL(%q) = %v, want %v", b, got, want)
		}
	})
}

// BenchmarkHasBareEOL: a 1 MiB message of 80-byte lines.
func BenchmarkHasBareEOL(b *testing.B) {
	m := bytes.Repeat(append(bytes.Repeat([]byte("x"), 78), '\r', '\n'), 13108)
	b.SetBytes(int64(len(m)))
	for b.Loop() {
		if hasBareEOL(m) {
			b.Fatal("bare EOL")
		}
	}
}
