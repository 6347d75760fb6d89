package protocol

import (
	"strings"
	"unicode/utf8"
)

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
