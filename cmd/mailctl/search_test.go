package main

import (
	"encoding/json"
	"net/smtp"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// shellWords splits a documented command line as a shell would, for the
// quoting the docs use: single quotes keep everything, double quotes
// outside them too.
func shellWords(line string) []string {
	var out []string
	var cur strings.Builder
	in, have := byte(0), false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case in != 0 && c == in:
			in = 0
		case in != 0:
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			in, have = c, true
		case c == ' ':
			if have || cur.Len() > 0 {
				out = append(out, cur.String())
			}
			cur.Reset()
			have = false
		default:
			cur.WriteByte(c)
		}
	}
	if have || cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// TestCLIDocsSearchExamples runs the `mail list --query` examples of
// docs/cli.md against a dev daemon holding mail they were written for:
// each exits 0 and finds a message. A query the daemon cannot read fails
// naming its token.
func TestCLIDocsSearchExamples(t *testing.T) {
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := regexp.MustCompile(`(?m)^\s+(mailctl mail list --query .*)$`).FindAllStringSubmatch(string(doc), -1)
	if len(lines) < 2 {
		t.Fatalf("docs/cli.md shows %d search examples", len(lines))
	}
	_, banner, sock := startDev(t, t.TempDir())
	env := []string{"MAILCTL_SOCKET=" + sock}
	smtpAddr := regexp.MustCompile(`127\.0\.0\.1:\d+`).FindString(banner.String())
	send := func(from, subject, body, attachment string) {
		t.Helper()
		msg := "From: " + from + "\r\nTo: agent@mailctl.test\r\nSubject: " + subject + "\r\nDate: " + time.Now().Format(time.RFC1123Z) +
			"\r\nMessage-ID: <" + time.Now().Format("150405.000000000") + "@example.com>\r\nMIME-Version: 1.0\r\n"
		if attachment == "" {
			msg += "Content-Type: text/plain\r\n\r\n" + body + "\r\n"
		} else {
			msg += "Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\n" + body +
				"\r\n--b\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment; filename=" + attachment +
				"\r\nContent-Transfer-Encoding: base64\r\n\r\nJVBERi0xLjQK\r\n--b--\r\n"
		}
		// Plain SMTP: the dev server's certificate is its own.
		c, err := smtp.Dial(smtpAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Mail("sender@example.com"); err != nil {
			t.Fatal(err)
		}
		if err := c.Rcpt("agent@mailctl.test"); err != nil {
			t.Fatal(err)
		}
		w, err := c.Data()
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(msg))
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		c.Quit()
	}
	send("Alice <alice@example.com>", "Invoice for March", "The invoice is attached.", "invoice.pdf")
	send("Bob <bob@example.org>", "Your order", "Order 1234 ships on Friday.", "")
	testwait.For(t, "both messages listed", func() bool {
		out, _, code := mailctl(t, env, "mail", "list", "--mailbox", "agent", "--json")
		var l protocol.MessageList
		return code == 0 && json.Unmarshal([]byte(out), &l) == nil && len(l.Messages) == 2
	})
	for _, m := range lines {
		args := shellWords(m[1])[1:]
		out, errOut, code := mailctl(t, env, append(args, "--json")...)
		var l protocol.MessageList
		if code != 0 || json.Unmarshal([]byte(out), &l) != nil || len(l.Messages) != 1 {
			t.Errorf("%s: exit %d, %s %s", m[1], code, out, errOut)
		}
	}
	_, errOut, code := mailctl(t, env, "mail", "list", "--mailbox", "agent", "--query", "invoice colour:red")
	if code == 0 || !strings.Contains(errOut, `"colour:red"`) || !strings.Contains(errOut, "invalid_input") {
		t.Errorf("bad query: exit %d: %s", code, errOut)
	}
}
