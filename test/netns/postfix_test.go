package netns

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/setup"
	"github.com/mailctl/mailctl/internal/testpostfix"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// postfixMasterCF runs smtpd on the namespace's address and delivers
// d.test into Maildirs with the virtual agent; nothing is chrooted.
var postfixMasterCF = testpostfix.MasterCF("{LISTEN}  inet  n       -       n       -       -       smtpd")

// postfixHost is a private Postfix instance in its own namespace: the MX of
// domain, delivering to Maildirs under Maildirs, relaying for the lab's
// subnet, and resolving through the lab's DNS server.
type postfixHost struct {
	*nsHost
	Domain   string
	Maildirs string
	maillog  string
}

func (p *postfixHost) log() string { b, _ := os.ReadFile(p.maillog); return string(b) }

func (l *lab) newPostfix(name, domain string) *postfixHost {
	l.t.Helper()
	return l.newPostfixIn(l.addHost(name), domain)
}

// newPostfixIn is newPostfix in an existing namespace; each of mainCF
// ("key = value") replaces the line of the same key or is added.
func (l *lab) newPostfixIn(ns *nsHost, domain string, mainCF ...string) *postfixHost {
	t := l.t
	t.Helper()
	postfix, err := exec.LookPath("/usr/sbin/postfix")
	if err != nil {
		t.Skip("postfix is not installed (apt install postfix)")
	}
	pfUser, err := user.Lookup("postfix")
	if err != nil {
		t.Skipf("no postfix user (apt install postfix): %v", err)
	}
	pfUID, _ := strconv.Atoi(pfUser.Uid)
	owner := testusers.Create(t, "mcpf")

	// ip netns exec bind-mounts /etc/netns/NAME/* over /etc: this is how
	// Postfix's libc resolver finds the lab's DNS server.
	etcNS := filepath.Join("/etc/netns", ns.NS)
	if _, err := os.Stat("/etc/netns"); os.IsNotExist(err) {
		t.Cleanup(func() { os.Remove("/etc/netns") }) // ours, and empty again by then
	}
	if err := os.MkdirAll(etcNS, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(etcNS) })
	if err := os.WriteFile(filepath.Join(etcNS, "resolv.conf"), []byte("nameserver "+l.DNSIP+"\noptions timeout:2 attempts:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	dir := testusers.SharedDir(t)
	p := &postfixHost{nsHost: ns, Domain: domain, Maildirs: filepath.Join(dir, "maildirs"), maillog: filepath.Join(dir, "maillog")}
	etc := filepath.Join(dir, "etc")
	for _, sub := range []string{etc, filepath.Join(dir, "spool"), filepath.Join(dir, "data"), p.Maildirs} {
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chown(filepath.Join(dir, "data"), pfUID, -1)
	os.Chown(p.Maildirs, int(owner.UID), int(owner.GID))
	cert, key, err := setup.EnsureSelfSigned(filepath.Join(dir, "tls"), "mx."+domain)
	if err != nil {
		t.Fatal(err)
	}
	cf := []string{
		"compatibility_level = 3.6",
		"queue_directory = " + filepath.Join(dir, "spool"),
		"data_directory = " + filepath.Join(dir, "data"),
		"maillog_file = " + p.maillog,
		"maillog_file_prefixes = " + dir,
		"mail_owner = postfix",
		"setgid_group = postdrop",
		"myhostname = mx." + domain,
		"mydomain = " + domain,
		"myorigin = " + domain,
		"mydestination =",
		"inet_interfaces = " + ns.IP,
		"inet_protocols = ipv4",
		"mynetworks = " + l.subnet + ".0/24",
		"smtpd_relay_restrictions = permit_mynetworks, reject_unauth_destination",
		"smtpd_peername_lookup = no",
		"notify_classes =",
		"alias_maps =",
		"alias_database =",
		"virtual_mailbox_domains = " + domain,
		"virtual_mailbox_base = " + p.Maildirs,
		"virtual_mailbox_maps = static:mail/",
		"virtual_uid_maps = static:" + strconv.Itoa(int(owner.UID)),
		"virtual_gid_maps = static:" + strconv.Itoa(int(owner.GID)),
		"smtpd_tls_cert_file = " + cert,
		"smtpd_tls_key_file = " + key,
		"smtpd_tls_security_level = may",
		"smtp_tls_security_level = may",
		"smtpd_tls_received_header = yes",
		"maximal_backoff_time = 10s",
		"minimal_backoff_time = 5s",
		"queue_run_delay = 5s",
	}
	for _, line := range mainCF {
		key, _, _ := strings.Cut(line, "=")
		i := slices.IndexFunc(cf, func(l string) bool { return strings.HasPrefix(l, strings.TrimSpace(key)+" =") })
		if i < 0 {
			cf = append(cf, line)
		} else {
			cf[i] = line
		}
	}
	os.WriteFile(filepath.Join(etc, "main.cf"), []byte(strings.Join(cf, "\n")+"\n"), 0o644)
	os.WriteFile(filepath.Join(etc, "master.cf"), []byte(strings.Replace(postfixMasterCF, "{LISTEN}", ns.IP+":25", 1)), 0o644)
	pf := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns.NS, postfix, "-c", etc}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("postfix %v: %v\n%s\nmaillog:\n%s", args, err, out, p.log())
		}
	}
	pf("check")
	pf("start")
	t.Cleanup(func() {
		exec.Command("ip", "netns", "exec", ns.NS, postfix, "-c", etc, "stop").Run()
		// postfix stop returns before master exits: wait for `postfix
		// status` to say it is gone (the namespace cleanup kills the rest).
		waitFor(15*time.Second, func() bool {
			return exec.Command("ip", "netns", "exec", ns.NS, postfix, "-c", etc, "status").Run() != nil
		})
	})
	if !waitFor(15*time.Second, func() bool {
		c, err := dialIn(ns.NS, ns.IP+":25", time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		b := make([]byte, 4)
		n, _ := c.Read(b)
		return string(b[:n]) == "220 "
	}) {
		t.Fatalf("Postfix in %s does not greet; maillog:\n%s", ns.NS, p.log())
	}
	return p
}

