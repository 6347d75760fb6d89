package remote

import (
	"bytes"
	"slices"
	"unicode/utf8"
)

// needsSMTPUTF8 reports whether a transaction needs SMTPUTF8 (RFC 6531): an
// envelope address, or the message's header section, that is not ASCII.
func needsSMTPUTF8(from string, rcpts []string, data []byte) bool {
	if !isASCII(from) || slices.ContainsFunc(rcpts, func(r string) bool { return !isASCII(r) }) {
		return true
	}
	head := data
	if i := bytes.Index(data, []byte("\r\n\r\n")); i >= 0 {
		head = data[:i]
	}
	return !isASCII(head)
}

func isASCII[T string | []byte](s T) bool {
	for i := range len(s) {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
