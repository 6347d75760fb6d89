package daemon

import (
	"log/slog"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/fakemx"
	"github.com/mailctl/mailctl/internal/testproc"
	"github.com/mailctl/mailctl/protocol"
)

// TestFollowOneMessageThroughTheLog runs docs/operations.md's table of
// journalctl filters against the log of a daemon at DEBUG that received one
// message over SMTP and sent one: each filter finds every line the table
// names.
func TestFollowOneMessageThroughTheLog(t *testing.T) {
	rows := followRows(t)
	var logs testproc.Output
	mx := fakemx.New(t, "127.0.0.1", nil)
	_, port, _ := net.SplitHostPort(mx.Addr)
	dns := &resolver.Map{}
	td := startDaemonWith(t, "[delivery]\nport = "+port+"\n", Options{Resolver: dns,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	dns.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	dns.SetIP("mx.remote.test", "127.0.0.1")
	td.ensureMine(t, "alice")
	const inID = "in-1@sender.test"
	if err := sendSMTP(t, td.SMTPAddrs()[0], "bob@sender.test", []string{"alice@example.test"},
		"From: bob@sender.test\nTo: alice@example.test\nSubject: hi\nMessage-ID: <"+inID+">\n\nhello\n"); err != nil {
		t.Fatal(err)
	}
	var res protocol.SendResult
	if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "alice", To: []string{"friend@remote.test"}, Subject: "out", Body: "x"}, &res); err != nil {
		t.Fatal(err)
	}
	td.stop() // every line is out
	log := logs.String()
	session := regexp.MustCompile(`msg="message stored" .*session=([0-9a-f]+)`).FindStringSubmatch(log)
	item := regexp.MustCompile(`msg="message queued" .*item=(\S+)`).FindStringSubmatch(log)
	if session == nil || item == nil {
		t.Fatalf("no session or queue item to follow in:\n%s", log)
	}
	if item[1] != "alice."+res.ID {
		t.Errorf("the queue id logged is %q, want alice.%s as the queue lists it", item[1], res.ID)
	}
	for _, r := range rows {
		var value string
		switch {
		case r.key == "message_id" && strings.Contains(r.label, "received"):
			value = inID
		case r.key == "message_id" && strings.Contains(r.label, "sent"):
			value = strings.Trim(res.MessageID, "<>")
		case r.key == "session":
			value = session[1]
		case r.key == "item":
			value = item[1]
		default:
			t.Errorf("docs/operations.md: row %q (-g '%s=…') is not one this test knows how to follow", r.label, r.key)
			continue
		}
		var found []string
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, r.key+"="+value) {
				found = append(found, line)
			}
		}
		for _, msg := range r.msgs {
			if !strings.Contains(strings.Join(found, "\n"), `msg="`+msg+`"`) {
				t.Errorf("%s: -g '%s=%s' finds no msg=%q; it finds:\n%s", r.label, r.key, value, msg, strings.Join(found, "\n"))
			}
		}
	}
}

type followRow struct {
	label, key string
	msgs       []string
}

// followRows reads the table under "### Following one message".
func followRows(t *testing.T) []followRow {
	t.Helper()
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(doc), "### Following one message")
	if !ok {
		t.Fatal("docs/operations.md has no section \"Following one message\"")
	}
	cmd := regexp.MustCompile("`journalctl -u mailctl -g '([a-z_]+)=[^']*'`")
	msg := regexp.MustCompile(`msg="([^"]+)"`)
	var rows []followRow
	for _, line := range strings.Split(sec, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 5 {
			continue
		}
		m := cmd.FindStringSubmatch(cells[2])
		if m == nil {
			continue
		}
		r := followRow{label: strings.TrimSpace(cells[1]), key: m[1]}
		for _, x := range msg.FindAllStringSubmatch(cells[3], -1) {
			r.msgs = append(r.msgs, x[1])
		}
		if len(r.msgs) == 0 {
			t.Errorf("docs/operations.md: row %q names no log line", r.label)
		}
		rows = append(rows, r)
	}
	if len(rows) < 4 {
		t.Fatalf("docs/operations.md: %d rows in the table of filters, want the 4 (received, session, sent, queue item)", len(rows))
	}
	return rows
}
