package netns

import (
	"errors"
	"fmt"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/protocol"
)

// waitStatus polls send.status until the send reaches want or timeout
// passes, and returns the last result.
func (h *mailHost) waitStatus(mailbox, id, want string, timeout time.Duration) protocol.SendResult {
	h.t.Helper()
	var res protocol.SendResult
	waitFor(timeout, func() bool {
		res = protocol.SendResult{}
		if err := h.call(protocol.VerbSendStatus, protocol.SendStatusArgs{Mailbox: mailbox, ID: id}, &res); err != nil {
			h.t.Logf("send.status %s: %v", id, err)
			return false
		}
		return res.Status == want
	})
	return res
}

// queueIDs maps Message-ID to queue id for every item in the queue.
func (h *mailHost) queueIDs() map[string]protocol.QueueItem {
	h.t.Helper()
	var list protocol.QueueList
	if err := h.call(protocol.VerbQueueList, nil, &list); err != nil {
		h.t.Fatalf("queue.list on %s: %v", h.Domain, err)
	}
	out := map[string]protocol.QueueItem{}
	for _, it := range list.Items {
		out[strings.Trim(it.MessageID, "<>")] = it
	}
	return out
}

// TestFaultDNS: a resolver that never answers, and a DNS server that is gone,
// both leave the send deferred for a later retry, never failed.
func TestFaultDNS(t *testing.T) {
	l := newLab(t)
	// 10.231.N.250 is on the bridge's subnet but nobody has it: queries
	// vanish and time out.
	a := l.newMailHost("a", "a.test", hostOptions{Mailboxes: []string{"boss"}, Resolver: l.subnet + ".250:53"})
	b := l.newMailHost("b", "b.test", hostOptions{Mailboxes: []string{"agent"}})
	// c checks inbound mail through the working DNS server (a's checks
	// would wait for its blackhole).
	c := l.newMailHost("c", "c.test", hostOptions{Mailboxes: []string{"agent"}})

	start := time.Now()
	res := a.send(protocol.SendArgs{FromMailbox: "boss", To: []string{"agent@b.test"}, Subject: "dns timeout", Body: "x"})
	if res.Status != "deferred" {
		res = a.waitStatus("boss", res.ID, "deferred", 60*time.Second)
	}
	timeoutTook := time.Since(start).Round(100 * time.Millisecond)
	if res.Status != "deferred" || len(res.Recipients) != 1 || res.Recipients[0].Status != "deferred" {
		t.Fatalf("with a blackholed resolver the send is %q %+v, want deferred", res.Status, res.Recipients)
	}
	a.sentCopy("boss", res.ID, "deferred", 10*time.Second)

	l.stopDNS()
	res2 := b.send(protocol.SendArgs{FromMailbox: "agent", To: []string{"agent@c.test"}, Subject: "dns down", Body: "x"})
	if res2.Status != "deferred" {
		res2 = b.waitStatus("agent", res2.ID, "deferred", 60*time.Second)
	}
	if res2.Status != "deferred" || res2.Recipients[0].Status != "deferred" {
		t.Fatalf("with the DNS server stopped the send is %q %+v, want deferred", res2.Status, res2.Recipients)
	}

	// DNS comes back: a retry delivers the deferred message.
	l.startDNS()
	item, ok := b.queueIDs()[strings.Trim(res2.MessageID, "<>")]
	if !ok {
		t.Fatalf("deferred message %s is not in b's queue", res2.MessageID)
	}
	if err := b.call(protocol.VerbQueueRetry, protocol.QueueIDArgs{ID: item.ID}, nil); err != nil {
		t.Fatalf("queue.retry: %v", err)
	}
	c.byMessageID("agent", "inbox", res2.MessageID, 30*time.Second)
	if st := b.waitStatus("agent", res2.ID, "delivered", 10*time.Second); st.Status != "delivered" {
		t.Errorf("after DNS returned and a retry the send is %q", st.Status)
	}
	summary(t, "F1-dns", "resolver timeout → deferred after %v (%d %s); DNS server down → deferred (%d %s), delivered by a retry once it is back",
		timeoutTook, res.Recipients[0].Code, clip(res.Recipients[0].Detail, 80), res2.Recipients[0].Code, clip(res2.Recipients[0].Detail, 80))
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// TestFaultMidData: the remote MX drops the connection after DATA started;
// the send is deferred, and once a real daemon answers for the domain a
// queue retry delivers it.
func TestFaultMidData(t *testing.T) {
	l := newLab(t)
	a := l.newMailHost("a", "a.test", hostOptions{Mailboxes: []string{"boss"}})
	f := l.addHost("f")
	l.publishDomain("f.test", f.IP, nil)
	fake := startFakeMX(t, f, true, 0)

	res := a.send(protocol.SendArgs{FromMailbox: "boss", To: []string{"agent@f.test"}, Subject: "mid-data drop", Body: "survive this"})
	if res.Status != "deferred" {
		res = a.waitStatus("boss", res.ID, "deferred", 40*time.Second)
	}
	if res.Status != "deferred" {
		t.Fatalf("after a mid-DATA drop the send is %q %+v, want deferred", res.Status, res.Recipients)
	}
	_, _, dropped := fake.counts()
	if dropped == 0 {
		t.Fatalf("the fake MX never saw DATA")
	}
	fake.Close()

	// A real daemon takes over the address; the record published above
	// already points at it.
	g := l.newMailHostIn(f, "f.test", hostOptions{Mailboxes: []string{"agent"}, NoPublish: true})
	item, ok := a.queueIDs()[strings.Trim(res.MessageID, "<>")]
	if !ok {
		t.Fatalf("deferred message %s is not in the queue", res.MessageID)
	}
	if err := a.call(protocol.VerbQueueRetry, protocol.QueueIDArgs{ID: item.ID}, nil); err != nil {
		t.Fatalf("queue.retry %s: %v", item.ID, err)
	}
	got := g.byMessageID("agent", "inbox", res.MessageID, 30*time.Second)
	final := a.waitStatus("boss", res.ID, "delivered", 20*time.Second)
	if final.Status != "delivered" {
		t.Fatalf("after retry the send is %q %+v, want delivered", final.Status, final.Recipients)
	}
	if n := len(g.folder("agent", "inbox")); n != 1 {
		t.Errorf("receiver holds %d messages, want 1", n)
	}
	summary(t, "F1-mid-data", "drop after DATA → deferred (attempts=%d); queue.retry → delivered to the real MX as %s (attempts=%d)",
		res.Recipients[0].Attempts, got.ID, final.Recipients[0].Attempts)
}

// TestFaultDiskFull: the receiver's mailboxes live on a 2 MiB tmpfs; a
// 3 MiB message gets 452, leaves no partial message behind, and a small
// message afterwards is stored normally.
func TestFaultDiskFull(t *testing.T) {
	l := newLab(t)
	client := l.addHost("c")
	// The disk reserve is off: this is the filesystem filling up under the
	// daemon (another writer, or a reserve set too small), which must
	// still lose nothing. The reserve itself: daemon TestDiskReserve.
	r := l.newMailHost("r", "r.test", hostOptions{Mailboxes: []string{"agent"}, Extra: "[storage]\ndisk_reserve_bytes = 0\n", BeforeStart: func(h *mailHost) {
		dir := filepath.Join(h.State, "mailboxes")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m,mode=0755", "tmpfs", dir).CombinedOutput(); err != nil {
			t.Skipf("cannot mount a tmpfs: %v: %s", err, out)
		}
		// Registered before the daemon's stop, so it runs after it.
		t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	}})

	var big strings.Builder
	line := strings.Repeat("0123456789abcdef", 4) + "\n"
	for big.Len() < 3<<20 {
		big.WriteString(line)
	}
	msg := crlf(fmt.Sprintf("From: sender@c.test\nTo: agent@r.test\nSubject: too big for the disk\nMessage-ID: <big-%s@c.test>\n\n%s", randHex(4), big.String()))
	err := smtpSend(client.NS, r.Addr(), "c.test", "sender@c.test", "agent@r.test", msg)
	var te *textproto.Error
	if !errors.As(err, &te) || te.Code != 452 {
		t.Fatalf("a message larger than the free disk got %v, want 452", err)
	}
	if mds := mdFiles(t, filepath.Join(r.State, "mailboxes")); len(mds) != 0 {
		t.Errorf("partial messages visible after ENOSPC: %v", mds)
	}

	small := crlf(fmt.Sprintf("From: sender@c.test\nTo: agent@r.test\nSubject: small\nMessage-ID: <small-%s@c.test>\n\nfits\n", randHex(4)))
	if err := smtpSend(client.NS, r.Addr(), "c.test", "sender@c.test", "agent@r.test", small); err != nil {
		t.Fatalf("a small message after the full disk: %v (space not released?)", err)
	}
	if n := len(r.folder("agent", "inbox")); n != 1 {
		t.Errorf("inbox holds %d messages after the small one, want 1", n)
	}
	summary(t, "F1-disk-full", "3 MiB into a 2 MiB tmpfs → %d %s; no partial .md; next small message stored", te.Code, clip(te.Msg, 60))
}

// mdFiles lists visible .md files under dir.
func mdFiles(t *testing.T, dir string) []string {
	var out []string
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && strings.HasSuffix(p, ".md") && !strings.HasPrefix(info.Name(), ".") {
			out = append(out, p)
		}
		return nil
	})
	return out
}
