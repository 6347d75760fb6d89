package daemon

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/daemon/smtpin"
)

// TestQuarantinedLargeMessageStreamsIntoJunk: a message too large to hold
// (spooled as it arrives) that fails DMARC under p=quarantine goes through
// the inbound journal into junk like a small one: its attachment decoded
// into the junk folder as it streams, its raw copy whole, nothing of it in
// the inbox and no spill left behind there.
func TestQuarantinedLargeMessageStreamsIntoJunk(t *testing.T) {
	td, addr, dns := startInbound(t, "")
	spoofWorld(dns)
	td.ensureMine(t, "agent")
	msg, att := attachmentMessage(smtpin.SpoolOver + 1<<20)
	msg = bytes.Replace(msg, []byte("From: a@sender.example\r\nTo: big@example.test"), []byte("From: ceo@quarantine.test\r\nTo: agent@example.test"), 1)
	if err := sendSMTP(t, addr, "ceo@quarantine.test", []string{"agent@example.test"}, strings.ReplaceAll(string(msg), "\r\n", "\n")); err != nil {
		t.Fatalf("p=quarantine spoof refused: %v", err)
	}
	if inbox := folderCount(t, td, "agent", "inbox"); len(inbox) != 0 {
		t.Errorf("inbox: %+v, want nothing", inbox)
	}
	junk := folderCount(t, td, "agent", "junk")
	if len(junk) != 1 {
		t.Fatalf("junk: %+v, want the quarantined message", junk)
	}
	m, _, err := td.store.Get("agent", "junk", junk[0].ID)
	if err != nil || m.Junk != "DMARC policy of quarantine.test (p=quarantine)" || len(m.Attachments) != 1 {
		t.Fatalf("junk frontmatter: %v junk=%q attachments=%+v", err, m.Junk, m.Attachments)
	}
	folder := filepath.Join(td.store.Path("agent"), "junk")
	if got, err := os.ReadFile(filepath.Join(folder, junk[0].ID+".attachments", "big.bin")); err != nil || !bytes.Equal(got, att) {
		t.Errorf("the attachment in junk: %d bytes of %d, %v", len(got), len(att), err)
	}
	if st, err := os.Stat(filepath.Join(folder, junk[0].ID+".eml")); err != nil || st.Size() != m.SizeBytes || st.Size() < int64(len(msg)) {
		t.Errorf("raw copy: %v, size_bytes %d, message %d bytes", err, m.SizeBytes, len(msg))
	}
	left, _ := os.ReadDir(filepath.Join(td.store.Path("agent"), "inbox"))
	for _, e := range left {
		t.Errorf("inbox holds %s after a message stored in junk", e.Name())
	}
}
