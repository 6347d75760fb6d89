package netns

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net/smtp"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-msgauth/dkim"
	dkimkeys "github.com/mailctl/mailctl/daemon/outbound/dkim"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// markerHook is an on_receive hook on mailbox agent that appends the
// Message-ID and trust of each message it fires for to {HOME}/marker.
const markerHook = `name = "marker"
mailbox = "agent"
event = "on_receive"
cmd = ["/bin/sh", "-c", "echo \"$MAILCTL_MESSAGE_ID trusted=$MAILCTL_TRUSTED\" >> {HOME}/marker"]
timeout_secs = 30`

// TestExchange runs scenario 1 (two mailctl hosts exchange authenticated,
// trusted mail over STARTTLS and a reply threads back) and scenario 4 (a
// third host signs with its own domain and claims the trusted sender's From:
// stored, not trusted, and the hook stays quiet).
func TestExchange(t *testing.T) {
	l := newLab(t)
	a := l.newMailHost("a", "a.test", hostOptions{Mailboxes: []string{"boss", "intern"}, TrustedSenders: []string{"*@b.test"}})
	b := l.newMailHost("b", "b.test", hostOptions{Mailboxes: []string{"agent"}, TrustedSenders: []string{"boss@a.test"},
		Hooks: []string{markerHook}})
	marker := filepath.Join(b.Owner.Home, "marker")

	// Scenario 1: a → b, then b's reply → a.
	res := a.send(protocol.SendArgs{FromMailbox: "boss", To: []string{"agent@b.test"}, Subject: "Quarterly numbers",
		Body: "Please check the **numbers** and reply."})
	if res.Status != "delivered" {
		t.Fatalf("send status %q, want delivered: %+v", res.Status, res.Recipients)
	}
	tlsState := res.Recipients[0].TLS
	if tlsState != "opportunistic" {
		t.Errorf("delivery TLS %q, want opportunistic (STARTTLS, b.test publishes no policy)", tlsState)
	}
	got := b.byMessageID("agent", "inbox", res.MessageID, 20*time.Second)
	checkAuth(t, got.Meta, "a.test", "pass", "true")
	if got.Meta.Subject != "Quarterly numbers" || !strings.Contains(got.Body, "numbers") {
		t.Errorf("stored subject %q body %q", got.Meta.Subject, got.Body)
	}
	sent := a.sentCopy("boss", res.ID, "delivered", 10*time.Second)
	if len(sent.Meta.DeliveryDetails) != 1 || sent.Meta.DeliveryDetails[0].TLS != tlsState || sent.Meta.DeliveryDetails[0].Status != "delivered" {
		t.Errorf("sent copy delivery_details %+v, want one delivered recipient with tls=%s", sent.Meta.DeliveryDetails, tlsState)
	}

	reply := b.send(protocol.SendArgs{FromMailbox: "agent", To: []string{"boss@a.test"}, Body: "Numbers look right.", ReplyToID: got.ID})
	if reply.Status != "delivered" {
		t.Fatalf("reply status %q, want delivered: %+v", reply.Status, reply.Recipients)
	}
	back := a.byMessageID("boss", "inbox", reply.MessageID, 20*time.Second)
	checkAuth(t, back.Meta, "b.test", "pass", "true")
	if strings.Trim(back.Meta.InReplyTo, "<>") != strings.Trim(res.MessageID, "<>") {
		t.Errorf("reply in_reply_to %q, want %q", back.Meta.InReplyTo, res.MessageID)
	}
	if back.Meta.ThreadID == "" || back.Meta.ThreadID != sent.Meta.ThreadID {
		t.Errorf("reply thread_id %q, want the sent copy's %q", back.Meta.ThreadID, sent.Meta.ThreadID)
	}
	if !strings.HasPrefix(back.Meta.Subject, "Re:") {
		t.Errorf("reply subject %q, want Re: …", back.Meta.Subject)
	}
	if !waitFor(15*time.Second, func() bool { return markerHas(marker, res.MessageID) }) {
		t.Fatalf("on_receive hook did not fire for the trusted message; marker: %q", readFile(marker))
	}

	// The same authenticated path from a sender b does not list: not
	// trusted, and the hook stays quiet.
	other := a.send(protocol.SendArgs{FromMailbox: "intern", To: []string{"agent@b.test"}, Subject: "FYI", Body: "not on the list"})
	if other.Status != "delivered" {
		t.Fatalf("send from intern: %q %+v", other.Status, other.Recipients)
	}
	unlisted := b.byMessageID("agent", "inbox", other.MessageID, 20*time.Second)
	checkAuth(t, unlisted.Meta, "a.test", "pass", "false")
	summary(t, "1-two-hosts", "a.test→b.test delivered tls=%s dkim=%s dmarc=%s trusted=%s; reply threaded (thread %s); hook fired; unlisted intern@a.test authenticated but trusted=%s",
		tlsState, dkimSummary(got.Meta), got.Meta.DMARC.Result, got.Meta.Trusted, back.Meta.ThreadID, unlisted.Meta.Trusted)

	// Scenario 4: c.test signs as itself and claims From: boss@a.test.
	c := l.addHost("c")
	keyDir := t.TempDir()
	key, err := dkimkeys.GenerateKey(keyDir, "evil", "ed25519")
	if err != nil {
		t.Fatal(err)
	}
	l.publishDomain("c.test", c.IP, map[string]string{key.Selector: key.TXTValue()})
	mid := "spoof-" + randHex(6) + "@c.test"
	msg := crlf(fmt.Sprintf("From: Boss <boss@a.test>\nTo: agent@b.test\nSubject: Urgent wire transfer\nDate: %s\nMessage-ID: <%s>\nMIME-Version: 1.0\nContent-Type: text/plain; charset=utf-8\n\nPay the invoice today.\n",
		time.Now().Format(time.RFC1123Z), mid))
	var signed bytes.Buffer
	if err := dkim.Sign(&signed, bytes.NewReader(msg), &dkim.SignOptions{Domain: "c.test", Selector: key.Selector, Signer: key.Signer}); err != nil {
		t.Fatal(err)
	}
	// a.test publishes p=reject: b refuses the spoof at the end of DATA,
	// naming the policy, and stores nothing.
	err = smtpSend(c.NS, b.Addr(), "mx.c.test", "bounces@c.test", "agent@b.test", signed.Bytes())
	if err == nil || !strings.Contains(err.Error(), "550") || !strings.Contains(err.Error(), "DMARC policy of a.test (p=reject)") {
		t.Fatalf("spoofed message answered %v, want 550 5.7.1 naming a.test's DMARC policy", err)
	}
	for _, f := range []string{"inbox", "junk"} {
		for _, m := range b.folder("agent", f) {
			if strings.Trim(m.Meta.MessageID, "<>") == mid {
				t.Errorf("the refused spoof was stored in %s", f)
			}
		}
	}
	var runs protocol.HookRuns
	if err := b.call(protocol.VerbHookRuns, protocol.HookRunsArgs{Limit: 100}, &runs); err != nil {
		t.Fatalf("hook.runs: %v", err)
	}
	legit, spoofRuns := 0, 0
	for _, r := range runs.Runs {
		switch r.MessageID {
		case got.ID:
			legit++
		case unlisted.ID:
			spoofRuns++
		}
	}
	if legit != 1 || spoofRuns != 0 || markerHas(marker, mid) || markerHas(marker, other.MessageID) {
		t.Errorf("hook runs: %d for the trusted message (want 1), %d for the unlisted sender (want 0): %+v; marker %q", legit, spoofRuns, runs.Runs, readFile(marker))
	}
	summary(t, "4-spoofing", "From: boss@a.test signed d=c.test refused (%s), nothing stored; hook runs legit=%d unlisted=%d",
		firstLine(err.Error()), legit, spoofRuns)
}

