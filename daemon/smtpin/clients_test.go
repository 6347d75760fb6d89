package smtpin

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// These tests drive the server with the clients real senders use. Each one
// skips, saying why, when its tool is not installed (Debian packages: swaks
// with libnet-ssleay-perl, python3, msmtp).

func needTool(t *testing.T, path string) string {
	t.Helper()
	p, err := exec.LookPath(path)
	if err != nil {
		t.Skipf("%s not installed (%v)", path, err)
	}
	return p
}

func runTool(t *testing.T, stdin string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", name, args, err, out)
	}
	return string(out)
}

func port(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }

func TestSwaksSTARTTLS(t *testing.T) {
	swaks := needTool(t, "swaks")
	if _, err := os.Stat("/usr/share/perl5/Net/SSLeay.pm"); err != nil {
		if _, err2 := exec.Command("perl", "-MNet::SSLeay", "-e", "1").CombinedOutput(); err2 != nil {
			t.Skip("swaks needs Net::SSLeay for STARTTLS (apt install libnet-ssleay-perl)")
		}
	}
	tlsCfg := serverTLS(t)
	ts := startServer(t, Limits{}, tlsCfg, false)
	attach := filepath.Join(t.TempDir(), "report.txt")
	os.WriteFile(attach, []byte("attached text\n"), 0o600)
	out := runTool(t, "", swaks, "--server", "127.0.0.1", "--port", port(ts.addr), "--tls",
		"--ehlo", "swaks.client.example", "--from", "alice@sender.example", "--to", "bob@example.com,carol@mailctl.test",
		"--header", "Subject: swaks over TLS", "--body", "hello from swaks", "--attach", "@"+attach)
	if !strings.Contains(out, "220 2.0.0 Ready to start TLS") || !strings.Contains(out, "<~  250 2.0.0") {
		t.Errorf("swaks transcript lacks TLS delivery:\n%s", out)
	}
	got := ts.be.got()
	if len(got) != 1 {
		t.Fatalf("%d deliveries", len(got))
	}
	d := got[0]
	if !d.env.TLS || !strings.HasPrefix(d.env.TLSVersion, "TLS1.") || d.env.Helo != "swaks.client.example" {
		t.Errorf("envelope %+v", d.env)
	}
	if !reflect.DeepEqual(d.env.Rcpts, []string{"bob@example.com", "carol@mailctl.test"}) {
		t.Errorf("rcpts %q", d.env.Rcpts)
	}
	raw := string(d.raw)
	for _, want := range []string{"with ESMTPS id", "Subject: swaks over TLS", "hello from swaks", "report.txt"} {
		if !strings.Contains(raw, want) {
			t.Errorf("message lacks %q", want)
		}
	}
}

func TestSwaksRelayRefused(t *testing.T) {
	swaks := needTool(t, "swaks")
	ts := startServer(t, Limits{}, nil, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, swaks, "--server", "127.0.0.1", "--port", port(ts.addr),
		"--from", "spam@spam.example", "--to", "victim@elsewhere.example").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "550 5.7.1") {
		t.Errorf("relay not refused (err %v):\n%s", err, out)
	}
	if len(ts.be.got()) != 0 {
		t.Error("relayed")
	}
}

const pythonSMTPUTF8 = `
import smtplib, sys
from email.message import EmailMessage
from email import policy
m = EmailMessage(policy=policy.SMTPUTF8)
m["From"] = "Jörg <jörg@sender.example>"
m["To"] = "用户@example.com"
m["Subject"] = "Grüße aus Zürich 👋"
m.set_content("Schöne Grüße\n")
with smtplib.SMTP("127.0.0.1", int(sys.argv[1]), local_hostname="py.client.example") as s:
    s.ehlo()
    assert s.has_extn("smtputf8"), "server lacks SMTPUTF8"
    s.send_message(m)
print("sent")
`

func TestPythonSMTPUTF8(t *testing.T) {
	py := needTool(t, "/usr/bin/python3")
	ts := startServer(t, Limits{}, nil, false)
	out := runTool(t, "", py, "-c", pythonSMTPUTF8, port(ts.addr))
	if !strings.Contains(out, "sent") {
		t.Fatalf("python: %s", out)
	}
	got := ts.be.got()
	if len(got) != 1 {
		t.Fatalf("%d deliveries", len(got))
	}
	d := got[0]
	if d.env.MailFrom != "jörg@sender.example" || !reflect.DeepEqual(d.env.Rcpts, []string{"用户@example.com"}) {
		t.Errorf("envelope %+v", d.env)
	}
	raw := string(d.raw)
	for _, want := range []string{"with UTF8SMTP id", "Subject: Grüße aus Zürich 👋\r\n", "To: 用户@example.com\r\n"} {
		if !strings.Contains(raw, want) {
			t.Errorf("message lacks %q:\n%s", want, raw)
		}
	}
}

func TestMsmtp(t *testing.T) {
	msmtp := needTool(t, "msmtp")
	tlsCfg := serverTLS(t)
	ts := startServer(t, Limits{}, tlsCfg, false)
	msg := "From: alice@sender.example\nTo: bob@example.com\nSubject: via msmtp\n\nline one\n.\nline three\n"
	runTool(t, msg, msmtp, "--host=127.0.0.1", "--port="+port(ts.addr), "--auth=off", "--tls=on",
		"--tls-starttls=on", "--tls-certcheck=off", "--domain=msmtp.client.example",
		"--from=alice@sender.example", "bob@example.com")
	got := ts.be.got()
	if len(got) != 1 {
		t.Fatalf("%d deliveries", len(got))
	}
	if !got[0].env.TLS {
		t.Error("msmtp delivery not over TLS")
	}
	// msmtp turns LF into CRLF and dot-stuffs; we must see the original lines.
	if b := body(t, got[0].raw); !strings.HasSuffix(b, "\r\n\r\nline one\r\n.\r\nline three\r\n") {
		t.Errorf("body %q", b)
	}
}
