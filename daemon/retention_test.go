package daemon

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/protocol"
)

// firstSeen stands for a file's ctime on a test's clock: the time the test
// recorded when it moved the file itself, else the clock's time the first
// time the daemon asks about it. The daemon asks about a message it moved
// to trash in the same run (it is past trash's cutoff too), so that is when
// it came to trash.
type firstSeen struct {
	clk  *testclock.Clock
	mu   sync.Mutex
	seen map[string]time.Time
}

func (f *firstSeen) changedAt(dir, rel string) (time.Time, error) {
	if _, err := os.Lstat(filepath.Join(dir, rel)); err != nil {
		return time.Time{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p := filepath.Join(dir, rel)
	if _, ok := f.seen[p]; !ok {
		f.seen[p] = f.clk.Now()
	}
	return f.seen[p], nil
}

// A year in a minute of retention with the defaults (trash 30 days, sent
// 365, inbox kept): 400 days of one message a day from alice to bob, bob
// throwing one away every 10 days, the retention run daily. The inbox
// keeps everything bob did not throw away; alice's sent folder keeps the
// last 365 days, what was older went to trash and, 30 days after, away;
// bob's trash keeps what he threw away in the last 30 days. Each dry run
// says exactly what the run after it does. Nothing is lost outside the
// policy.
func TestRetentionYearInAMinute(t *testing.T) {
	operatorOnly(t)
	clk := testclock.New()
	fs := &firstSeen{clk: clk, seen: map[string]time.Time{}}
	td := startDaemonWith(t, "", Options{Resolver: &resolver.Map{}, Clock: clk.Now, ChangedAt: fs.changedAt})
	td.ensureMine(t, "alice")
	td.ensureMine(t, "bob")
	total := func(mailbox, folder string) int {
		var l protocol.MessageList
		if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: mailbox, Folder: folder, Limit: 1}, &l); err != nil {
			t.Fatal(err)
		}
		return l.Total
	}
	const days = 400
	var trashedOn []int
	purged := 0
	for day := 0; day < days; day++ {
		var res protocol.SendResult
		if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "alice", To: []string{"bob@example.test"}, Subject: "daily", Body: "b"}, &res); err != nil {
			t.Fatalf("day %d: %v", day, err)
		}
		if res.Status != "delivered" {
			t.Fatalf("day %d: send %+v", day, res)
		}
		if day%10 == 9 {
			var l protocol.MessageList
			td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "bob", Limit: 1}, &l)
			if err := td.call(t, protocol.VerbMessageMove, protocol.MessageMoveArgs{Mailbox: "bob", ID: l.Messages[0].ID, To: "trash"}, nil); err != nil {
				t.Fatal(err)
			}
			fs.mu.Lock()
			fs.seen[filepath.Join(td.store.Path("bob"), "trash", l.Messages[0].ID+".md")] = clk.Now()
			fs.mu.Unlock()
			trashedOn = append(trashedOn, day)
		}
		clk.Advance(24 * time.Hour)
		var dry, run protocol.PruneResult
		if err := td.call(t, protocol.VerbMailboxPrune, protocol.MailboxPruneArgs{DryRun: true}, &dry); err != nil {
			t.Fatal(err)
		}
		if err := td.call(t, protocol.VerbMailboxPrune, protocol.MailboxPruneArgs{}, &run); err != nil {
			t.Fatal(err)
		}
		if dry.Moved != run.Moved || dry.Purged > run.Purged {
			// A dry run cannot count in trash what the run moves there first.
			t.Fatalf("day %d: the dry run said %+v, the run did %+v", day, dry, run)
		}
		purged += run.Purged
	}
	// alice's sent copies: the last 365 days stay; days 0..34 went to trash
	// at 365 days old and were removed 30 days later (days 0..4).
	if got := total("alice", "sent"); got != 365 {
		t.Errorf("alice's sent folder holds %d, want the 365 of the last 365 days", got)
	}
	aliceTrash := total("alice", "trash")
	bobTrash := total("bob", "trash")
	if aliceTrash+365+purged-(len(trashedOn)-bobTrash) != days {
		t.Errorf("alice: %d sent + %d in trash + her share of %d removed != %d sent: mail lost outside the policy", 365, aliceTrash, purged, days)
	}
	if aliceTrash < 29 || aliceTrash > 31 {
		t.Errorf("alice's trash holds %d, want the ~30 that came there in the last 30 days", aliceTrash)
	}
	// bob's inbox keeps all but what he threw away; his trash the last 30 days' worth.
	if got := total("bob", "inbox"); got != days-len(trashedOn) {
		t.Errorf("bob's inbox holds %d, want %d (inbox has no retention)", got, days-len(trashedOn))
	}
	recent := 0
	for _, d := range trashedOn {
		if d >= days-30 {
			recent++
		}
	}
	if bobTrash != recent {
		t.Errorf("bob's trash holds %d, want the %d thrown away in the last 30 days", bobTrash, recent)
	}
}