// checkAuth asserts the authentication results of a stored message.
func checkAuth(t *testing.T, m *store.Message, domain, result, trusted string) {
	t.Helper()
	pass := false
	for _, d := range m.DKIM {
		pass = pass || (d.Result == result && d.Domain == domain)
	}
	if !pass {
		t.Errorf("dkim %+v, want %s for %s", m.DKIM, result, domain)
	}
	if m.DMARC.Result != result {
		t.Errorf("dmarc %+v, want %s", m.DMARC, result)
	}
	if m.SPF.Result != result {
		t.Errorf("spf %+v, want %s", m.SPF, result)
	}
	if string(m.Trusted) != trusted {
		t.Errorf("trusted %q, want %s", m.Trusted, trusted)
	}
}

func dkimSummary(m *store.Message) string {
	var parts []string
	for _, d := range m.DKIM {
		parts = append(parts, d.Result+"("+d.Domain+")")
	}
	return strings.Join(parts, ",")
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func markerHas(path, mid string) bool {
	return strings.Contains(readFile(path), strings.Trim(mid, "<>"))
}

// crlf turns LF line ends into CRLF.
func crlf(s string) []byte {
	return []byte(strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\n", "\r\n"))
}

// smtpSend delivers msg to addr from inside namespace ns with STARTTLS
// (certificate not verified: the hosts are self-signed).
func smtpSend(ns, addr, helo, from, rcpt string, msg []byte) error {
	return smtpDeliver(ns, addr, helo, from, rcpt, msg, true)
}

// smtpDeliver is smtpSend with STARTTLS optional.
func smtpDeliver(ns, addr, helo, from, rcpt string, msg []byte, useTLS bool) error {
	conn, err := dialIn(ns, addr, 5*time.Second)
	if err != nil {
		return err
	}
	conn.SetDeadline(time.Now().Add(60 * time.Second))
	host := strings.Split(addr, ":")[0]
	c, err := smtp.NewClient(conn, host)
	if err != nil {
		conn.Close()
		return err
	}
	defer c.Close()
	if err := c.Hello(helo); err != nil {
		return err
	}
	if ok, _ := c.Extension("STARTTLS"); ok && useTLS {
		if err := c.StartTLS(&tls.Config{InsecureSkipVerify: true}); err != nil {
			return err
		}
	}
	if err := c.Mail(from); err != nil {
		return err
	}
	if err := c.Rcpt(rcpt); err != nil {
		return err
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	if _, err := w.Write(msg); err != nil {
		w.Close()
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return c.Quit()
}
