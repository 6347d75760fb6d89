package daemon

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/smtp"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"

	"github.com/mailctl/mailctl/daemon/ingest"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/fakemx"
	"github.com/mailctl/mailctl/internal/testcert"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// A year in a minute of one daemon, on a clock the test steps a day at a
// time, without a restart: 400 days of
//
//   - a certificate renewal every 60 days (a 90-day certificate, as Let's
//     Encrypt issues them) followed by a reload: the certificate a STARTTLS
//     client is served is the new one each time, and an SMTP session opened
//     on day 0 still answers after every reload;
//   - the daily retention sweep (trash 30 days, sent 365): alice's sends
//     leave exactly the last 365 days in her sent folder;
//   - a send every 10 days to a server that defers it (451): the queue,
//     stepped after the clock, warns alice once (an RFC 3464 report, action
//     delayed; delay_warning is 4 hours) and bounces it once when its 48
//     hours are over; every other send is delivered and reports nothing;
//   - bob's mailbox, limited to 60 messages, receiving a message every other
//     day from outside and, every 100 days, a burst of 60 that fills it until
//     it answers 452 4.2.2; it drains as bob throws his inbox away every 10
//     days and the sweep empties trash 30 days later; the sender retries
//     what was refused the next day.
//
// Nothing is lost: every message an outside sender was refused is stored
// later, each once; bob's mailbox never holds more than its quota; the
// queue is empty at the end. TestQueueYearInAMinuteDelayWarnings asks the
// queue alone the same of warnings across restarts.
func TestDaemonYearInAMinute(t *testing.T) {
	operatorOnly(t)
	clk := testclock.New()
	clk.Advance(time.Since(clk.Now()))
	fs := &firstSeen{clk: clk, seen: map[string]time.Time{}}
	ca := testcert.NewCA(t)
	dir := filepath.Join(testusers.SharedDir(t), "tls")
	os.MkdirAll(dir, 0o700)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	renew := func() tls.Certificate {
		c := ca.IssueAt(t, clk.Now(), "mx.example.test")
		certPEM, keyPEM := testcert.PEM(t, c)
		// As certbot's deploy hook sees them: new files renamed into place.
		os.WriteFile(keyFile+".new", keyPEM, 0o600)
		os.Rename(keyFile+".new", keyFile)
		os.WriteFile(certFile+".new", certPEM, 0o644)
		os.Rename(certFile+".new", certFile)
		return c
	}
	cur := renew()
	mx := fakemx.New(t, "127.0.0.1", nil)
	_, port, _ := net.SplitHostPort(mx.Addr)
	mx.SetRcptErr("slow@remote.test", &gosmtp.SMTPError{Code: 451, EnhancedCode: gosmtp.EnhancedCode{4, 2, 1}, Message: "mailbox busy"})
	dns := &resolver.Map{}
	dns.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	dns.SetIP("mx.remote.test", "127.0.0.1")
	// The queue attempts only when the test steps it, after the clock.
	td := startDaemonSMTP(t, "[delivery]\nport = "+port+"\ndelay_warning = \"4h\"\nretry_for = \"48h\"\n",
		"listen = [\"127.0.0.1:0\"]\ntls_cert = \""+certFile+"\"\ntls_key = \""+keyFile+"\"\n",
		Options{Resolver: dns, Clock: clk.Now, ChangedAt: fs.changedAt, StepQueue: true})
	step := td.out.queue.Step
	for _, m := range []string{"alice", "bob", "carol"} {
		td.ensureMine(t, m)
	}
	const quota = 60
	q := int64(quota)
	if err := td.call(t, protocol.VerbMailboxUpdate, protocol.MailboxUpdateArgs{Name: "bob", QuotaMessages: &q}, nil); err != nil {
		t.Fatal(err)
	}
	addr := td.SMTPAddrs()[0]
	held, err := smtp.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := held.Hello("held.remote.test"); err != nil {
		t.Fatal(err)
	}
	total := func(mailbox, folder string) int {
		t.Helper()
		var l protocol.MessageList
		if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: mailbox, Folder: folder, Limit: 200}, &l); err != nil {
			t.Fatal(err)
		}
		return l.Total
	}

	// bob throws his inbox away; trash's retention counts from now.
	throwAway := func() {
		t.Helper()
		var l protocol.MessageList
		if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "bob", Limit: 200}, &l); err != nil {
			t.Fatal(err)
		}
		for _, m := range l.Messages {
			if err := td.call(t, protocol.VerbMessageMove, protocol.MessageMoveArgs{Mailbox: "bob", ID: m.ID, To: "trash"}, nil); err != nil {
				t.Fatal(err)
			}
			fs.mu.Lock()
			fs.seen[filepath.Join(td.store.Path("bob"), "trash", m.ID+".md")] = clk.Now()
			fs.mu.Unlock()
		}
	}
	const days = 400
	var pending []string // Message-IDs the senders were refused, to retry
	stored := map[string]int{}
	sent, refusals, renewals, purgedBob := 0, 0, 0, 0
	slow := map[string]string{} // Message-ID -> sent id of alice's sends the remote server defers
	var slowDays []int
	slowSince := func(day int) (n int) {
		for _, d := range slowDays {
			if d >= day {
				n++
			}
		}
		return n
	}
	deliver := func(mid string) bool {
		msg := fmt.Sprintf("From: s@remote.test\nTo: bob@example.test\nSubject: %s\nMessage-ID: <%s>\n\nhello\n", mid, mid)
		err := plainSMTP(addr, "s@remote.test", "bob@example.test", msg)
		if err == nil {
			stored[mid]++
			return true
		}
		if !strings.Contains(err.Error(), "452") {
			t.Fatalf("delivering %s: %v, want success or 452 (mailbox full)", mid, err)
		}
		refusals++
		return false
	}
	for day := 0; day < days; day++ {
		if day > 0 && day%60 == 0 {
			cur = renew()
			if err := td.Reload(td.cfg.File); err != nil {
				t.Fatalf("day %d: reload: %v", day, err)
			}
			renewals++
			if string(servedRaw(t, addr)) != string(cur.Leaf.Raw) {
				t.Fatalf("day %d: after the renewal and reload, STARTTLS serves another certificate than the new one", day)
			}
			if err := held.Noop(); err != nil {
				t.Fatalf("day %d: the session opened on day 0 did not survive the reload: %v", day, err)
			}
		}
		// Yesterday's refusals first, then today's mail.
		retry := pending
		pending = nil
		for _, mid := range retry {
			if !deliver(mid) {
				pending = append(pending, mid)
			}
		}
		// A message every other day, and on days 50, 150, ... a burst
		// that fills the mailbox to its quota and past it.
		n := (day + 1) % 2
		if day%100 == 50 {
			n = quota
		}
		for i := range n {
			mid := fmt.Sprintf("d%03d-%d@remote.test", day, i)
			sent++
			if !deliver(mid) {
				pending = append(pending, mid)
			}
		}
		if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "alice", To: []string{"carol@example.test"}, Subject: "daily", Body: "b", WaitMS: 1}, nil); err != nil {
			t.Fatalf("day %d: %v", day, err)
		}
		if day%10 == 3 {
			var res protocol.SendResult
			if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "alice", To: []string{"slow@remote.test"}, Subject: "slow", Body: "b", WaitMS: 1}, &res); err != nil {
				t.Fatalf("day %d: %v", day, err)
			}
			slow[res.MessageID] = res.ID
			slowDays = append(slowDays, day)
		}
		step()
		if n := total("bob", "inbox") + total("bob", "trash"); n > quota {
			t.Fatalf("day %d: bob holds %d messages, over his quota of %d", day, n, quota)
		}
		if day%10 == 9 {
			throwAway()
		}
		clk.Advance(24 * time.Hour)
		step()
		var run protocol.PruneResult
		if err := td.call(t, protocol.VerbMailboxPrune, protocol.MailboxPruneArgs{Mailbox: "bob"}, &run); err != nil {
			t.Fatal(err)
		}
		purgedBob += run.Purged
		if err := td.call(t, protocol.VerbMailboxPrune, protocol.MailboxPruneArgs{Mailbox: "alice"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// The last of it: bob empties his inbox, a month passes, the sweep
	// runs, and the senders retry what is still refused.
	throwAway()
	for len(pending) > 0 {
		clk.Advance(31 * 24 * time.Hour)
		var run protocol.PruneResult
		td.call(t, protocol.VerbMailboxPrune, protocol.MailboxPruneArgs{Mailbox: "bob"}, &run)
		purgedBob += run.Purged
		retry := pending
		pending = nil
		for _, mid := range retry {
			if !deliver(mid) {
				pending = append(pending, mid)
			}
		}
		if len(pending) == len(retry) {
			t.Fatalf("%d message(s) still refused with bob's mailbox emptied: lost", len(pending))
		}
		throwAway()
	}

	if refusals == 0 {
		t.Error("bob's mailbox never filled: the quota was not reached")
	}
	if renewals != days/60 {
		t.Errorf("%d renewals, want %d", renewals, days/60)
	}
	for mid, n := range stored {
		if n != 1 {
			t.Errorf("%s was stored %d times", mid, n)
		}
	}
	if len(stored) != sent {
		t.Errorf("%d of %d messages stored: lost", len(stored), sent)
	}
	if got := total("bob", "inbox") + total("bob", "trash") + purgedBob; got != sent {
		t.Errorf("bob: inbox + trash + purged by the sweep = %d, want the %d delivered", got, sent)
	}
	// The sends of the last 365 days: one to carol a day, and the
	// deferred ones of days 43, 53, ... 393.
	if got, want := total("alice", "sent"), 365+slowSince(days-365); got != want {
		t.Errorf("alice's sent folder holds %d, want the %d of the last 365 days", got, want)
	}
	if got := total("carol", "inbox"); got != days {
		t.Errorf("carol's inbox holds %d, want %d (inbox has no retention)", got, days)
	}
	if err := held.Noop(); err != nil {
		t.Errorf("the session opened on day 0 did not last the year: %v", err)
	}
	// Each deferred send warned alice once (action delayed), then bounced
	// once when its 48 hours ran out; her sent copy says failed.
	reports := map[string]map[string]int{}
	var inbox protocol.MessageList
	for off := 0; ; off += 200 {
		var page protocol.MessageList
		if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "alice", Limit: 200, Offset: off}, &page); err != nil {
			t.Fatal(err)
		}
		inbox.Messages = append(inbox.Messages, page.Messages...)
		if !page.HasMore {
			break
		}
	}
	for _, m := range inbox.Messages {
		var raw protocol.Message
		if err := td.call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "alice", ID: m.ID, Raw: true, MaxChars: 200000}, &raw); err != nil {
			t.Fatal(err)
		}
		p, err := ingest.Parse([]byte(raw.Body), ingest.Options{})
		if err != nil || p.DSN == nil || len(p.DSN.Recipients) != 1 {
			t.Fatalf("alice's inbox holds %q, not a report: %v", m.Subject, err)
		}
		mid := p.DSN.OriginalMessageID
		if reports[mid] == nil {
			reports[mid] = map[string]int{}
		}
		reports[mid][p.DSN.Recipients[0].Action]++
	}
	if len(slow) != days/10 {
		t.Fatalf("%d deferred sends, want %d", len(slow), days/10)
	}
	for mid, id := range slow {
		if r := reports[mid]; r["delayed"] != 1 || r["failed"] != 1 || len(r) != 2 {
			t.Errorf("send %s: reports %v, want one delayed and one failed", mid, r)
		}
		var st protocol.SendResult
		if err := td.call(t, protocol.VerbSendStatus, protocol.SendStatusArgs{Mailbox: "alice", ID: id}, &st); err != nil || st.Status != "failed" {
			t.Errorf("send %s: status %q (%v), want failed", mid, st.Status, err)
		}
	}
	if len(reports) != len(slow) {
		t.Errorf("reports about %d sends, want only the %d deferred ones", len(reports), len(slow))
	}
	if left := td.out.queue.List(); len(left) != 0 {
		t.Errorf("%d item(s) still queued after the year", len(left))
	}
	t.Logf("%d days: %d renewals, %d messages to bob (%d refusals while full, all stored later), %d purged from his trash, %d deferred sends warned and bounced once each",
		days, renewals, sent, refusals, purgedBob, len(slow))
}
