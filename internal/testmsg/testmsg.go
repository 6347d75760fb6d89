// Package testmsg builds the messages that tests and benchmarks of more
// than one package send, so that each measures the same bytes.
package testmsg

import "strings"

// Plain is a single-part text/plain message of about size bytes (at least
// size, less than a line more) in CRLF lines of 76: the message the
// daemon's inbound benchmark sends and the parser's benchmark parses.
func Plain(size int) []byte {
	var b strings.Builder
	b.WriteString("From: Sender <sender@example.net>\r\nTo: big@example.test\r\nSubject: a large message\r\nDate: Mon, 02 Mar 2026 10:00:00 +0000\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n")
	line := strings.Repeat("lorem ipsum dolor sit amet ", 3)[:74] + "\r\n"
	for b.Len() < size {
		b.WriteString(line)
	}
	return []byte(b.String())
}
