package smtpin

import (
	"context"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/freeport"
	"github.com/mailctl/mailctl/internal/testpostfix"
)

// postfixMasterCF is the smallest master.cf a private Postfix instance needs
// to take mail from sendmail and deliver it over LMTP. Nothing is chrooted,
// so the lmtp client can reach the test's socket.
var postfixMasterCF = testpostfix.MasterCF()

// TestPostfixFrontsLMTP runs a private Postfix instance (Debian's postfix
// package) configured as docs/postfix-front.md describes, injects mail with
// Postfix's sendmail and checks that it arrives over LMTP with per-recipient
// outcomes: one recipient stored, one refused (Postfix bounces it).
func TestPostfixFrontsLMTP(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a private Postfix instance needs root")
	}
	postfix := needTool(t, "/usr/sbin/postfix")
	sendmail := needTool(t, "/usr/sbin/sendmail")
	pfUser, err := user.Lookup("postfix")
	if err != nil {
		t.Skipf("no postfix user: %v", err)
	}
	uid, _ := strconv.Atoi(pfUser.Uid)
	dir, err := os.MkdirTemp("", "mailctl-postfix-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The lmtp client runs as postfix and must reach the socket.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	etc := filepath.Join(dir, "etc")
	for _, d := range []string{etc, filepath.Join(dir, "spool"), filepath.Join(dir, "data")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(filepath.Join(dir, "data"), uid, -1); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "lmtp.sock")

	ts := startServerLMTPAt(t, sock, xforwardFrom(uint32(uid))) // the front MTA may say who its client was

	mainCF := strings.Join([]string{
		"compatibility_level = 3.6",
		"queue_directory = " + filepath.Join(dir, "spool"),
		"data_directory = " + filepath.Join(dir, "data"),
		"maillog_file = " + filepath.Join(dir, "maillog"),
		"maillog_file_prefixes = " + dir,
		"mail_owner = postfix",
		"setgid_group = postdrop",
		"myhostname = postfix.mailctl.test",
		"mydestination =",
		"inet_interfaces = loopback-only",
		"inet_protocols = ipv4",
		"mynetworks = 192.0.2.1/32",
		"smtpd_recipient_restrictions = permit_mynetworks, reject_unauth_destination, reject_unverified_recipient",
		"unverified_recipient_reject_code = 550",
		"virtual_mailbox_domains = example.com",
		"virtual_mailbox_maps =",
		"virtual_transport = lmtp:unix:" + sock,
		"lmtp_send_xforward_command = yes",
		"notify_classes =",
		"",
	}, "\n")
	os.WriteFile(filepath.Join(etc, "main.cf"), []byte(mainCF), 0o644)
	smtpdAddr := freeport.TCP(t)
	os.WriteFile(filepath.Join(etc, "master.cf"), []byte(postfixMasterCF+smtpdAddr+" inet n - n - - smtpd\n"), 0o644)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pf := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, postfix, append([]string{"-c", etc}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			// Postfix reports fatal errors on stderr only to a terminal.
			log, _ := os.ReadFile(filepath.Join(dir, "maillog"))
			t.Fatalf("postfix %v: %v\n%s\nmaillog:\n%s\n(run it with script(1) to see the message)", args, err, out, log)
		}
	}
	pf("check")
	pf("start")
	t.Cleanup(func() {
		exec.Command(postfix, "-c", etc, "stop").Run()
		// postfix stop returns before master exits; the directory can be
		// removed once `postfix status` says it is gone.
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if exec.Command(postfix, "-c", etc, "status").Run() != nil {
				return
			}
		}
		t.Errorf("postfix master still running 15 s after postfix stop")
	})

	msg := "From: alice@sender.example\nTo: bob@example.com, nobody@example.com\nSubject: via postfix\nMessage-ID: <pf-1@sender.example>\n\nhello through postfix\n.\nend\n"
	cmd := exec.CommandContext(ctx, sendmail, "-C", etc, "-i", "-f", "alice@sender.example", "bob@example.com", "nobody@example.com")
	cmd.Stdin = strings.NewReader(msg)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sendmail: %v\n%s", err, out)
	}

	deadline := time.Now().Add(30 * time.Second)
	for len(ts.be.got()) == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	got := ts.be.got()
	if len(got) == 0 {
		log, _ := os.ReadFile(filepath.Join(dir, "maillog"))
		t.Fatalf("nothing delivered over LMTP; maillog:\n%s", log)
	}
	d := got[0]
	if d.env.MailFrom != "alice@sender.example" || !reflect.DeepEqual(d.env.Rcpts, []string{"bob@example.com"}) {
		t.Errorf("envelope %+v", d.env)
	}
	raw := string(d.raw)
	for _, want := range []string{"with LMTP id", "by postfix.mailctl.test (Postfix", "Subject: via postfix\r\n",
		"\r\n\r\nhello through postfix\r\n.\r\nend\r\n"} {
		if !strings.Contains(raw, want) {
			t.Errorf("message lacks %q:\n%s", want, raw)
		}
	}
	checkPostfixSMTPD(t, smtpdAddr, ts)
	checkPostfixXForward(t, smtpdAddr, ts)

	// Postfix logs the refused recipient with our reply.
	deadline = time.Now().Add(10 * time.Second)
	for {
		log, _ := os.ReadFile(filepath.Join(dir, "maillog"))
		if strings.Contains(string(log), "to=<nobody@example.com>") && strings.Contains(string(log), "5.1.1") {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("maillog lacks the refused recipient:\n%s", log)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkPostfixSMTPD talks to the Postfix smtpd: with reject_unverified_recipient
// Postfix asks mailctl over LMTP whether an address exists, so an unknown one
// is refused during the SMTP session and a relay attempt never reaches us.
func checkPostfixSMTPD(t *testing.T, addr string, ts *testServer) {
	t.Helper()
	rcptReply := func(rcpt string) string {
		t.Helper()
		var last string
		// The first answer may be 450 while the verification probe runs.
		for i := 0; i < 20; i++ {
			c := dialRaw(t, "tcp", addr)
			c.expect("220 ")
			c.cmd("EHLO client.example", "250 ")
			c.cmd("MAIL FROM:<alice@sender.example>", "250 ")
			c.send("RCPT TO:<" + rcpt + ">\r\n")
			last = c.reply()
			c.c.Close()
			if !strings.HasPrefix(last, "450") {
				return last
			}
			time.Sleep(500 * time.Millisecond)
		}
		return last
	}
	if r := rcptReply("nobody@example.com"); !strings.HasPrefix(r, "550 5.1.1") {
		t.Errorf("unknown recipient via Postfix: %q, want 550 5.1.1", r)
	}
	if r := rcptReply("carol@example.com"); !strings.HasPrefix(r, "250 ") {
		t.Errorf("known recipient via Postfix: %q, want 250", r)
	}
	// Postfix's default smtpd_relay_restrictions answer 454 (defer_unauth_destination).
	if r := rcptReply("victim@elsewhere.example"); !strings.Contains(r, "Relay access denied") {
		t.Errorf("relay via Postfix: %q, want Relay access denied", r)
	}
}

// checkPostfixXForward sends a message to the Postfix smtpd: Postfix
// passes its client's address and HELO on with XFORWARD, and they reach the
// envelope mailctl checks SPF with.
func checkPostfixXForward(t *testing.T, addr string, ts *testServer) {
	t.Helper()
	before := len(ts.be.got())
	c := dialRaw(t, "tcp", addr)
	c.expect("220 ")
	c.cmd("EHLO client.sender.example", "250 ")
	c.transaction("alice@sender.example", "bob@example.com", "Subject: through smtpd\r\n\r\nhello\r\n")
	c.cmd("QUIT", "221 ")
	deadline := time.Now().Add(30 * time.Second)
	for len(ts.be.got()) == before && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	got := ts.be.got()
	if len(got) == before {
		t.Fatal("the message sent through the Postfix smtpd never arrived over LMTP")
	}
	env := got[len(got)-1].env
	if env.RemoteIP.String() != "127.0.0.1" || env.Helo != "client.sender.example" || env.Forwarded == nil {
		t.Errorf("envelope behind Postfix: remote %v, helo %q, forwarded %+v; want Postfix's client 127.0.0.1 and its HELO", env.RemoteIP, env.Helo, env.Forwarded)
	}
}

// startServerLMTPAt serves LMTP on a socket the postfix user can use.
func startServerLMTPAt(t *testing.T, sock string, opts ...func(*Config)) *testServer {
	t.Helper()
	ts := startServer(t, Limits{}, nil, false, opts...)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	go ts.ServeLMTP(l)
	return ts
}
