package netns

import (
	"bufio"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/dnsbl"
	"github.com/mailctl/mailctl/protocol"
)

// rawSMTP is a line-level SMTP client from a namespace.
type rawSMTP struct {
	t *testing.T
	w *bufio.Writer
	r *bufio.Reader
}

func dialSMTP(t *testing.T, ns, addr string) *rawSMTP {
	t.Helper()
	c, err := dialIn(ns, addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, ns, err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return &rawSMTP{t: t, w: bufio.NewWriter(c), r: bufio.NewReader(c)}
}

// reply reads one reply, its lines joined.
func (s *rawSMTP) reply() string {
	var lines []string
	for {
		l, err := s.r.ReadString('\n')
		if err != nil {
			return strings.Join(append(lines, "EOF: "+l), "\n")
		}
		lines = append(lines, strings.TrimRight(l, "\r\n"))
		if len(l) < 4 || l[3] != '-' {
			return strings.Join(lines, "\n")
		}
	}
}

func (s *rawSMTP) cmd(line, want string) string {
	s.t.Helper()
	s.w.WriteString(line + "\r\n")
	s.w.Flush()
	r := s.reply()
	if !strings.HasPrefix(r, want) {
		s.t.Fatalf("%q: got %q, want %s", line, r, want)
	}
	return r
}

// send runs one transaction and returns the reply to the end of DATA.
func (s *rawSMTP) send(from, rcpt, msg string) string {
	s.t.Helper()
	s.cmd("MAIL FROM:<"+from+">", "250")
	s.cmd("RCPT TO:<"+rcpt+">", "250")
	s.cmd("DATA", "354")
	s.w.Write(crlf(msg))
	s.w.WriteString(".\r\n")
	s.w.Flush()
	return s.reply()
}

const firedHook = `name = "fired"
mailbox = "agent"
event = "on_receive"
fire_on_untrusted = true
cmd = ["/bin/sh", "-c", "echo \"$MAILCTL_SUBJECT\" >> {HOME}/fired"]
timeout_secs = 30`

// TestInboundPolicy runs what the internet sends against a mailctl host
// whose DNS lists live on the lab's DNS server: a client a list names is
// refused at connect with 554 naming it; a list that never answers blocks
// no one; a spoof of a p=reject domain gets 550 at the end of DATA and
// nothing is stored; a spoof of a p=quarantine domain lands in junk and
// fires no hook, while an honest message fires it.
func TestInboundPolicy(t *testing.T) {
	start := time.Now()
	l := newLab(t)
	spammer, client := l.addHost("spam"), l.addHost("cli")
	q := func(h *nsHost, zone string) string { return dnsbl.QueryName(netip.MustParseAddr(h.IP), zone) }
	l.publish(
		q(spammer, "bl.lab")+" A 127.0.0.2",
		q(client, "slow.lab")+" HANG",
		"_dmarc.reject.test TXT v=DMARC1; p=reject",
		"reject.test TXT v=spf1 -all",
		"_dmarc.quarantine.test TXT v=DMARC1; p=quarantine",
		"quarantine.test TXT v=spf1 -all",
		"honest.test TXT v=spf1 ip4:"+client.IP+" -all",
		"_dmarc.honest.test TXT v=DMARC1; p=reject",
	)
	b := l.newMailHost("b", "b.test", hostOptions{Mailboxes: []string{"agent"}, Hooks: []string{firedHook},
		SMTP: `dnsbl_timeout = "500ms"
[[smtp.dnsbl]]
zone = "bl.lab"
replies = ["127.0.0.2-127.0.0.11"]
[[smtp.dnsbl]]
zone = "slow.lab"
weight = 5`})
	fired := filepath.Join(b.Owner.Home, "fired")

	// A listed client is refused instead of greeted.
	greeting := dialSMTP(t, spammer.NS, b.Addr()).reply()
	if !strings.HasPrefix(greeting, "554 5.7.1") || !strings.Contains(greeting, "bl.lab") {
		t.Errorf("listed client greeted with %q, want 554 5.7.1 naming bl.lab", greeting)
	}

	// The client the slow list is asked about is greeted: a list that
	// does not answer lists no one.
	c := dialSMTP(t, client.NS, b.Addr())
	if r := c.reply(); !strings.HasPrefix(r, "220 ") {
		t.Fatalf("client on a list that does not answer greeted with %q", r)
	}
	c.cmd("EHLO cli.test", "250")
	rej := c.send("ceo@reject.test", "agent@b.test", "From: CEO <ceo@reject.test>\nTo: agent@b.test\nSubject: wire the money\nMessage-ID: <rej@spoof>\n\npay now\n")
	if !strings.HasPrefix(rej, "550 5.7.1") || !strings.Contains(rej, "DMARC policy of reject.test (p=reject)") {
		t.Errorf("p=reject spoof answered %q, want 550 5.7.1 naming the policy", rej)
	}
	if r := c.send("ceo@quarantine.test", "agent@b.test", "From: ceo@quarantine.test\nTo: agent@b.test\nSubject: quarantined spoof\nMessage-ID: <q@spoof>\n\nclick here\n"); !strings.HasPrefix(r, "250") {
		t.Fatalf("p=quarantine spoof answered %q, want 250 (to junk)", r)
	}
	if r := c.send("news@honest.test", "agent@b.test", "From: news@honest.test\nTo: agent@b.test\nSubject: honest news\nMessage-ID: <h@honest>\n\nhello\n"); !strings.HasPrefix(r, "250") {
		t.Fatalf("honest message answered %q", r)
	}
	c.cmd("QUIT", "221")

	if !waitFor(20*time.Second, func() bool { return strings.Contains(readFile(fired), "honest news") }) {
		t.Fatalf("the hook did not fire for the honest message; fired: %q", readFile(fired))
	}
	inbox, junk := b.folder("agent", "inbox"), b.folder("agent", "junk")
	if len(inbox) != 1 || inbox[0].Meta.Subject != "honest news" {
		t.Errorf("inbox %v, want the honest message only", subjects(inbox))
	}
	if len(junk) != 1 || junk[0].Meta.Subject != "quarantined spoof" || junk[0].Meta.Junk != "DMARC policy of quarantine.test (p=quarantine)" {
		t.Errorf("junk %v, want the quarantined spoof, marked", subjects(junk))
	}
	if got := readFile(fired); strings.Contains(got, "quarantined") || strings.Contains(got, "wire the money") {
		t.Errorf("hook fired for junk or refused mail: %q", got)
	}
	var list protocol.MessageList
	if err := b.call(protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "agent"}, &list); err != nil || len(list.Messages) != 1 {
		t.Errorf("message.list without a folder: %v %d messages, want the inbox's one", err, len(list.Messages))
	}
	if !strings.Contains(b.Logs.String(), "DNS list did not answer") {
		t.Errorf("the list that timed out was not logged")
	}
	summary(t, "inbound-policy", "listed client refused at connect (%q); slow list blocked no one; p=reject spoof got %q; p=quarantine spoof in junk, no hook; %d inbox, %d junk (%s)",
		firstLine(greeting), firstLine(rej), len(inbox), len(junk), time.Since(start).Round(time.Second))
}

func subjects(ms []stored) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Meta.Subject)
	}
	return out
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
