package testmsg

import (
	"bytes"
	"net/mail"
	"testing"
)

// TestPlainIsOfItsSize: a message a benchmark names by its size is that
// size (within a line), with a header the parsers read and CRLF lines of
// at most 76.
func TestPlainIsOfItsSize(t *testing.T) {
	for _, size := range []int{4 << 10, 100 << 10} {
		raw := Plain(size)
		if len(raw) < size || len(raw) >= size+76 {
			t.Errorf("Plain(%d) is %d bytes", size, len(raw))
		}
		m, err := mail.ReadMessage(bytes.NewReader(raw))
		if err != nil || m.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Fatalf("Plain(%d): %v, %v", size, err, m)
		}
		for _, line := range bytes.SplitAfter(raw, []byte("\r\n")) {
			if len(line) > 76 || len(line) > 0 && !bytes.HasSuffix(line, []byte("\r\n")) {
				t.Fatalf("Plain(%d) has the line %q", size, line)
			}
		}
	}
}
