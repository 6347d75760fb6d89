package daemon

import (
	"bufio"
	"fmt"
	"net"
	"net/smtp"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// spoofWorld publishes reject.test (p=reject), quarantine.test
// (p=quarantine) and half.test (p=reject; pct=50), none of which allow
// 127.0.0.1 in SPF: a message claiming their From fails DMARC.
func spoofWorld(dns *resolver.Map) {
	for d, rec := range map[string]string{"reject.test": "v=DMARC1; p=reject", "quarantine.test": "v=DMARC1; p=quarantine",
		"half.test": "v=DMARC1; p=reject; pct=50"} {
		dns.SetTXT(d, "v=spf1 ip4:192.0.2.1 -all")
		dns.SetTXT("_dmarc."+d, rec)
	}
}

func spoof(from, subject string) string {
	return "From: " + from + "\nTo: agent@example.test\nSubject: " + subject + "\nMessage-ID: <" + subject + "@spoof>\n\nwire the money\n"
}

// folderCount lists a mailbox folder straight from the store.
func folderCount(t *testing.T, td *testDaemon, mailbox, folder string) []store.Summary {
	t.Helper()
	page, err := td.store.List(mailbox, folder, store.Query{Limit: 100})
	if err != nil {
		t.Fatalf("listing %s/%s: %v", mailbox, folder, err)
	}
	return page.Items
}

// TestDMARCRejectAndQuarantine: a spoof of a p=reject domain is refused at
// the end of DATA with 550 5.7.1 naming the policy and nothing is stored; a
// spoof of a p=quarantine domain lands in junk, marked, and fires no hook;
// an authenticated message of the same domain reaches the inbox and fires it.
func TestDMARCRejectAndQuarantine(t *testing.T) {
	td, addr, dns := startInbound(t, untrustedHooksForUsers)
	spoofWorld(dns)
	dns.SetTXT("quarantine.test", "v=spf1 ip4:192.0.2.1 ip4:127.0.0.2 -all")
	uid, gid, outDir := hookOwner(t, "mcdm")
	fired := filepath.Join(outDir, "fired")
	td.EnsureMailbox("agent", uid, gid)
	var h protocol.Hook
	if err := td.call(t, protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "agent", Event: "on_receive", FireOnUntrusted: true,
		Cmd: []string{"/bin/sh", "-c", "cat >> " + fired}}, &h); err != nil {
		t.Fatal(err)
	}

	err := sendSMTP(t, addr, "ceo@reject.test", []string{"agent@example.test"}, spoof("CEO <ceo@reject.test>", "rejected"))
	if err == nil || !strings.HasPrefix(strings.ReplaceAll(err.Error(), `"`, ""), "550 5.7.1") || !strings.Contains(err.Error(), "DMARC policy of reject.test (p=reject)") {
		t.Errorf("p=reject spoof: %v, want 550 5.7.1 naming the policy", err)
	}

	if err := sendSMTP(t, addr, "ceo@quarantine.test", []string{"agent@example.test"}, spoof("ceo@quarantine.test", "quarantined")); err != nil {
		t.Fatalf("p=quarantine spoof refused: %v", err)
	}
	// Authenticated by SPF from 127.0.0.2 (aligned): DMARC passes.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := smtp.NewClient(c, "mx.quarantine.test")
	if err != nil {
		t.Fatal(err)
	}
	sendOn(t, sc, "ceo@quarantine.test", "agent@example.test", spoof("ceo@quarantine.test", "genuine"))
	sc.Quit()
	td.runner.Wait()

	inbox, junk := folderCount(t, td, "agent", "inbox"), folderCount(t, td, "agent", "junk")
	if len(inbox) != 1 || inbox[0].Subject != "genuine" {
		t.Errorf("inbox: %+v, want only the genuine message", inbox)
	}
	if len(junk) != 1 || junk[0].Subject != "quarantined" {
		t.Fatalf("junk: %+v, want the quarantined spoof", junk)
	}
	m, _, err := td.store.Get("agent", "junk", junk[0].ID)
	if err != nil || m.Junk != "DMARC policy of quarantine.test (p=quarantine)" || m.DMARC.Result != "fail" {
		t.Errorf("junk frontmatter: %v junk=%q dmarc=%+v", err, m.Junk, m.DMARC)
	}
	got, _ := os.ReadFile(fired)
	if strings.Contains(string(got), "quarantined") || strings.Contains(string(got), "rejected") || !strings.Contains(string(got), "genuine") {
		t.Errorf("hook input %q: want the genuine message only", got)
	}
}

