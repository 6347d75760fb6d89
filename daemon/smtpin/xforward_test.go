package smtpin

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testusers"
)

// TestXForwardOverLMTP: on the LMTP socket, a forwarding peer sees
// XFORWARD among the LHLO capabilities, and the address and HELO it
// forwards become the envelope's (for SPF) and our Received header's, for
// the next transaction only. Pipelined NOOPs keep their own replies;
// malformed commands and XFORWARD inside a transaction are refused.
func TestXForwardOverLMTP(t *testing.T) {
	ts := startServer(t, Limits{}, nil, true, xforwardFrom(uint32(os.Getuid())))
	c := dialRaw(t, "unix", ts.lmtp)
	c.expect("220 ")
	if r := c.cmd("LHLO front.example", "250 "); !strings.Contains(r, "250-XFORWARD NAME ADDR PROTO HELO") {
		t.Fatalf("LHLO reply lacks XFORWARD: %q", r)
	}
	c.send("NOOP\r\nXFORWARD NAME=mail.sender.example ADDR=IPV6:2001:db8::7 PROTO=ESMTP\r\nXFORWARD HELO=mail.sender+2Eexample\r\nNOOP\r\n")
	for _, want := range []string{"250 2.0.0 I have successfully done nothing", "250 2.0.0 Ok", "250 2.0.0 Ok", "250 2.0.0 I have successfully done nothing"} {
		if r := c.reply(); r != want {
			t.Fatalf("pipelined reply %q, want %q", r, want)
		}
	}
	c.cmd("XFORWARD ADDR=not-an-ip", "501 5.5.4")
	c.cmd("XFORWARD COLOR=blue", "501 5.5.4")
	c.cmd("MAIL FROM:<alice@sender.example>", "250 ")
	c.cmd("XFORWARD ADDR=192.0.2.99", "503 5.5.1")
	c.cmd("RCPT TO:<bob@example.com>", "250 ")
	c.cmd("DATA", "354 ")
	c.send("Subject: forwarded\r\n\r\nXFORWARD ADDR=192.0.2.66\r\nNOOP\r\n.\r\n")
	c.expect("250 ")
	// The next transaction, with no XFORWARD of its own, is the front MTA's.
	c.transaction("alice@sender.example", "bob@example.com", "Subject: plain\r\n\r\nx\r\n")
	got := ts.be.got()
	if len(got) != 2 {
		t.Fatalf("%d deliveries", len(got))
	}
	env := got[0].env
	if env.RemoteIP.String() != "2001:db8::7" || env.Helo != "mail.sender.example" || env.Forwarded == nil || env.Forwarded.Name != "mail.sender.example" {
		t.Errorf("forwarded envelope: ip %v helo %q forwarded %+v", env.RemoteIP, env.Helo, env.Forwarded)
	}
	if b := body(t, got[0].raw); b != "Subject: forwarded\r\n\r\nXFORWARD ADDR=192.0.2.66\r\nNOOP\r\n" {
		t.Errorf("message data was rewritten: %q", b)
	}
	if rcv := string(got[0].raw[:got[0].trace]); !strings.Contains(rcv, "from mail.sender.example (mail.sender.example [2001:db8::7]) via front.example") {
		t.Errorf("Received header %q", rcv)
	}
	if env := got[1].env; env.RemoteIP != nil || env.Forwarded != nil || env.Helo != "front.example" {
		t.Errorf("second transaction kept the forwarded client: %+v", env)
	}
}

