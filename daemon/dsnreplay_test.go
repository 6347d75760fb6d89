package daemon

import (
	"bytes"
	"context"
	"net"
	nsmtp "net/smtp"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/protocol"
)

// An authentic bounce applies once. The very report sent again to the
// message's return path, from another envelope sender or through another
// relay (a Received header of its own), is a replay: it is answered 250 and
// changes nothing: the sent copy is not rewritten, no delivery_status event
// goes out and no second copy reaches the inbox. A different report about
// the same recipient that says what the copy records changes no state and
// sends no event; one that says something new is applied.
func TestReplayedBounceChangesNothing(t *testing.T) {
	mx := startFakeMX(t)
	_, port, _ := net.SplitHostPort(mx.addr)
	td, addr, dns := startInbound(t, "[delivery]\nport = "+port+"\n")
	dns.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	dns.SetIP("mx.remote.test", "127.0.0.1")
	td.ensureMine(t, "alice")
	var res protocol.SendResult
	if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "alice", To: []string{"gone@remote.test"}, Subject: "hi", Body: "b"}, &res); err != nil {
		t.Fatal(err)
	}
	mx.mu.Lock()
	returnPath := mx.msgs[len(mx.msgs)-1].from
	mx.mu.Unlock()
	report := func(id, status string) string {
		return "From: MAILER-DAEMON@remote.test\r\nTo: " + returnPath + "\r\nSubject: Undelivered Mail Returned to Sender\r\n" +
			"Message-ID: <" + id + "@remote.test>\r\nMIME-Version: 1.0\r\n" +
			"Content-Type: multipart/report; report-type=delivery-status; boundary=\"b1\"\r\n\r\n" +
			"--b1\r\nContent-Type: text/plain\r\n\r\nYour message could not be delivered.\r\n" +
			"--b1\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; mx.remote.test\r\n\r\n" +
			"Final-Recipient: rfc822; gone@remote.test\r\nAction: failed\r\nStatus: " + status + "\r\nDiagnostic-Code: smtp; 550 " + status + " user unknown\r\n" +
			"--b1\r\nContent-Type: text/rfc822-headers\r\n\r\nMessage-ID: <" + res.MessageID + ">\r\nSubject: hi\r\n" +
			"--b1--\r\n"
	}
	sentFile := filepath.Join(td.store.Path("alice"), protocol.FolderSent, res.ID+".md")
	sentCopy := func() ([]byte, os.FileInfo) {
		t.Helper()
		b, err := os.ReadFile(sentFile)
		fi, serr := os.Stat(sentFile)
		if err != nil || serr != nil {
			t.Fatal(err, serr)
		}
		return b, fi
	}
	reports := func() int {
		t.Helper()
		var l protocol.MessageList
		if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "alice", Subject: "Undelivered"}, &l); err != nil {
			t.Fatal(err)
		}
		return len(l.Messages)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := protocol.Dial(ctx, td.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	events, err := c.Watch(ctx, protocol.WatchArgs{Mailboxes: []string{"alice"}})
	if err != nil {
		t.Fatal(err)
	}
	// statusEvents counts the delivery_status events before the new_mail
	// event of a marker message sent last: events come in order, so what
	// the steps before caused has been seen by then.
	marker := 0
	statusEvents := func() int {
		t.Helper()
		marker++
		subject := "marker " + string(rune('0'+marker))
		if err := nsmtp.SendMail(addr, nil, "friend@remote.test", []string{"alice@example.test"},
			[]byte("From: friend@remote.test\r\nTo: alice@example.test\r\nSubject: "+subject+"\r\n\r\nx\r\n")); err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			select {
			case ev := <-events:
				if ev.Type == protocol.EventDeliveryStatus {
					n++
				}
				if ev.Type == protocol.EventNewMail && ev.Message != nil && ev.Message.Subject == subject {
					return n
				}
			case <-ctx.Done():
				t.Fatalf("no event for %q", subject)
			}
		}
	}

	first := report("bounce1", "5.1.1")
	if err := nsmtp.SendMail(addr, nil, "", []string{returnPath}, []byte(first)); err != nil {
		t.Fatal(err)
	}
	if n := statusEvents(); n != 1 {
		t.Fatalf("the first report: %d delivery_status events, want 1", n)
	}
	before, beforeInfo := sentCopy()
	if !bytes.Contains(before, []byte(`status = "bounced"`)) || reports() != 1 {
		t.Fatalf("the first report was not applied and kept:\n%s", before)
	}

	// The replays: another envelope sender; then another relay's trace header on top.
	for i, replay := range []struct{ from, msg string }{
		{"attacker@evil.test", first},
		{"other@evil.test", "Received: from relay.evil.test by mx.evil.test; Mon, 2 Mar 2026 10:00:00 +0000\r\n" + first},
	} {
		if err := nsmtp.SendMail(addr, nil, replay.from, []string{returnPath}, []byte(replay.msg)); err != nil {
			t.Fatalf("replay %d: %v, want it accepted", i, err)
		}
		if n := statusEvents(); n != 0 {
			t.Errorf("replay %d: %d delivery_status events, want none", i, n)
		}
		after, afterInfo := sentCopy()
		if !bytes.Equal(after, before) || !afterInfo.ModTime().Equal(beforeInfo.ModTime()) || !os.SameFile(afterInfo, beforeInfo) {
			t.Errorf("replay %d rewrote the sent copy:\n%s", i, after)
		}
		if n := reports(); n != 1 {
			t.Errorf("replay %d: %d reports in the inbox, want the first one only", i, n)
		}
	}

	// Another report saying the same: kept as mail, no state change, no event.
	if err := nsmtp.SendMail(addr, nil, "", []string{returnPath}, []byte(report("bounce2", "5.1.1"))); err != nil {
		t.Fatal(err)
	}
	if n := statusEvents(); n != 0 {
		t.Errorf("a second report saying the same: %d delivery_status events, want none", n)
	}
	same, _ := sentCopy()
	if !bytes.Contains(same, []byte("5.1.1 user unknown")) || reports() != 2 {
		t.Errorf("the second report: %d in the inbox; sent copy:\n%s", reports(), same)
	}
	// A report saying something new is applied.
	if err := nsmtp.SendMail(addr, nil, "", []string{returnPath}, []byte(report("bounce3", "5.2.1"))); err != nil {
		t.Fatal(err)
	}
	if n := statusEvents(); n != 1 {
		t.Errorf("a new report: %d delivery_status events, want 1", n)
	}
	if now, _ := sentCopy(); !strings.Contains(string(now), "5.2.1 user unknown") {
		t.Errorf("the new report was not applied:\n%s", now)
	}
}
