package daemon

import (
	"net"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/mailctl/mailctl/daemon/ingest"
	"github.com/mailctl/mailctl/daemon/outbound"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/fakemx"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// A message the remote server keeps deferring warns its sender once, after
// delivery.delay_warning, with an RFC 3464 report (action delayed) in the
// inbox, recorded on the queue item; when the retry window ends the final
// bounce follows as a report of its own.
func TestDelayWarningThenBounce(t *testing.T) {
	td, clk := startDelayWarning(t, "alice")
	var res protocol.SendResult
	if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "alice", To: []string{"slow@remote.test"}, Subject: "Numbers", Body: "b"}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Status != "deferred" {
		t.Fatalf("first attempt: %+v", res)
	}
	inbox := func() []protocol.MessageSummary {
		var l protocol.MessageList
		if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "alice"}, &l); err != nil {
			t.Fatal(err)
		}
		return l.Messages
	}
	if got := inbox(); len(got) != 0 {
		t.Fatalf("a report before the delay: %+v", got)
	}
	clk.Advance(time.Hour + time.Minute)
	td.out.queue.Kick()
	var msgs []protocol.MessageSummary
	testwait.For(t, "the delay warning in alice's inbox", func() bool { msgs = inbox(); return len(msgs) > 0 })
	if len(msgs) != 1 || msgs[0].Subject != "Delayed mail (still being retried)" {
		t.Fatalf("inbox: %+v", msgs)
	}
	var raw protocol.Message
	if err := td.call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "alice", ID: msgs[0].ID, Raw: true, MaxChars: 200000}, &raw); err != nil {
		t.Fatal(err)
	}
	p, err := ingest.Parse([]byte(raw.Body), ingest.Options{})
	if err != nil || p.DSN == nil || len(p.DSN.Recipients) != 1 {
		t.Fatalf("the warning is not a DSN: %v\n%s", err, raw.Body)
	}
	if r := p.DSN.Recipients[0]; r.Action != "delayed" || r.Status != "4.2.1" || p.DSN.OriginalMessageID != res.MessageID {
		t.Fatalf("warning: %+v for %q", r, p.DSN.OriginalMessageID)
	}
	var it protocol.QueueItem
	testwait.For(t, "the warning recorded on the queue item", func() bool {
		td.call(t, protocol.VerbQueueShow, protocol.QueueIDArgs{ID: outbound.QueueID("alice", res.ID)}, &it)
		return it.DelayWarnedAt != nil
	})
	// The retry window ends: the final bounce, a second report.
	clk.Advance(3 * time.Hour)
	td.out.queue.Kick()
	testwait.For(t, "the final bounce", func() bool { msgs = inbox(); return len(msgs) == 2 })
	subjects := map[string]int{}
	for _, m := range inbox() {
		subjects[m.Subject]++
	}
	if subjects["Delayed mail (still being retried)"] != 1 || subjects["Undelivered mail returned to sender"] != 1 {
		t.Fatalf("inbox after the retry window: %v, want one warning and one bounce", subjects)
	}
}

// startDelayWarning starts a daemon on a test clock that warns of a delay
// after an hour and retries for three, with mailbox (the test's user's) and
// a fake MX for remote.test that defers slow@remote.test.
func startDelayWarning(t *testing.T, mailbox string) (*testDaemon, *testclock.Clock) {
	t.Helper()
	clk := testclock.New()
	clk.Advance(time.Since(clk.Now()))
	mx := fakemx.New(t, "127.0.0.1", nil)
	_, port, _ := net.SplitHostPort(mx.Addr)
	dns := &resolver.Map{}
	dns.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	dns.SetIP("mx.remote.test", "127.0.0.1")
	td := startDaemonWith(t, "[delivery]\nport = "+port+"\ndelay_warning = \"1h\"\nretry_for = \"3h\"\n", Options{Resolver: dns, Clock: clk.Now})
	td.ensureMine(t, mailbox)
	mx.SetRcptErr("slow@remote.test", &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 2, 1}, Message: "mailbox busy"})
	return td, clk
}
