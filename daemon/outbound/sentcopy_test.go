package outbound

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/dkim"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// A send whose first attempt ends before the answer writes its sent copy
// once, with the outcome in it: no copy that says "pending" to be
// rewritten a moment later.
func TestSentCopyWrittenOnce(t *testing.T) {
	w := newWorld(t)
	w.r.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	w.r.SetIP("mx.remote.test", "127.0.0.73")
	w.mx(t, "127.0.0.73")
	st := newMemStore()
	svc := w.pipeline(t, &Recorder{Store: st}, &Service{Keys: func() []*dkim.Key { return testKeys(t) }, FirstAttemptWait: 10 * time.Second}, queue.Options{})
	res, err := svc.Send(context.Background(), SendRequest{Mailbox: "bot", FromAddress: "bot@example.com", Policy: defaultPolicy(),
		Args: protocol.SendArgs{To: []string{"bob@remote.test"}, Subject: "once", Body: "hello"}})
	if err != nil || res.Status != queue.StatusDelivered {
		t.Fatalf("send: %+v %v", res, err)
	}
	m, body, err := st.Get("bot", protocol.FolderSent, res.ID)
	if err != nil || m.DeliveryStatus != queue.StatusDelivered || body != "hello\n" && body != "hello" {
		t.Fatalf("sent copy: %+v %q %v", m, body, err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.creates != 1 || st.updates != 0 {
		t.Fatalf("the sent copy was written %d times and rewritten %d times, want once and never", st.creates, st.updates)
	}
}

// A held send answers with its sent copy in place, saying held.
func TestSentCopyOfHeldSendBeforeAnswer(t *testing.T) {
	w := newWorld(t)
	st := newMemStore()
	svc := w.pipeline(t, &Recorder{Store: st}, &Service{FirstAttemptWait: 10 * time.Second}, queue.Options{})
	pol := defaultPolicy()
	hold := true
	pol.Hold = &hold
	res, err := svc.Send(context.Background(), SendRequest{Mailbox: "bot", FromAddress: "bot@example.com", Policy: pol,
		Args: protocol.SendArgs{To: []string{"bob@remote.test"}, Subject: "held", Body: "wait"}})
	if err != nil || res.Status != queue.StatusHeld {
		t.Fatalf("send: %+v %v", res, err)
	}
	m, _, err := st.Get("bot", protocol.FolderSent, res.ID)
	if err != nil || m.DeliveryStatus != queue.StatusHeld {
		t.Fatalf("sent copy of a held send: %+v %v", m, err)
	}
}

// The daemon dies after queueing a send and before writing its sent copy:
// the next start writes the copy from the queue's journal, so the message
// and its copy cannot part.
func TestSentCopyWrittenAfterCrashBeforeIt(t *testing.T) {
	st := botStore(t)
	qdir := t.TempDir()
	w := newWorld(t)
	m := &store.Message{MessageID: "crash@example.com", From: "bot@example.com", To: []string{"bob@remote.test"}, Subject: "crash",
		Outbound: true, Read: true, Mailbox: "bot", Trusted: string(protocol.NoPolicy)}
	sentID, release, err := st.Reserve("bot", protocol.FolderSent, m)
	if err != nil {
		t.Fatal(err)
	}
	release() // the process that reserved it is gone
	cp, err := encodeCopy(sentCopy{Message: m, Body: "from the journal", Attachments: []store.AttachmentData{{Filename: "a.txt", ContentType: "text/plain", Data: []byte("att")}}})
	if err != nil {
		t.Fatal(err)
	}
	raw := []byte("From: bot@example.com\r\nTo: bob@remote.test\r\nSubject: crash\r\n\r\nfrom the journal\r\n")
	// The process dies once the journal record is durable, before the
	// Recorder hears of the item: its notifier does nothing.
	q1, err := queue.Open(qdir, w.d, diedBeforeCopy{}, queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	it := &queue.Item{ID: QueueID("bot", sentID), Mailbox: "bot", SentID: sentID, MessageID: m.MessageID, MailFrom: "bot@example.com",
		Recipients: []protocol.RecipientStatus{{Address: "bob@remote.test"}}, Held: true, Data: raw, Copy: cp}
	if err := q1.Enqueue(it); err != nil {
		t.Fatal(err)
	}
	q1.Close() // killed before the sent copy was written
	if st.Has("bot", protocol.FolderSent, sentID) {
		t.Fatal("the sent copy exists before the restart")
	}

	q2, err := queue.Open(qdir, w.d, &Recorder{Store: st}, queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q2.Run(ctx); close(done) }()
	defer func() { cancel(); testwait.Recv(t, "the queue to stop", done) }()
	testwait.For(t, "the sent copy written from the journal", func() bool { return st.Has("bot", protocol.FolderSent, sentID) })
	got, body, err := st.Get("bot", protocol.FolderSent, sentID)
	if err != nil || got.DeliveryStatus != queue.StatusHeld || got.MessageID != m.MessageID || body != "from the journal" || len(got.Attachments) != 1 {
		t.Fatalf("restored sent copy: %+v %q %v", got, body, err)
	}
	if eml, err := st.Raw("bot", protocol.FolderSent, sentID, 1<<20); err != nil || string(eml) != string(raw) {
		t.Fatalf("restored raw copy: %q %v", eml, err)
	}
}

// diedBeforeCopy is the notifier of a process that dies as soon as an item
// is queued.
type diedBeforeCopy struct{}

func (diedBeforeCopy) Queued(*queue.Item)  {}
func (diedBeforeCopy) Updated(*queue.Item) {}
func (diedBeforeCopy) Settled(*queue.Item) {}

// lateAttempt sends with wait_ms 1 to an MX that holds DATA until the test
// lets it go, so the send is answered before its first attempt ends. It
// returns the store, the answer, the MX's gate and a channel that receives
// each state the Recorder records.
func lateAttempt(t *testing.T) (*store.Store, protocol.SendResult, chan<- struct{}, <-chan string) {
	t.Helper()
	st := botStore(t)
	w := newWorld(t)
	w.r.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	w.r.SetIP("mx.remote.test", "127.0.0.74")
	gate := w.mx(t, "127.0.0.74").Gate()
	states := make(chan string, 8)
	rec := &Recorder{Store: st, OnUpdated: func(_, _, _ string, res protocol.SendResult) { states <- res.Status }, SentCopyDelay: time.Hour}
	svc := w.pipeline(t, rec, &Service{FirstAttemptWait: 10 * time.Second}, queue.Options{})
	res, err := svc.Send(context.Background(), SendRequest{Mailbox: "bot", FromAddress: "bot@example.com", Policy: defaultPolicy(),
		Args: protocol.SendArgs{To: []string{"bob@remote.test"}, Subject: "late", Body: "hello", WaitMS: 1}})
	if err != nil || res.Status == queue.StatusDelivered {
		t.Fatalf("send: %+v %v", res, err)
	}
	t.Cleanup(func() {
		select {
		case gate <- struct{}{}:
		default:
		}
	})
	return st, res, gate, states
}

func sentFile(st *store.Store, id string) string {
	return filepath.Join(st.Root(), "bot", protocol.FolderSent, id+".md")
}

// A send answered before its first attempt ends writes its sent copy once,
// when the attempt ends, with the outcome: the file is not there in between,
// so the copy is never written as pending and replaced.
func TestSentCopyOfALateAttemptWrittenOnce(t *testing.T) {
	st, res, gate, states := lateAttempt(t)
	if _, err := os.Lstat(sentFile(st, res.ID)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the sent copy is on disk before its attempt ended: %v", err)
	}
	if !st.Has("bot", protocol.FolderSent, res.ID) {
		t.Fatal("the store does not know the sent copy")
	}
	gate <- struct{}{}
	for s := range states {
		if s == queue.StatusDelivered {
			break
		}
	}
	data, err := os.ReadFile(sentFile(st, res.ID))
	if err != nil || !strings.Contains(string(data), `delivery_status = "delivered"`) {
		t.Fatalf("the sent copy after the attempt: %v\n%s", err, data)
	}
}

// Read before the attempt ends, the sent copy is there with the state of
// the answer, and is updated when the attempt ends.
func TestSentCopyOfALateAttemptReadMeanwhile(t *testing.T) {
	st, res, gate, states := lateAttempt(t)
	m, body, err := st.Get("bot", protocol.FolderSent, res.ID)
	if err != nil || m.DeliveryStatus != queue.StatusPending || !strings.Contains(body, "hello") {
		t.Fatalf("the sent copy read before the attempt ended: %+v %q %v (answer %q)", m, body, err, res.Status)
	}
	if _, err := os.Lstat(sentFile(st, res.ID)); err != nil {
		t.Fatalf("read through the store, the sent copy is still not on disk: %v", err)
	}
	gate <- struct{}{}
	for s := range states {
		if s == queue.StatusDelivered {
			break
		}
	}
	if m, _, err := st.Get("bot", protocol.FolderSent, res.ID); err != nil || m.DeliveryStatus != queue.StatusDelivered {
		t.Fatalf("the sent copy after the attempt: %+v %v", m, err)
	}
}

// TestSentCopyGoesOnlyToTheMailboxThatSent: the Recorder checks that an
// item's mailbox is still the one that queued it, then writes the item's
// sent copy by name: as a new item's copy (Queued), from the journal when
// the copy is missing (Updated), or at a restart (Restore). Right after the
// check, the mailbox is deleted and made again under its name (by anyone).
// The copy, the first mailbox's mail, must not appear in the new mailbox,
// and the item's state must not change a message of the new mailbox that
// has the copy's id (its owner may make one).
func TestSentCopyGoesOnlyToTheMailboxThatSent(t *testing.T) {
	for _, path := range []string{"queued", "updated", "restore", "updated over one of that id"} {
		st := botStore(t)
		m := &store.Message{MessageID: path + "@example.com", From: "bot@example.com", To: []string{"bob@remote.test"}, Subject: "the first owner's",
			Outbound: true, Read: true, Mailbox: "bot", Trusted: string(protocol.NoPolicy)}
		sentID, release, err := st.Reserve("bot", protocol.FolderSent, m)
		if err != nil {
			t.Fatal(err)
		}
		release()
		cp, err := encodeCopy(sentCopy{Message: m, Body: "the first owner's words"})
		if err != nil {
			t.Fatal(err)
		}
		raw := []byte("From: bot@example.com\r\nTo: bob@remote.test\r\nSubject: the first owner's\r\n\r\nthe first owner's words\r\n")
		it := &queue.Item{ID: QueueID("bot", sentID), Mailbox: "bot", MailboxID: "bot-first", SentID: sentID, MessageID: m.MessageID,
			MailFrom: "bot@example.com", Recipients: []protocol.RecipientStatus{{Address: "bob@remote.test", Status: queue.StatusDelivered}},
			Data: raw, Size: int64(len(raw)), Copy: cp, CopySize: int64(len(cp)),
			ReadCopy: func() ([]byte, error) { return cp, nil }, ReadMessage: func() ([]byte, error) { return raw, nil }}
		checked := false
		r := &Recorder{Store: st, SentCopyDelay: time.Hour, CurrentID: func(name string) string {
			if name == "bot" && !checked {
				checked = true
				// The check passes; then the name changes hands.
				if err := st.Delete("bot", true); err != nil {
					t.Fatal(err)
				}
				if _, err := st.Create("bot", os.Getuid(), os.Getgid()); err != nil {
					t.Fatal(err)
				}
				if path == "updated over one of that id" {
					own := &store.Message{MessageID: "own@example.com", Subject: "the new owner's", Mailbox: "bot"}
					if err := st.CreateUnsynced("bot", protocol.FolderSent, sentID, own, "mine", nil, nil); err != nil {
						t.Fatal(err)
					}
				}
			}
			return "bot-first"
		}}
		switch path {
		case "queued":
			r.Queued(it)
		case "updated":
			r.Updated(it)
		case "restore":
			r.Restore(it)
		case "updated over one of that id":
			r.Updated(it)
			got, _, err := st.Get("bot", protocol.FolderSent, sentID)
			if err != nil || got.Subject != "the new owner's" || got.DeliveryStatus != "" || len(got.DeliveryDetails) != 0 {
				t.Errorf("%s: the new mailbox's message of that id changed: %+v %v", path, got, err)
			}
			continue
		}
		if !checked {
			t.Fatalf("%s: the mailbox was never checked", path)
		}
		// Listing the folder writes what the store holds deferred for it.
		if st.Has("bot", protocol.FolderSent, sentID) {
			t.Errorf("%s: the sent copy of the mailbox deleted after the check is in the mailbox made since under its name", path)
		}
		l, err := st.List("bot", protocol.FolderSent, store.Query{})
		if err != nil {
			t.Fatal(err)
		}
		for _, got := range l.Items {
			t.Errorf("%s: the new mailbox has %q", path, got.Subject)
		}
	}
}
