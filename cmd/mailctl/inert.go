package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// What a command prints is read on a terminal, and much of it comes from
// outside: senders' names and subjects, a remote server's replies, hook
// output, file names, labels, the daemon's messages. Terminal escape
// sequences in it could set the window title, rewrite the screen or the
// clipboard (OSC 52), or hide and reorder text. So every command writes
// through stdout and stderr, which make whatever passes inert (inertBody),
// and prints a field from outside with inert, which keeps it on its line;
// --json escapes the same characters (jsonInert), so the JSON printed on a
// terminal is safe too and still decodes to the exact text.

// stdout and stderr are the commands' outputs, made inert. They find
// os.Stdout and os.Stderr when written to, so that gendocs can capture them.
var (
	stdout io.Writer = inertWriter{func() io.Writer { return os.Stdout }}
	stderr io.Writer = inertWriter{func() io.Writer { return os.Stderr }}
)

// inertWriter writes what it is given made inert (multi-line: newlines and
// tabs stay). A sequence cut between two writes loses its start (the ESC
// or C1 byte), so what is left prints as plain text.
type inertWriter struct{ to func() io.Writer }

func (w inertWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(w.to(), inertBody(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// inert makes untrusted text safe to print on one line of a terminal:
// escape sequences (CSI, OSC, DCS and the rest) are removed whole, other
// control characters and line breaks become spaces, and characters that
// reorder or hide text (bidirectional overrides, zero-width marks) go.
func inert(s string) string { return sanitize(s, false) }

// inertBody is inert for a body: newlines and tabs stay.
func inertBody(s string) string { return sanitize(s, true) }

func sanitize(s string, multiline bool) string {
	if !needsSanitizing(s, multiline) {
		return s
	}
	var b strings.Builder
	rs := []rune(strings.ToValidUTF8(s, "\uFFFD"))
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case escapeStart(r):
			i = skipEscape(rs, i)
		case r == '\n' && multiline, r == '\t' && multiline:
			b.WriteRune(r)
		case r == '\r' && multiline:
			// CR alone would move the cursor back over what was printed.
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			b.WriteRune(' ')
		case invisible(r):
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// needsSanitizing reports whether s holds anything sanitize changes (the
// common case, plain text, is printed as it is): for one line, a newline
// or tab too.
func needsSanitizing(s string, multiline bool) bool {
	for _, r := range s {
		if (multiline && (r == '\n' || r == '\t')) || !unsafeRune(r) {
			continue
		}
		return true
	}
	return false
}

// unsafeRune reports whether a terminal could act on r rather than show it,
// or r hides or reorders what is shown: the controls (C0, DEL, C1), format
// characters and line separators, and invalid UTF-8 (RuneError).
func unsafeRune(r rune) bool {
	return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || invisible(r) || r == '\uFFFD'
}

// escapeStart reports whether r starts an escape sequence: ESC, or the
// 8-bit CSI, OSC, DCS, SOS, PM or APC.
func escapeStart(r rune) bool {
	switch r {
	case 0x1b, 0x9b, 0x9d, 0x90, 0x98, 0x9e, 0x9f:
		return true
	}
	return false
}

// invisible reports whether r is a format character (Unicode category Cf:
// zero-width marks, bidirectional controls, the soft hyphen, the tag
// characters that smuggle unseen ASCII to a model) or a line or paragraph
// separator: each hides, reorders or breaks what is shown around it.
func invisible(r rune) bool {
	return unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029'
}

// skipEscape returns the index of the last rune of the escape sequence that
// starts at i.
func skipEscape(rs []rune, i int) int {
	kind, i, ok := escapeKind(rs, i)
	switch {
	case !ok:
		return i
	case kind == '[':
		return skipCSI(rs, i)
	case kind == ']' || kind == 'P' || kind == 'X' || kind == '^' || kind == '_':
		return skipString(rs, i)
	case kind >= 0x20 && kind <= 0x2f && i+1 < len(rs):
		// Two- or three-character escapes (ESC ( B, ESC 7, ...).
		return i + 1
	}
	return i
}

// escapeKind returns what kind of escape starts at i ('[' for CSI, ']' for
// OSC, 'P' for the other strings, or the character after ESC) and the index
// of the rune that says so; ok is false for an ESC at the end.
func escapeKind(rs []rune, i int) (kind rune, at int, ok bool) {
	switch r := rs[i]; {
	case r == 0x1b && i+1 < len(rs):
		return rs[i+1], i + 1, true
	case r == 0x1b:
		return 0, i, false
	case r == 0x9b:
		return '[', i, true
	case r == 0x9d:
		return ']', i, true
	}
	return 'P', i, true // DCS, PM, APC, SOS in their 8-bit forms
}

// skipCSI skips a CSI's parameters and intermediates up to its final byte.
func skipCSI(rs []rune, i int) int {
	for i++; i < len(rs); i++ {
		if rs[i] >= 0x40 && rs[i] <= 0x7e {
			return i
		}
		if rs[i] < 0x20 || rs[i] > 0x7e {
			return i - 1
		}
	}
	return len(rs) - 1
}

// skipString skips a control string up to BEL or ST (ESC \ or 0x9c).
func skipString(rs []rune, i int) int {
	for i++; i < len(rs); i++ {
		switch {
		case rs[i] == 0x07 || rs[i] == 0x9c:
			return i
		case rs[i] == 0x1b && i+1 < len(rs) && rs[i+1] == '\\':
			return i + 1
		}
	}
	return len(rs) - 1
}

// jsonInert escapes, in JSON text encoding/json wrote, every character
// unsafeRune refuses that the encoder leaves as it is (DEL, C1 controls such
// as U+009B, format characters such as U+202E; it escapes C0 controls and
// U+2028/9 itself) as \uXXXX: JSON's own escape, so the text decodes to
// the same strings. Such characters occur only inside strings, where the
// escape is valid.
func jsonInert(b []byte) []byte {
	var out bytes.Buffer
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		switch {
		case r == '\n' || r == '\t' || r == '\r' || r == ' ' || !unsafeRune(r) || (r == '\uFFFD' && n == 3):
			out.Write(b[:n])
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&out, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&out, `\u%04x`, r)
		}
		b = b[n:]
	}
	return out.Bytes()
}

// printJSON prints v as indented JSON, made inert.
func printJSON(v any) int {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintln(stderr, "mailctl:", err)
		return 1
	}
	if _, err := os.Stdout.Write(jsonInert(buf.Bytes())); err != nil {
		fmt.Fprintln(stderr, "mailctl:", err)
		return 1
	}
	return 0
}