// TestXForwardRefusedToOthers: on port 25, and on the LMTP socket for a
// local user who is not the front MTA, XFORWARD is an unknown command and
// is not advertised: nobody else can claim a client address.
func TestXForwardRefusedToOthers(t *testing.T) {
	ts := startServer(t, Limits{}, nil, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.expect("220 ")
	if r := c.cmd("EHLO client.example", "250 "); strings.Contains(r, "XFORWARD") {
		t.Errorf("SMTP advertises XFORWARD: %q", r)
	}
	c.cmd("XFORWARD ADDR=192.0.2.1", "50")

	testusers.RequireRoot(t)
	socat, err := exec.LookPath("socat")
	if err != nil {
		t.Skip("socat not installed")
	}
	u := testusers.Create(t, "mcxf")
	sock := filepath.Join(testusers.SharedDir(t), "lmtp.sock")
	startServerLMTPAt(t, sock)
	cmd := testusers.As(exec.Command(socat, "-t5", "-", "UNIX-CONNECT:"+sock), u.UID, u.GID)
	cmd.Stdin = strings.NewReader("LHLO local.example\r\nXFORWARD ADDR=192.0.2.1\r\nQUIT\r\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("socat as %s: %v %s", u.Name, err, out)
	}
	if strings.Contains(string(out), "250-XFORWARD") || strings.Contains(string(out), "250 2.0.0 Ok") {
		t.Errorf("a local user got XFORWARD on the LMTP socket:\n%s", out)
	}
	if !strings.Contains(string(out), "\n50") {
		t.Errorf("XFORWARD from a local user was not refused:\n%s", out)
	}
}

// FuzzXForward feeds command bytes from a front MTA through the XFORWARD
// layer: it never panics, and every NOOP it hands go-smtp gets its reply
// back in order.
func FuzzXForward(f *testing.F) {
	for _, s := range []string{
		"XFORWARD ADDR=192.0.2.1 NAME=a+2Eb\r\nMAIL FROM:<a@b>\r\n",
		"NOOP\r\nxforward helo=[UNAVAILABLE]\r\nNOOP x\r\n",
		"XFORWARD ADDR=IPV6:2001:db8::1\r\nXFORWARD\r\nXFORWARD ADDR=+\r\n",
		"BDAT 12\r\nXFORWARD A=\r\nNOOP\r\n",
		"XFORWARD " + strings.Repeat("NAME=x ", 700) + "\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		x := &xforward{maxLine: 4096}
		x.line = append(x.line, data...)
		x.split()
		noops := strings.Count(strings.ToUpper(string(x.out)), "NOOP")
		if len(x.queue) > noops {
			t.Fatalf("%d entries queued for %d NOOPs handed on", len(x.queue), noops)
		}
		for range x.queue {
			out := string(x.rewrite([]byte(noopReply)))
			if !strings.HasPrefix(out, "250 ") && !strings.HasPrefix(out, "50") {
				t.Fatalf("reply %q", out)
			}
		}
		if len(x.queue) != 0 {
			t.Fatalf("%d replies never paired", len(x.queue))
		}
	})
}

// TestLMTPSocketCapsEachLocalUser: on the LMTP socket a local user who is
// not the front MTA is one client, held to the per-IP cap by its uid, so it
// cannot take every connection slot (port 25's included) and stop everyone's
// inbound mail; the front MTA's users and root count against the total only.
func TestLMTPSocketCapsEachLocalUser(t *testing.T) {
	testusers.RequireRoot(t)
	socat, err := exec.LookPath("socat")
	if err != nil {
		t.Skip("socat not installed")
	}
	u := testusers.Create(t, "mccap")
	sock := filepath.Join(testusers.SharedDir(t), "lmtp.sock")
	startServerLMTPAt(t, sock, func(c *Config) { c.Limits.MaxConnectionsPerIP = 2 })
	// connect opens a connection as u that stays open until the test ends,
	// and returns the server's first line.
	connect := func() string {
		cmd := testusers.As(exec.Command(socat, "-t5", "-", "UNIX-CONNECT:"+sock), u.UID, u.GID)
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { in.Close(); cmd.Wait() })
		out.(*os.File).SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			t.Fatalf("reading the greeting as %s: %q, %v", u.Name, line, err)
		}
		return line
	}
	for i := range 2 {
		if got := connect(); !strings.HasPrefix(got, "220 ") {
			t.Fatalf("connection %d of %s: %q", i+1, u.Name, got)
		}
	}
	if got := connect(); !strings.HasPrefix(got, "421 4.7.0") {
		t.Errorf("a third connection of %s past a cap of 2: %q, want 421 4.7.0", u.Name, got)
	}
	for range 3 {
		c := dialRaw(t, "unix", sock)
		c.expect("220 ")
	}
}