func sendOn(t *testing.T, c *smtp.Client, from, to, msg string) {
	t.Helper()
	if err := c.Mail(from); err != nil {
		t.Fatal(err)
	}
	if err := c.Rcpt(to); err != nil {
		t.Fatal(err)
	}
	w, err := c.Data()
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(strings.ReplaceAll(msg, "\n", "\r\n")))
	if err := w.Close(); err != nil {
		t.Fatalf("DATA: %v", err)
	}
}

// TestDMARCEnforceOffAndForwarders: with dmarc_enforce = false the spoof is
// stored (in the inbox, judged untrusted as before); a forwarder's network
// is exempt while enforcement is on; pct= sampling is honoured (the roll
// is injected: 50 is outside pct=50, so reject becomes quarantine).
func TestDMARCEnforceOffAndForwarders(t *testing.T) {
	for _, tc := range []struct {
		name, trust, from, folder string
	}{
		{"off", "dmarc_enforce = false", "ceo@reject.test", "inbox"},
		{"forwarder network", `forwarders = ["127.0.0.0/8"]`, "ceo@reject.test", "inbox"},
		{"pct not sampled", "", "ceo@half.test", "junk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			td, addr, dns := startInbound(t, "[trust]\n"+tc.trust+"\n")
			td.inbound.checker.Roll = func() int { return 50 }
			spoofWorld(dns)
			td.ensureMine(t, "agent")
			if err := sendSMTP(t, addr, tc.from, []string{"agent@example.test"}, spoof(tc.from, "spoof")); err != nil {
				t.Fatalf("refused: %v", err)
			}
			if got := folderCount(t, td, "agent", tc.folder); len(got) != 1 {
				t.Errorf("%s: %+v, want the message there", tc.folder, got)
			}
		})
	}
}

// TestDMARCRejectOverLMTP: LMTP answers each recipient, each with the 550.
func TestDMARCRejectOverLMTP(t *testing.T) {
	dns := &resolver.Map{}
	spoofWorld(dns)
	td := startDaemonSMTP(t, "[lmtp]\nlisten_tcp = [\"127.0.0.1:0\"]\nallow_from = [\"127.0.0.1/32\"]\n", "listen = []", Options{Resolver: dns})
	td.ensureMine(t, "agent")
	td.ensureMine(t, "other")
	c, err := net.DialTimeout("tcp", lmtpTCPAddr(t, td), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(c)
	expect := func(code, contains string) {
		t.Helper()
		for {
			line, err := r.ReadString('\n')
			if err != nil || !strings.HasPrefix(line, code) || !strings.Contains(line, contains) {
				t.Fatalf("got %q (%v), want %s …%s", line, err, code, contains)
			}
			if line[3] == ' ' {
				return
			}
		}
	}
	send := func(line, code string) { t.Helper(); fmt.Fprintf(c, "%s\r\n", line); expect(code, "") }
	expect("220", "")
	send("LHLO front.example", "250")
	send("XFORWARD ADDR=203.0.113.9 HELO=spoofer.example", "250")
	send("MAIL FROM:<ceo@reject.test>", "250")
	send("RCPT TO:<agent@example.test>", "250")
	send("RCPT TO:<other@example.test>", "250")
	send("DATA", "354")
	fmt.Fprintf(c, "%s\r\n.\r\n", strings.ReplaceAll(strings.TrimSuffix(spoof("ceo@reject.test", "lmtp"), "\n"), "\n", "\r\n"))
	expect("550", "DMARC policy of reject.test (p=reject)")
	expect("550", "DMARC policy of reject.test (p=reject)")
	for _, mb := range []string{"agent", "other"} {
		for _, f := range []string{"inbox", "junk"} {
			if got := folderCount(t, td, mb, f); len(got) != 0 {
				t.Errorf("%s/%s holds %+v after a reject", mb, f, got)
			}
		}
	}
}
