package daemon

import (
	"strings"
	"testing"
)

// withHeader puts the Authentication-Results header in the room the SMTP
// server left before the message instead of copying the message, and copies
// only when the room is missing, too small, or not right before it.
func TestWithHeaderUsesTheRoomBeforeTheMessage(t *testing.T) {
	all := make([]byte, 16+11)
	copy(all[16:], "Subject: x\n")
	headroom, raw := all[:16], all[16:]
	out := withHeader("AR: pass\r\n", headroom, raw)
	if string(out) != "AR: pass\r\nSubject: x\n" {
		t.Fatalf("got %q", out)
	}
	if &out[len("AR: pass\r\n")] != &raw[0] {
		t.Fatal("the message was copied although the room before it was free")
	}
	for name, c := range map[string]struct {
		hdr      string
		headroom []byte
	}{
		"no room":        {"AR: pass\r\n", nil},
		"room too small": {strings.Repeat("A", 17), headroom},
		"room elsewhere": {"AR: pass\r\n", make([]byte, 16, 64)},
	} {
		out := withHeader(c.hdr, c.headroom, raw)
		if string(out) != c.hdr+"Subject: x\n" {
			t.Fatalf("%s: got %q", name, out)
		}
		if &out[len(c.hdr)] == &raw[0] {
			t.Fatalf("%s: wrote into memory that is not the room before the message", name)
		}
	}
}
