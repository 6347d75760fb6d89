package store

import (
	"hash/maphash"
	"strings"
)

// How a body goes into the full-text index.
//
// The index's cost is per word written, and a long body is mostly words it
// has already seen: the engine tokenizes and files every one of them with
// its position. So the first orderedBody bytes of a body go in as they
// are, in order, where a phrase is found; the rest, up to maxIndexedBody,
// goes in as each of its distinct pieces once, each between two wordGap
// terms. A piece is what lies between two spaces, without the ASCII
// punctuation at its ends: a word, or words joined without a space (an
// address, a host name, 3.14159, e-mail, don't), which a search looks for
// as words in a row and finds there as it would in the ordered part. No two
// pieces are next to each other, so the engine never takes words a space
// apart for a phrase the body does not hold next to each other.

// orderedBody is how much of a body the index holds in order.
const orderedBody = 16 << 10

// wordGap separates the distinct pieces of a body's rest. It is scopeMark
// alone: a term no text holds (ftsText) and no search asks for (ftsQuote).
const wordGap = scopeMark

// bodyText is a body as the full-text index takes it.
//
// The rest is split only at ASCII spaces and control characters, and
// trimmed only of ASCII bytes that are neither letters nor digits, at all
// of which the engine's tokenizer (unicode61) ends a word; any other byte
// stays in the piece. So each piece holds whole words of the engine's, in
// their order, and it finds in the pieces exactly the words it would have
// found in the rest (FuzzBodyText checks this against the engine).
func bodyText(body string) string { return bodyTextOrdered(body, orderedBody) }

// bodyTextOrdered is bodyText with the first ordered bytes in order.
func bodyTextOrdered(body string, ordered int) string {
	body = ftsText(body)
	if len(body) <= ordered {
		return body
	}
	// The ordered part ends at a space, never inside a piece.
	cut := ordered
	for cut > 0 && !spaceByte(body[cut-1]) && !spaceByte(body[cut]) {
		cut--
	}
	rest := body[cut:]
	var b strings.Builder
	b.Grow(cut + len(rest)/4)
	b.WriteString(body[:cut])
	var seen wordSet
	for i := 0; i < len(rest); {
		for i < len(rest) && spaceByte(rest[i]) {
			i++
		}
		j := i
		for j < len(rest) && !spaceByte(rest[j]) {
			j++
		}
		if j == i {
			break
		}
		k := j
		for i < k && !wordByte(rest[i]) {
			i++
		}
		for k > i && !wordByte(rest[k-1]) {
			k--
		}
		w := rest[i:k]
		i = j
		if w == "" {
			continue
		}
		if !seen.add(w) {
			continue
		}
		b.WriteString(" " + wordGap + " ")
		b.WriteString(w)
	}
	if seen.n > 0 {
		b.WriteString(" " + wordGap)
	}
	return b.String()
}

// spaceByte reports whether c ends a piece of a body's rest: an ASCII
// space or control character.
func spaceByte(c byte) bool { return c <= ' ' || c == 0x7f }

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

// wordSet is a set of words kept as 63 bits of their hashes, under a seed
// chosen at random when the process starts: two distinct words of a body
// share them once in 2^63 pairs (a 1 MiB body of 150,000 distinct words
// has a word left out of the index about once in 800 million such
// bodies), and no one can choose words that do. It costs about half what
// a map of the words costs (BenchmarkBodyText).
type wordSet struct {
	slots []uint64 // hashes with the low bit set; 0 is an empty slot
	n     int
}

var wordSeed = maphash.MakeSeed()

// add adds w and reports whether it was new.
func (s *wordSet) add(w string) bool {
	if 2*(s.n+1) > len(s.slots) {
		s.grow()
	}
	h := maphash.String(wordSeed, w) | 1
	mask := uint64(len(s.slots) - 1)
	for i := h >> 1 & mask; ; i = (i + 1) & mask {
		switch s.slots[i] {
		case 0:
			s.slots[i] = h
			s.n++
			return true
		case h:
			return false
		}
	}
}

// grow doubles the table (or makes the first) and files the hashes again.
func (s *wordSet) grow() {
	old := s.slots
	s.slots = make([]uint64, max(1024, 2*len(old)))
	mask := uint64(len(s.slots) - 1)
	for _, h := range old {
		if h == 0 {
			continue
		}
		i := h >> 1 & mask
		for s.slots[i] != 0 {
			i = (i + 1) & mask
		}
		s.slots[i] = h
	}
}
