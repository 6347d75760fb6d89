package doctor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/delivery"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

type deferAll struct{}

func (deferAll) Deliver(_ context.Context, _ string, rcpts []string, _ []byte) []delivery.Result {
	return delivery.AllFailed(rcpts, &delivery.Error{Temporary: true, Code: 451, Message: "later"})
}

// doctor reads the queue journal the daemon keeps (not *.json files):
// it counts the items by state and says how old the oldest is, while the
// queue is open; a record damaged in the middle is a failure.
func TestDoctorReadsTheQueueJournal(t *testing.T) {
	in := newInstall(t)
	now := time.Now()
	in.env.Now = func() time.Time { return now }
	q, err := queue.Open(in.cfg.Paths.QueueDir(), deferAll{}, nil, queue.Options{Clock: func() time.Time { return now.Add(-2 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for i, held := range []bool{false, true, false} {
		it := &queue.Item{ID: "bot.m" + string(rune('1'+i)), Mailbox: "bot", MailFrom: "bot@example.test", Held: held, Data: []byte("Subject: x\r\n\r\nx\r\n"),
			Recipients: []protocol.RecipientStatus{{Address: "a@remote.test"}}}
		if err := q.Enqueue(it); err != nil {
			t.Fatal(err)
		}
	}
	find := func(id string) *protocol.Finding {
		for _, f := range in.check(t) {
			if f.ID == id {
				return &f
			}
		}
		return nil
	}
	f := find("queue.ok")
	if f == nil || !strings.Contains(f.Message, "3 item(s) in the queue: 1 held, 2 pending; the oldest queued 2h0m0s ago") {
		t.Fatalf("queue finding: %+v", f)
	}
	// A byte flipped inside the first record: the items after it would be
	// lost at the next start, which doctor says now.
	path := filepath.Join(in.cfg.Paths.QueueDir(), "journal")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[40] ^= 0xff
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if f := find("queue.damaged"); f == nil || f.Severity != Fail || !strings.Contains(f.Message, "fails its checks") {
		t.Fatalf("damaged journal: %+v", f)
	}
}

// blockAll holds every attempt until release is closed.
type blockAll struct{ started, release chan struct{} }

func (b blockAll) Deliver(ctx context.Context, _ string, rcpts []string, _ []byte) []delivery.Result {
	close(b.started) // one attempt only
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return delivery.AllFailed(rcpts, &delivery.Error{Temporary: true, Code: 451, Message: "later"})
}

// TestDoctorCountsItemsToBeDroppedApart: an item whose mailbox was deleted
// while an attempt was delivering it is marked to be dropped when the
// attempt ends (or at the daemon's next start). doctor used to count it as
// mail in the queue; it says apart that it is to be dropped.
func TestDoctorCountsItemsToBeDroppedApart(t *testing.T) {
	in := newInstall(t)
	now := time.Now()
	in.env.Now = func() time.Time { return now }
	d := blockAll{started: make(chan struct{}), release: make(chan struct{})}
	q, err := queue.Open(in.cfg.Paths.QueueDir(), d, nil, queue.Options{Clock: func() time.Time { return now.Add(-2 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	defer func() { close(d.release); cancel(); testwait.Recv(t, "the queue to stop", done); q.Close() }()
	for _, id := range []string{"bot.held", "bot.gone"} {
		it := &queue.Item{ID: id, Mailbox: "bot", MailFrom: "bot@example.test", Held: id == "bot.held", Data: []byte("Subject: x\r\n\r\nx\r\n"),
			Recipients: []protocol.RecipientStatus{{Address: "a@remote.test"}}}
		if err := q.Enqueue(it); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Recv(t, "bot.gone to be attempted", d.started) // bot.gone is being delivered
	if err := q.DropEventually("bot.gone"); err != nil {
		t.Fatal(err)
	}
	var f *protocol.Finding
	for _, x := range in.check(t) {
		if x.ID == "queue.ok" {
			f = &x
		}
	}
	want := "1 item(s) in the queue: 1 held; the oldest queued 2h0m0s ago; 1 more to be dropped because their mailbox was deleted"
	if f == nil || !strings.Contains(f.Message, want) {
		t.Fatalf("queue finding: %+v, want %q", f, want)
	}
}
