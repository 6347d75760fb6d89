package bounce

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/internal/testwait"
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
	if base != "alice" || domain != "example.test" || !strings.HasPrefix(tag, TagPrefix) || len(tag) != len(TagPrefix)+tagLen {
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

// A tag names the mailbox it was made for, so that mail to a tag of a
// mailbox deleted since can be refused before the new mailbox of the name
// sees it; tags given before they named their mailbox still verify, and
// are never taken for another mailbox's.
func TestTagNamesItsMailbox(t *testing.T) {
	k, err := LoadKey(filepath.Join(t.TempDir(), "bounce.key"))
	if err != nil {
		t.Fatal(err)
	}
	rp := k.ReturnPath("alice@example.test", "m1", "2026-01-01-000000-hi")
	_, tag, _ := strings.Cut(strings.TrimSuffix(rp, "@example.test"), "+")
	if k.OtherMailbox(tag, "m1") || k.OtherMailbox(strings.ToUpper(tag), "m1") {
		t.Errorf("tag %q taken for another mailbox's by its own", tag)
	}
	if !k.OtherMailbox(tag, "m2") {
		t.Errorf("tag %q not taken for another mailbox's by m2", tag)
	}
	// Made again, a mailbox gets another identity: one in a million of
	// its identities' letters matches; none of a thousand do.
	for i := range 1000 {
		if !k.OtherMailbox(tag, fmt.Sprintf("m1-again-%d", i)) {
			t.Fatalf("tag %q passes for mailbox m1-again-%d", tag, i)
		}
	}
	legacy := TagPrefix + k.mac("m1", "2026-01-01-000000-hi")
	if rp := k.LegacyReturnPath("alice@example.test", "m1", "2026-01-01-000000-hi"); rp != "alice+"+legacy+"@example.test" {
		t.Errorf("LegacyReturnPath = %q, want alice+%s@example.test", rp, legacy)
	}
	if len(legacy) != len(TagPrefix)+legacyTagLen || !k.Valid(legacy, "m1", "2026-01-01-000000-hi") || k.Valid(legacy, "m2", "2026-01-01-000000-hi") {
		t.Errorf("a tag given before tags named their mailbox (%q) does not verify as it did", legacy)
	}
	for _, other := range []string{legacy, "", "news", TagPrefix, TagPrefix + "x", tag + "x", "x" + tag, tag[:len(tag)-1]} {
		if k.OtherMailbox(other, "m2") {
			t.Errorf("%q is taken for another mailbox's tag", other)
		}
	}
	// Only a tag's own mailbox letters and MAC verify it.
	swapped := TagPrefix + k.box("m2") + tag[len(TagPrefix)+boxLen:]
	if k.Valid(swapped, "m2", "2026-01-01-000000-hi") || k.Valid(swapped, "m1", "2026-01-01-000000-hi") {
		t.Errorf("a tag with another mailbox's letters verifies")
	}
}

// TestKeyFileMustBeRegular: a FIFO (whose open must not wait for a
// writer) or a link where the key is kept is refused, not read through
// and not replaced by a new key.
func TestKeyFileMustBeRegular(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real.key")
	if _, err := LoadKey(real); err != nil {
		t.Fatal(err)
	}
	fifo, link := filepath.Join(dir, "fifo.key"), filepath.Join(dir, "link.key")
	testwait.FIFO(t, fifo)
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, link} {
		err := testwait.Returns(t, "LoadKey of "+filepath.Base(path), func() error {
			_, err := LoadKey(path)
			return err
		})
		if !errors.Is(err, safeio.ErrNotRegular) {
			t.Errorf("LoadKey of %s: %v, want it refused as not a regular file", path, err)
		}
	}
}
