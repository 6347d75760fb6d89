package protocol

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// SubjectOf is a subject taken from another message (a stored one's, which
// its owner may have edited) made to head one of ours, as a reply's or a
// forward's: bytes that are not UTF-8 become U+FFFD, every control
// character (C0, DEL, C1: a line break, an escape sequence) a space, and
// each word is cut to MaxHeaderWord bytes, so that it passes the check a
// caller's subject must.
func SubjectOf(s string) string {
	return CutWords(Printable(s), MaxHeaderWord)
}

// Printable is s with bytes that are not UTF-8 turned into U+FFFD and every
// control character (C0 with CR, LF, NUL and tab, DEL, and C1 such as
// U+0085 NEXT LINE, which some programs take for a line break) into a
// space: one line of text, whatever someone else's message held.
func Printable(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// CutWords cuts each run of s without a space to at most max bytes, at a
// character's start: what a header value taken from someone else's message
// (a reply's or a forward's subject) needs to fit MaxHeaderWord.
func CutWords(s string, max int) string {
	words := strings.Split(s, " ")
	for i, w := range words {
		if len(w) > max {
			cut := max
			for cut > 0 && !utf8.RuneStart(w[cut]) {
				cut--
			}
			words[i] = w[:cut]
		}
	}
	return strings.Join(words, " ")
}
