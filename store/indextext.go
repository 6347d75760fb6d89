package store

import "strings"

// How a body goes into the full-text index.
//
// The index's cost is per word written, and a long body is mostly words it
// has already seen: the engine tokenizes and files every one of them with
// its position. So the first orderedBody bytes of a body go in word by word,
// in order, where a phrase is found; the rest, up to maxIndexedBody, goes in
// as each of its distinct words once, each between two wordGap terms, where
// a word is found but a phrase is not: no two of those words are next to
// each other, so the engine never takes them for a phrase the body does not
// hold.

// orderedBody is how much of a body the index holds in order.
const orderedBody = 16 << 10

// wordGap separates the distinct words of a body's rest. It is scopeMark
// alone: a term no text holds (ftsText) and no search asks for (ftsQuote).
const wordGap = scopeMark

// bodyText is a body as the full-text index takes it.
//
// The words of the rest are split only at ASCII bytes that are neither
// letters nor digits, which the engine's tokenizer (unicode61) also ends a
// word at; any other byte stays in the word. So each piece holds whole
// words of the engine's, and it finds in the pieces exactly the words it
// would have found in the rest (FuzzBodyText checks this against the
// engine).
func bodyText(body string) string { return bodyTextOrdered(body, orderedBody) }

// bodyTextOrdered is bodyText with the first ordered bytes in order.
func bodyTextOrdered(body string, ordered int) string {
	body = ftsText(body)
	if len(body) <= ordered {
		return body
	}
	// The ordered part ends between two words.
	cut := ordered
	for cut > 0 && wordByte(body[cut-1]) && wordByte(body[cut]) {
		cut--
	}
	rest := body[cut:]
	var b strings.Builder
	b.Grow(cut + len(rest)/4)
	b.WriteString(body[:cut])
	seen := make(map[string]struct{}, 512)
	for i := 0; i < len(rest); {
		for i < len(rest) && !wordByte(rest[i]) {
			i++
		}
		j := i
		for j < len(rest) && wordByte(rest[j]) {
			j++
		}
		if j == i {
			break
		}
		w := rest[i:j]
		i = j
		if _, ok := seen[w]; ok {
			continue
		}
		seen[w] = struct{}{}
		b.WriteString(" " + wordGap + " ")
		b.WriteString(w)
	}
	if len(seen) > 0 {
		b.WriteString(" " + wordGap)
	}
	return b.String()
}

// wordByte reports whether c can be part of a word of the index's
// tokenizer: an ASCII letter or digit, or any byte of a multi-byte
// character (the tokenizer decides those).
func wordByte(c byte) bool { return wordBytes[c] }

var wordBytes = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 0x80 || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
	}
	return t
}()
