package bounce

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReturnPathVerifiesOnlyItsOwnMessage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "bounce.key")
	k, err := LoadKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	rp := k.ReturnPath("alice@example.test", "m1", "2026-01-01-000000-hi")
	local, domain, _ := strings.Cut(rp, "@")
	base, tag, _ := strings.Cut(local, "+")
	if base != "alice" || domain != "example.test" || !strings.HasPrefix(tag, TagPrefix) || len(tag) != len(TagPrefix)+16 {
		t.Fatalf("return path %q", rp)
	}
	if !k.Valid(tag, "m1", "2026-01-01-000000-hi") || !k.Valid(strings.ToUpper(tag), "m1", "2026-01-01-000000-hi") {
		t.Error("the message's own tag does not verify")
	}
	for _, c := range []struct{ tag, mailbox, sent string }{
		{tag, "m2", "2026-01-01-000000-hi"},                            // the same name, another mailbox
		{tag, "m1", "2026-01-01-000000-other"},                         // another message
		{TagPrefix + "aaaaaaaaaaaaaaaa", "m1", "2026-01-01-000000-hi"}, // a guess
		{"", "m1", "2026-01-01-000000-hi"},
	} {
		if k.Valid(c.tag, c.mailbox, c.sent) {
			t.Errorf("tag %q verifies for %s/%s", c.tag, c.mailbox, c.sent)
		}
	}
	// The key survives a restart; another key verifies nothing of it.
	again, err := LoadKey(path)
	if err != nil || !again.Valid(tag, "m1", "2026-01-01-000000-hi") {
		t.Errorf("reloaded key: %v", err)
	}
	if (&Key{k: make([]byte, keyLen)}).Valid(tag, "m1", "2026-01-01-000000-hi") {
		t.Error("another key verifies the tag")
	}
}