// maildirWith waits for a delivered message containing s.
func (p *postfixHost) maildirWith(t *testing.T, s string, timeout time.Duration) string {
	t.Helper()
	var found string
	waitFor(timeout, func() bool {
		files, _ := filepath.Glob(filepath.Join(p.Maildirs, "mail", "new", "*"))
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), s) {
				found = string(b)
				return true
			}
		}
		return false
	})
	if found == "" {
		t.Fatalf("no message containing %q delivered by Postfix after %v; maillog:\n%s", s, timeout, p.log())
	}
	return found
}

// TestPostfix runs scenario 2: mailctl delivers to a private Postfix that is
// the MX of d.test, and the same Postfix relays a message into mailctl,
// both over port 25 with MX lookups through the lab's DNS.
func TestPostfix(t *testing.T) {
	l := newLab(t)
	p := l.newPostfix("p", "d.test")
	l.publishDomain("d.test", p.IP, nil)
	a := l.newMailHost("a", "a.test", hostOptions{Mailboxes: []string{"boss"}, TrustedSenders: []string{"*@d.test"}})
	client := l.addHost("c")

	// mailctl → Postfix.
	res := a.send(protocol.SendArgs{FromMailbox: "boss", To: []string{"dora@d.test"}, Subject: "to postfix", Body: "hello Postfix"})
	if res.Status != "delivered" {
		t.Fatalf("send to Postfix: %q %+v; maillog:\n%s", res.Status, res.Recipients, p.log())
	}
	got := p.maildirWith(t, strings.Trim(res.MessageID, "<>"), 15*time.Second)
	if !strings.Contains(got, "DKIM-Signature:") || !strings.Contains(got, "d=a.test") {
		t.Errorf("message delivered by Postfix has no DKIM signature for a.test:\n%s", clip(got, 2000))
	}
	if !strings.Contains(got, "with ESMTPS") {
		t.Errorf("Postfix did not record a TLS session from mailctl:\n%s", clip(got, 2000))
	}
	tlsOut := res.Recipients[0].TLS

	// Postfix → mailctl: a client in the lab submits to Postfix, which
	// looks up a.test's MX and relays.
	mid := "pf-" + randHex(6) + "@d.test"
	msg := crlf(fmt.Sprintf("From: Dora <dora@d.test>\nTo: boss@a.test\nSubject: from postfix\nDate: %s\nMessage-ID: <%s>\n\nhello mailctl\n",
		time.Now().Format(time.RFC1123Z), mid))
	if err := smtpSend(client.NS, p.IP+":25", "client.d.test", "dora@d.test", "boss@a.test", msg); err != nil {
		t.Fatalf("submitting to Postfix: %v; maillog:\n%s", err, p.log())
	}
	in := a.byMessageID("boss", "inbox", mid, 45*time.Second)
	if in.Meta.SPF.Result != "pass" || in.Meta.DMARC.Result != "pass" || in.Meta.Trusted != "true" {
		t.Errorf("relayed by Postfix: spf=%+v dmarc=%+v trusted=%q, want pass/pass/true (SPF-aligned sender listed)", in.Meta.SPF, in.Meta.DMARC, in.Meta.Trusted)
	}
	// Postfix logs the delivery once it has our 250, which may be after
	// the message is in the inbox.
	delivered := func() bool {
		l := p.log()
		return strings.Contains(l, "relay=mx.a.test["+a.IP+"]:25") && strings.Contains(l, "status=sent")
	}
	if !waitFor(15*time.Second, delivered) {
		t.Errorf("Postfix did not log a delivery to a.test's MX:\n%s", p.log())
	}
	summary(t, "2-postfix", "mailctl→Postfix delivered tls=%s, DKIM-Signature kept, ESMTPS; Postfix→mailctl via MX stored spf=%s dmarc=%s trusted=%s",
		tlsOut, in.Meta.SPF.Result, in.Meta.DMARC.Result, in.Meta.Trusted)
}
