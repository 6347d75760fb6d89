package daemon

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"net/smtp"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/dnsbl"
	"github.com/mailctl/mailctl/internal/dnstest"
	"github.com/mailctl/mailctl/protocol"
)

// dialFrom connects to addr from a loopback source address.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return c
}

// TestDNSBLAtConnect runs the daemon with three lists on a real DNS server
// (internal/dnstest): a client at or above the threshold is refused at
// connect with 554 5.7.1 naming the list; one listed below it is greeted and
// its mail lands in junk, marked, firing no hook; an allow-list cancels a
// listing; a list that never answers blocks no one.
func TestDNSBLAtConnect(t *testing.T) {
	q := func(src, zone string) string { return dnsbl.QueryName(mustAddr(src), zone) }
	srv, dnsAddr := dnstest.Start(t,
		dnstest.Record{Name: q("127.0.0.2", "bl.test"), Type: "A", Value: "127.0.0.2"},
		dnstest.Record{Name: q("127.0.0.2", "heavy.test"), Type: "A", Value: "127.0.0.3"},
		dnstest.Record{Name: q("127.0.0.3", "bl.test"), Type: "A", Value: "127.0.0.2"},
		dnstest.Record{Name: q("127.0.0.5", "bl.test"), Type: "A", Value: "127.0.0.2"},
		dnstest.Record{Name: q("127.0.0.5", "allow.test"), Type: "A", Value: "127.0.0.1"},
		dnstest.Record{Name: q("127.0.0.6", "heavy.test"), Type: "A", Value: "127.255.255.254"},
	)
	srv.Hang(q("127.0.0.4", "slow.test"), true)
	td := startDaemonSMTP(t, fmt.Sprintf("[dns]\nresolver = %q\n", dnsAddr)+untrustedHooksForUsers, `listen = ["127.0.0.1:0"]
dnsbl_threshold = 2
dnsbl_timeout = "300ms"
[[smtp.dnsbl]]
zone = "bl.test"
[[smtp.dnsbl]]
zone = "heavy.test"
weight = 2
replies = ["127.0.0.2-127.0.0.11"]
[[smtp.dnsbl]]
zone = "slow.test"
weight = 5
[[smtp.dnsbl]]
zone = "allow.test"
weight = -1
replies = ["127.0.0.1"]
`, Options{})
	uid, gid, outDir := hookOwner(t, "mcbl")
	fired := filepath.Join(outDir, "fired")
	td.EnsureMailbox("agent", uid, gid)
	var h protocol.Hook
	if err := td.call(t, protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "agent", Event: "on_receive", FireOnUntrusted: true,
		Cmd: []string{"/bin/sh", "-c", "cat >> " + fired}}, &h); err != nil {
		t.Fatal(err)
	}
	addr := td.SMTPAddrs()[0]

	// 127.0.0.2: bl.test (1) + heavy.test (2) = 3 >= 2: refused at connect.
	c := dialFrom(t, "127.0.0.2", addr)
	line, _ := bufio.NewReader(c).ReadString('\n')
	if !strings.HasPrefix(line, "554 5.7.1 ") || !strings.Contains(line, "blocked using bl.test, heavy.test") || !strings.Contains(line, "[127.0.0.2]") {
		t.Errorf("listed client greeted with %q, want 554 5.7.1 naming the lists", line)
	}

	send := func(src, subject string) {
		t.Helper()
		sc, err := smtp.NewClient(dialFrom(t, src, addr), "client.test")
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		sendOn(t, sc, "someone@sender.test", "agent@example.test", "From: someone@sender.test\nTo: agent@example.test\nSubject: "+subject+"\n\nhello\n")
		sc.Quit()
	}
	send("127.0.0.3", "listed below the threshold") // bl.test (1) < 2: junk
	send("127.0.0.4", "slow list")                  // slow.test never answers: not listed
	send("127.0.0.5", "allow-listed")               // bl.test (1) + allow.test (-1) = 0: inbox, marked
	send("127.0.0.6", "odd reply")                  // heavy.test answers outside its replies: not listed
	td.runner.Wait()

	junk := folderCount(t, td, "agent", "junk")
	if len(junk) != 1 || junk[0].Subject != "listed below the threshold" {
		t.Fatalf("junk: %+v", junk)
	}
	m, _, err := td.store.Get("agent", "junk", junk[0].ID)
	if err != nil || m.Junk != "client listed by bl.test" || strings.Join(m.DNSBL, ";") != "bl.test=127.0.0.2 weight 1" {
		t.Errorf("junk frontmatter: %v junk=%q dnsbl=%q", err, m.Junk, m.DNSBL)
	}
	inbox := folderCount(t, td, "agent", "inbox")
	if len(inbox) != 3 {
		t.Fatalf("inbox: %+v, want the slow-list, allow-listed and odd-reply messages", inbox)
	}
	for _, s := range inbox {
		m, _, _ := td.store.Get("agent", "inbox", s.ID)
		want := ""
		if s.Subject == "allow-listed" {
			want = "allow.test=127.0.0.1 weight -1;bl.test=127.0.0.2 weight 1"
		}
		if got := strings.Join(m.DNSBL, ";"); got != want || m.Junk != "" {
			t.Errorf("%s: dnsbl %q junk %q, want dnsbl %q", s.Subject, got, m.Junk, want)
		}
	}
	got, _ := os.ReadFile(fired)
	if strings.Contains(string(got), "listed below the threshold") || !strings.Contains(string(got), "allow-listed") {
		t.Errorf("hooks fired for %q: want the inbox messages only", got)
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// TestDNSBLRepliesValidatedAsParsed: the config accepts exactly the reply
// ranges dnsbl parses (config mirrors the parser it may not import).
func TestDNSBLRepliesValidatedAsParsed(t *testing.T) {
	for _, r := range []string{"127.0.0.2", " 127.0.0.2 - 127.0.0.11 ", "127.0.0.0/24", "127.0.0.11-127.0.0.2", "::1", "127.0.0.0/33", "x", "", "1.2.3.4/0", "1.2.3.4-"} {
		_, perr := dnsbl.ParseRange(r)
		_, cerr := config.Parse([]byte(fmt.Sprintf("[[smtp.dnsbl]]\nzone = \"bl.test\"\nreplies = [%q]\n", r)))
		if (perr == nil) != (cerr == nil) {
			t.Errorf("reply %q: dnsbl says %v, config says %v", r, perr, cerr)
		}
	}
}