// Trash's retention counts from when a message came to trash (the file's
// ctime, set by the move), not from when it was received: a year-old
// message thrown away today stays in trash for 30 days.
func TestTrashRetentionCountsFromTheMove(t *testing.T) {
	operatorOnly(t)
	clk := testclock.New()
	clk.Advance(time.Since(clk.Now()) - 400*24*time.Hour) // a year and more ago
	td := startDaemonWith(t, "", Options{Resolver: &resolver.Map{}, Clock: clk.Now})
	td.ensureMine(t, "alice")
	addr := td.SMTPAddrs()[0]
	if err := sendSMTP(t, addr, "a@remote.test", []string{"alice@example.test"}, "From: a@remote.test\nTo: alice@example.test\nSubject: old\n\nhello\n"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Since(clk.Now())) // now
	var l protocol.MessageList
	td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "alice"}, &l)
	if err := td.call(t, protocol.VerbMessageMove, protocol.MessageMoveArgs{Mailbox: "alice", ID: l.Messages[0].ID, To: "trash"}, nil); err != nil {
		t.Fatal(err)
	}
	var res protocol.PruneResult
	if err := td.call(t, protocol.VerbMailboxPrune, protocol.MailboxPruneArgs{Mailbox: "alice"}, &res); err != nil || res.Purged != 0 {
		t.Fatalf("a message thrown away just now was removed: %+v %v", res, err)
	}
	clk.Advance(31 * 24 * time.Hour)
	if err := td.call(t, protocol.VerbMailboxPrune, protocol.MailboxPruneArgs{Mailbox: "alice", DryRun: true}, &res); err != nil || res.Purged != 1 || !res.DryRun {
		t.Fatalf("dry run 31 days later: %+v %v", res, err)
	}
	if err := td.call(t, protocol.VerbMailboxPrune, protocol.MailboxPruneArgs{Mailbox: "alice"}, &res); err != nil || res.Purged != 1 {
		t.Fatalf("31 days later: %+v %v", res, err)
	}
	if _, err := os.Stat(filepath.Join(td.store.Path("alice"), "trash", l.Messages[0].ID+".md")); !os.IsNotExist(err) {
		t.Errorf("the message is still in trash: %v", err)
	}
}

// Junk has a retention of its own (30 days by default): what a DMARC
// quarantine or a blocklist put there, and nobody took out, goes to trash
// a month after it came; what came lately stays.
func TestJunkRetentionByDefault(t *testing.T) {
	operatorOnly(t)
	clk := testclock.New()
	clk.Advance(time.Since(clk.Now()) - 40*24*time.Hour)
	td := startDaemonWith(t, "", Options{Resolver: &resolver.Map{}, Clock: clk.Now})
	if got := td.cfg.Storage.Retention["junk"].Duration; got != 30*24*time.Hour {
		t.Fatalf("junk's default retention is %v, want 30 days", got)
	}
	td.ensureMine(t, "alice")
	addr := td.SMTPAddrs()[0]
	junk := func(subject string) string {
		t.Helper()
		if err := sendSMTP(t, addr, "a@remote.test", []string{"alice@example.test"}, "From: a@remote.test\nTo: alice@example.test\nSubject: "+subject+"\n\nbuy\n"); err != nil {
			t.Fatal(err)
		}
		var l protocol.MessageList
		td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "alice", Limit: 1}, &l)
		if err := td.call(t, protocol.VerbMessageMove, protocol.MessageMoveArgs{Mailbox: "alice", ID: l.Messages[0].ID, To: protocol.FolderJunk}, nil); err != nil {
			t.Fatal(err)
		}
		return l.Messages[0].ID
	}
	old := junk("forty days old")
	clk.Advance(time.Since(clk.Now()))
	recent := junk("today")
	var res protocol.PruneResult
	if err := td.call(t, protocol.VerbMailboxPrune, protocol.MailboxPruneArgs{Mailbox: "alice"}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Moved != 1 || len(res.Rows) != 1 || res.Rows[0].Folder != protocol.FolderJunk || res.Rows[0].Action != "move_to_trash" {
		t.Fatalf("prune: %+v, want the old junk message moved to trash", res)
	}
	for id, folder := range map[string]string{old: "trash", recent: "junk"} {
		if _, err := os.Stat(filepath.Join(td.store.Path("alice"), folder, id+".md")); err != nil {
			t.Errorf("%s is not in %s: %v", id, folder, err)
		}
	}
}
