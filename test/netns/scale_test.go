package netns

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/setup"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// TestScaleOut runs the layout of docs/scale.md, built from the page's own
// configuration blocks (readScaleDoc) with the lab's names and addresses put
// in: a Postfix MX tier in front of two mailctl hosts for one domain. Mail
// for agent@ and bob@ arrives at the Postfix front over SMTP; its transport
// map sends the domain to host a and bob@ to host b over LMTP/TCP, each host
// stores only its own mailbox's mail, and SPF is judged on the original
// client's address, which Postfix passes on with XFORWARD. Mail from agent@
// to bob@ leaves host a through the tier (relay.split_domains) and reaches
// host b. A bounce of bob's mail comes back to bob's return path on host b.
// A client that is not the front is refused at the hosts' LMTP port.
func TestScaleOut(t *testing.T) {
	doc := readScaleDoc(t)
	l := newLab(t)
	const domain = "s.test"
	frontNS, aNS, bNS := l.addHost("front"), l.addHost("a"), l.addHost("b")
	client := l.addHost("c")
	// MX points at the tier; SPF lists the tier and the mailctl hosts, whose
	// addresses the tier passes on with XFORWARD when it routes mail from
	// one host to another.
	l.publish(domain+" MX 10 mx."+domain+".", "mx."+domain+" A "+frontNS.IP,
		domain+" TXT v=spf1 ip4:"+frontNS.IP+" ip4:"+aNS.IP+" ip4:"+bNS.IP+" -all",
		"_dmarc."+domain+" TXT v=DMARC1; p=reject; adkim=r; aspf=r")
	l.publish("sender.test TXT v=spf1 ip4:"+client.IP+" -all", "mx.sender.test A "+client.IP)

	// The tier's certificate, which the hosts' relay client verifies: it
	// is its own authority, named by relay.ca_file.
	cert, key, err := setup.EnsureSelfSigned(filepath.Join(testusers.SharedDir(t), "tls"), "mx."+domain)
	if err != nil {
		t.Fatal(err)
	}
	transport := filepath.Join(testusers.SharedDir(t), "transport")
	// The page's names and addresses in the lab. The page's tier network
	// (10.0.0.0/24) is the two hosts here: the lab's outside client shares
	// the lab's one subnet and must not relay.
	lab := func(host *nsHost) docToLab {
		return docToLab{
			{"/etc/ssl/mx.example.com.pem", cert}, {"/etc/ssl/mx.example.com.key", key},
			{"hash:/etc/postfix/transport", "texthash:" + transport},
			{"lmtp:inet:mailctl-a.internal:24", "lmtp:inet:[" + aNS.IP + "]:24"},
			{"lmtp:inet:mailctl-b.internal:24", "lmtp:inet:[" + bNS.IP + "]:24"},
			{"mailctl-a.example.com", host.Name + "." + domain},
			{"10.0.0.0/24", aNS.IP + "/32 " + bNS.IP + "/32"},
			{"10.0.0.5", host.IP}, {"10.0.0.1", frontNS.IP},
			{"example.com", domain},
		}
	}
	env := []string{"SSL_CERT_FILE=" + cert}
	hostFromDoc := func(ns *nsHost, mailbox string) *mailHost {
		hostname, listen, forwarders, tables := doc.hostConfig(t, lab(ns))
		return l.newMailHostIn(ns, domain, hostOptions{Mailboxes: []string{mailbox}, NoPublish: true, Hostname: hostname, Listen: &listen, Forwarders: forwarders,
			Extra: tables, Env: env})
	}
	a := hostFromDoc(aNS, "agent")
	b := hostFromDoc(bNS, "bob")

	var tmap strings.Builder
	for _, e := range doc.transport {
		fmt.Fprintf(&tmap, "%s %s\n", lab(frontNS).str(e[0]), lab(frontNS).str(e[1]))
	}
	if err := os.WriteFile(transport, []byte(tmap.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	mainCF := []string{"myhostname = front." + domain, "virtual_mailbox_domains ="} // the lab's Postfix is also a Maildir host
	for _, line := range doc.mainCF {
		mainCF = append(mainCF, lab(frontNS).str(line))
	}
	front := l.newPostfixIn(frontNS, domain, mainCF...)

	mids := map[string]string{}
	for _, rcpt := range []string{"agent", "bob"} {
		mid := "scale-" + rcpt + "-" + randHex(6) + "@sender.test"
		mids[rcpt] = mid
		msg := crlf(fmt.Sprintf("From: Alice <alice@sender.test>\nTo: %s@%s\nSubject: through the tier to %s\nDate: %s\nMessage-ID: <%s>\n\nhello %s\n",
			rcpt, domain, rcpt, time.Now().Format(time.RFC1123Z), mid, rcpt))
		if err := smtpSend(client.NS, front.IP+":25", "mx.sender.test", "alice@sender.test", rcpt+"@"+domain, msg); err != nil {
			t.Fatalf("submitting for %s to the Postfix front: %v; maillog:\n%s", rcpt, err, front.log())
		}
	}
	for _, c := range []struct {
		host    *mailHost
		mailbox string
	}{{a, "agent"}, {b, "bob"}} {
		m := c.host.byMessageID(c.mailbox, "inbox", mids[c.mailbox], 45*time.Second)
		if m.Meta.SPF.Result != "pass" || m.Meta.SPF.Domain != "sender.test" {
			t.Errorf("%s on host %s: SPF %+v, want pass for sender.test (judged on the client's address, not the front's)", c.mailbox, c.host.Name, m.Meta.SPF)
		}
		if m.Meta.ReceivedFromIP != client.IP {
			t.Errorf("%s on host %s: received_from_ip %q, want the original client %s (from XFORWARD)", c.mailbox, c.host.Name, m.Meta.ReceivedFromIP, client.IP)
		}
	}
	if got := a.folder("bob", "inbox"); len(got) != 0 {
		t.Errorf("host a stored %d messages for bob, whose mailbox lives on host b", len(got))
	}
	if got := b.folder("agent", "inbox"); len(got) != 0 {
		t.Errorf("host b stored %d messages for agent, whose mailbox lives on host a", len(got))
	}
	for _, h := range []*mailHost{a, b} {
		if want := "relay=" + h.IP + "[" + h.IP + "]:24"; !strings.Contains(front.log(), want) {
			t.Errorf("the Postfix front logged no LMTP delivery to %s (%q):\n%s", h.Name, want, front.log())
		}
	}

	// agent@ on host a writes to bob@ on host b: host a has no bob, so the
	// mail goes out through the tier (relay.split_domains), which routes it
	// to host b; SPF there judges host a's address.
	res := a.send(protocol.SendArgs{FromMailbox: "agent", To: []string{"bob@" + domain}, Subject: "across hosts", Body: "hello bob"})
	if res.Status != "delivered" {
		t.Fatalf("agent → bob across hosts: %q %+v; maillog:\n%s", res.Status, res.Recipients, front.log())
	}
	across := b.byMessageID("bob", "inbox", res.MessageID, 45*time.Second)
	if across.Meta.SPF.Result != "pass" || across.Meta.ReceivedFromIP != a.IP {
		t.Errorf("agent's mail on host b: SPF %+v from %q, want pass from host a %s", across.Meta.SPF, across.Meta.ReceivedFromIP, a.IP)
	}

	// bob@ on host b writes to an address no host has. The tier takes it
	// (the hosts relay through it), routes it by the domain to host a,
	// which refuses it, and bounces it to bob's return path,
	// bob+bounce-<tag>@: with recipient_delimiter that follows bob@'s
	// route to host b, and the report marks the recipient bounced.
	lost := b.send(protocol.SendArgs{FromMailbox: "bob", To: []string{"nobody@" + domain}, Subject: "to no one", Body: "hello?"})
	if !waitFor(60*time.Second, func() bool {
		for _, m := range b.folder("bob", "sent") {
			if m.ID == lost.ID && len(m.Meta.DeliveryDetails) == 1 && m.Meta.DeliveryDetails[0].Status == "bounced" {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("bob's sent copy %s was not marked bounced (send answered %q %+v); maillog:\n%s", lost.ID, lost.Status, lost.Recipients, front.log())
	}

	// Anyone else on the network is refused at the hosts' LMTP port.
	c, err := dialIn(client.NS, a.IP+":24", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	refusal, _ := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if !strings.HasPrefix(refusal, "554 5.7.1 ") {
		t.Errorf("a client outside lmtp.allow_from got %q at host a's LMTP port, want 554 5.7.1", refusal)
	}
	if !waitFor(5*time.Second, func() bool { return strings.Contains(a.Logs.String(), "not in lmtp.allow_from") }) {
		t.Errorf("host a did not log the refused LMTP client")
	}
	summary(t, "scale", "Postfix front (docs/scale.md's config) → LMTP/TCP: agent@ stored on a, bob@ on b, spf=pass on the client %s via XFORWARD; agent@a → bob@b through the tier spf=%s; a bounce to bob's return path reaches b; others refused %q",
		client.IP, across.Meta.SPF.Result, strings.TrimSpace(refusal))
}
