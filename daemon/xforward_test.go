package daemon

import (
	"bufio"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// TestXForwardOverLMTPFeedsSPF: behind a front MTA, the client address the
// MTA passes with XFORWARD on the LMTP socket is what SPF checks, so the
// sender's SPF passes; without it SPF has no address and says none.
func TestXForwardOverLMTPFeedsSPF(t *testing.T) {
	dns := &resolver.Map{}
	dns.SetTXT("sender.example", "v=spf1 ip4:192.0.2.7 -all")
	sock := filepath.Join(testusers.SharedDir(t), "lmtp.sock")
	td := startDaemonSMTP(t, "", fmt.Sprintf("listen = []\nlmtp_socket = %q\nlmtp_xforward_users = [%q]", sock, myName(t)), Options{Resolver: dns})
	td.ensureMine(t, "agent")

	for _, tc := range []struct {
		xforward, subject, spf string
	}{
		{"XFORWARD NAME=mail.sender.example ADDR=192.0.2.7 HELO=mail.sender.example PROTO=ESMTP", "forwarded", "pass"},
		{"", "unforwarded", "none"},
	} {
		c, err := net.DialTimeout("unix", sock, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(20 * time.Second))
		r := bufio.NewReader(c)
		expect := func(code string) {
			t.Helper()
			for {
				line, err := r.ReadString('\n')
				if err != nil || !strings.HasPrefix(line, code) {
					t.Fatalf("%s: got %q (%v), want %s", tc.subject, line, err, code)
				}
				if line[3] == ' ' {
					return
				}
			}
		}
		send := func(line, code string) { fmt.Fprintf(c, "%s\r\n", line); expect(code) }
		expect("220")
		send("LHLO front.example", "250")
		if tc.xforward != "" {
			send(tc.xforward, "250")
		}
		send("MAIL FROM:<alice@sender.example>", "250")
		send("RCPT TO:<agent@example.test>", "250")
		send("DATA", "354")
		send("From: alice@sender.example\r\nSubject: "+tc.subject+"\r\n\r\nhello\r\n.", "250")
		c.Close()

		var l protocol.MessageList
		if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "agent", Subject: tc.subject}, &l); err != nil || len(l.Messages) != 1 {
			t.Fatalf("%s: %v %+v", tc.subject, err, l)
		}
		var m protocol.Message
		if err := td.call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "agent", ID: l.Messages[0].ID}, &m); err != nil {
			t.Fatal(err)
		}
		if m.SPF == nil || m.SPF.Result != tc.spf {
			t.Errorf("%s: SPF %+v, want %s", tc.subject, m.SPF, tc.spf)
		}
		if tc.spf == "pass" && m.ReceivedFromIP != "192.0.2.7" {
			t.Errorf("%s: received_from_ip %q, want the front MTA's client", tc.subject, m.ReceivedFromIP)
		}
	}
}
