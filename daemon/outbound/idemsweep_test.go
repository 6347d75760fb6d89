package outbound

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

const day = 24 * time.Hour

// keyWorld is a send pipeline of the mailbox bot (identity mb1) that
// captures every message, on a clock the test moves.
type keyWorld struct {
	clk *testclock.Clock
	q   *queue.Queue
	svc *Service
}

func newKeyWorld(t *testing.T) *keyWorld {
	t.Helper()
	clk := testclock.New()
	rec := &Recorder{Store: botStore(t), Clock: clk.Now, CurrentID: func(string) string { return "mb1" }}
	q, err := queue.Open(t.TempDir(), captureAll{}, rec, queue.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	runQueue(t, q)
	return &keyWorld{clk: clk, q: q, svc: &Service{Domain: func() string { return "example.com" }, Sent: rec, Queue: q, FirstAttemptWait: 10 * time.Second}}
}

func (w *keyWorld) request(key string, at *time.Time) SendRequest {
	return SendRequest{Mailbox: "bot", MailboxID: "mb1", FromAddress: "bot@example.com", Policy: defaultPolicy(),
		Args: protocol.SendArgs{To: []string{"x@remote.test"}, Subject: "s", Body: "b", IdempotencyKey: key, SendAt: at}}
}

func (w *keyWorld) send(t *testing.T, key string, at *time.Time) protocol.SendResult {
	t.Helper()
	res, err := w.svc.Send(context.Background(), w.request(key, at))
	if err != nil {
		t.Fatalf("send with key %s: %v", key, err)
	}
	return res
}

// records names the records in the directory.
func (w *keyWorld) records(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(w.q.Dir(), queue.IdempotencyDir))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if !safeio.IsTemp(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// sweep runs passes of at most limit entries until one reaches the end.
func (w *keyWorld) sweep(t *testing.T, limit int) {
	t.Helper()
	for {
		res, err := w.svc.SweepKeys(limit)
		if err != nil {
			t.Fatal(err)
		}
		if res.Examined > limit {
			t.Fatalf("a pass read %d entries, over its limit of %d", res.Examined, limit)
		}
		if !res.More {
			return
		}
	}
}

// TestIdempotencyKeysAYearInAMinute: a year of sends, one a day with a
// fresh key, and the sweep daily in passes of a few entries. After each
// sweep the directory holds exactly the records of the last 30 days (the
// default window), the one key whose message is still scheduled, and
// nothing else: without the sweep it would hold a record for every send
// ever made. A retry within the window is answered with the first
// message; a retry at the window's end, before any sweep, is a new send;
// the scheduled message's key is remembered past the window until the
// message has gone.
func TestIdempotencyKeysAYearInAMinute(t *testing.T) {
	w := newKeyWorld(t)
	start := w.clk.Now()
	made := map[string]time.Time{} // key → when its record was made
	ids := map[string]string{}     // key → the sent id it answers with
	note := func(key string, res protocol.SendResult) {
		if !res.Duplicate {
			made[key], ids[key] = w.clk.Now(), res.ID
		}
	}
	sendAt := start.Add(60 * day)
	sched := w.send(t, "scheduled", &sendAt)
	note("scheduled", sched)
	schedGone := false
	for d := range 366 {
		key := fmt.Sprintf("day-%d", d)
		note(key, w.send(t, key, nil))
		if d >= 29 && d%10 == 0 {
			old := fmt.Sprintf("day-%d", d-29) // made 29 days ago
			if res := w.send(t, old, nil); !res.Duplicate || res.ID != ids[old] {
				t.Fatalf("day %d: a retry of %s within the window: duplicate %v, id %s; want %s again", d, old, res.Duplicate, res.ID, ids[old])
			}
		}
		if d == 45 {
			if res := w.send(t, "scheduled", &sendAt); !res.Duplicate || res.ID != sched.ID {
				t.Fatalf("day %d: a retry of the scheduled send past the window while it waits: duplicate %v, id %s; want %s again", d, res.Duplicate, res.ID, sched.ID)
			}
		}
		w.clk.Advance(day)
		if !schedGone && !w.clk.Now().Before(sendAt) {
			w.q.Kick()
			id := QueueID("bot", sched.ID)
			testwait.For(t, "the scheduled message goes", func() bool {
				it, err := w.q.Get(id)
				return err == nil && it.Settled()
			})
			schedGone = true
		}
		if d >= 30 && d%10 == 5 {
			// Exactly 30 days old, and not swept yet.
			old := fmt.Sprintf("day-%d", d-29)
			res := w.send(t, old, nil)
			if res.Duplicate {
				t.Fatalf("day %d: a retry of %s at the end of the window answered with its first message", d, old)
			}
			note(old, res)
		}
		w.sweep(t, 7)
		for k, at := range made {
			if w.clk.Now().Sub(at) >= DefaultKeyWindow && (k != "scheduled" || schedGone) {
				delete(made, k)
			}
		}
		var want []string
		for k := range made {
			want = append(want, queue.IdempotencyFile("bot", "mb1", k))
		}
		got := w.records(t)
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("day %d: the records are %d, want the %d of the last 30 days and of a message still queued:\n got %v\nwant %v", d, len(got), len(want), got, want)
		}
	}
	if len(made) < 30 || len(made) > 32 {
		t.Errorf("%d records at the end of the year, want about 30", len(made))
	}
}

// TestSweepPassesAreBounded: a pass reads at most its limit of entries
// and the next goes on from there, so a large directory is gone through
// in steps; every expired record goes, once, and damaged files as old
// go too; files being written (temporary names) stay.
func TestSweepPassesAreBounded(t *testing.T) {
	w := newKeyWorld(t)
	dir := filepath.Join(w.q.Dir(), queue.IdempotencyDir)
	os.MkdirAll(dir, 0o700)
	const n = 500
	for i := range n {
		r := idemRecord{SentID: fmt.Sprintf("id%d", i), Created: w.clk.Now(), Mailbox: "bot", MailboxID: "mb1", Key: fmt.Sprint(i)}
		if err := w.svc.remember(w.request(r.Key, nil), r); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "damaged.json"), []byte("{"), 0o600)
	// Dated by its file, on the clock the daemon reads (the wall clock
	// outside tests).
	old := w.clk.Now().Add(-day)
	os.Chtimes(filepath.Join(dir, "damaged.json"), old, old)
	temp := filepath.Join(dir, safeio.TempPrefix+"x.json-1")
	os.WriteFile(temp, nil, 0o600)
	w.clk.Advance(DefaultKeyWindow)
	passes, removed := 0, 0
	for {
		res, err := w.svc.SweepKeys(64)
		if err != nil {
			t.Fatal(err)
		}
		if res.Examined > 64 {
			t.Fatalf("a pass read %d entries, over its limit of 64", res.Examined)
		}
		passes++
		removed += res.Removed
		if !res.More {
			break
		}
	}
	if passes < (n+2)/64 || removed != n+1 {
		t.Errorf("%d passes removed %d; want %d records and the damaged file removed in passes of 64", passes, removed, n+1)
	}
	if got := w.records(t); len(got) != 0 {
		t.Errorf("%d files left after the sweep", len(got))
	}
	if _, err := os.Stat(temp); err != nil {
		t.Errorf("the sweep removed a file being written: %v", err)
	}
}

// TestSweepSkipsARecordASendHolds: a send holds its key's record from its
// claim until it has written the record (or given up). An expired record
// held so is left for a later pass: were it read and removed meanwhile,
// the removal could take away the record the send has just written, and a
// retry of that send would make a second message.
func TestSweepSkipsARecordASendHolds(t *testing.T) {
	w := newKeyWorld(t)
	first := w.send(t, "k", nil)
	w.clk.Advance(DefaultKeyWindow)
	release, err := w.svc.hold(context.Background(), w.svc.idemPath(w.request("k", nil)))
	if err != nil {
		t.Fatal(err)
	}
	w.sweep(t, 100)
	if got := w.records(t); len(got) != 1 {
		t.Fatalf("the sweep removed a record a send held: %v", got)
	}
	release()
	w.sweep(t, 100)
	if got := w.records(t); len(got) != 0 {
		t.Fatalf("the expired record stays once free: %v", got)
	}
	if res := w.send(t, "k", nil); res.Duplicate || res.ID == first.ID {
		t.Errorf("the key after its record expired answered with the first message %s", first.ID)
	}
}

// TestSendWaitsForTheSweepOfItsKey: while the sweep holds an expired
// record, about to remove it, a send with its key waits (here, with its
// time already up, it is refused at once) instead of sending and writing
// a record the sweep then removes. Once the sweep is done the key makes a
// new send, whose record stays.
func TestSendWaitsForTheSweepOfItsKey(t *testing.T) {
	w := newKeyWorld(t)
	w.send(t, "k", nil)
	w.clk.Advance(DefaultKeyWindow)
	queued := len(w.q.List())
	var during error
	removeRecord = func(path string) error {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, during = w.svc.Send(ctx, w.request("k", nil))
		return os.Remove(path)
	}
	t.Cleanup(func() { removeRecord = os.Remove })
	w.sweep(t, 100)
	removeRecord = os.Remove
	if protocol.CodeOf(during) != protocol.CodeTimeout {
		t.Errorf("a send of the key the sweep is removing: %v, want it to wait (timeout)", during)
	}
	if n := len(w.q.List()); n != queued {
		t.Errorf("a send of the key the sweep was removing queued a message (%d items, were %d)", n, queued)
	}
	if got := w.records(t); len(got) != 0 {
		t.Fatalf("records after the sweep: %v", got)
	}
	second := w.send(t, "k", nil)
	if second.Duplicate {
		t.Fatalf("the expired key answered with its first message")
	}
	w.sweep(t, 100)
	if res := w.send(t, "k", nil); !res.Duplicate || res.ID != second.ID {
		t.Errorf("a retry of the new send: duplicate %v, id %s; want %s", res.Duplicate, res.ID, second.ID)
	}
}

// TestAFilePlantedAsARecordAnswersNoKey: what lies at a key's record path
// and is no regular file within a record's bound answers no key, and the
// send with that key is a new one, not an error: a FIFO (its open must not
// wait for a writer), a link to another key's record (never followed), and
// that record padded past the bound.
func TestAFilePlantedAsARecordAnswersNoKey(t *testing.T) {
	w := newKeyWorld(t)
	first := w.send(t, "real", nil)
	real := w.svc.idemPath(w.request("real", nil))
	data, err := os.ReadFile(real)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key   string
		plant func(path string) error
	}{
		{"fifo", func(path string) error { testwait.FIFO(t, path); return nil }},
		{"link", func(path string) error { return os.Symlink(real, path) }},
		{"large", func(path string) error {
			return os.WriteFile(path, append(data, bytes.Repeat([]byte(" "), maxIdemRecord)...), 0o600)
		}},
	} {
		path := w.svc.idemPath(w.request(c.key, nil))
		if err := c.plant(path); err != nil {
			t.Fatal(err)
		}
		var res protocol.SendResult
		err := testwait.Returns(t, "a send with the key of a "+c.key, func() (err error) {
			res, err = w.svc.Send(context.Background(), w.request(c.key, nil))
			return err
		})
		if err != nil || res.Duplicate || res.ID == first.ID {
			t.Errorf("a send with the key of a %s: %v, %s; want a new send", c.key, err, asJSON(t, res))
		}
	}
}

// The record of a draft's send outlives the window, through the sweep,
// while the draft is still in drafts/ as it was sent (the daemon stopped
// before taking it out): a retry of its draft.send must find it whenever it
// comes. An edit (a new message), or the draft gone, lets the next sweep
// past the window remove it.
func TestSweepKeepsTheRecordOfADraftLeftAsItWasSent(t *testing.T) {
	for _, then := range []string{"edited", "removed"} {
		t.Run(then, func(t *testing.T) {
			w := newKeyWorld(t)
			st := w.svc.Sent.Store.(*store.Store)
			id, _, err := st.Deliver("bot", protocol.FolderDrafts, &store.Message{To: []string{"x@remote.test"}, Subject: "s"}, "b", nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			version, err := st.Version("bot", protocol.FolderDrafts, id)
			if err != nil {
				t.Fatal(err)
			}
			digest, err := st.DraftDigest("bot", protocol.FolderDrafts, id)
			if err != nil {
				t.Fatal(err)
			}
			req := w.request("draft-key", nil)
			req.Draft = &DraftSource{ID: id, Version: version, Digest: digest}
			first, err := w.svc.Send(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			testwait.For(t, "the message goes", func() bool {
				it, err := w.q.Get(QueueID("bot", first.ID))
				return err == nil && it.Settled()
			})
			want := []string{queue.IdempotencyFile("bot", "mb1", "draft-key")}
			for n := range 3 {
				w.clk.Advance(DefaultKeyWindow)
				w.sweep(t, 100)
				if got := w.records(t); !slices.Equal(got, want) {
					t.Fatalf("%d windows past the send, the draft still there as sent: records %v, want %v", n+1, got, want)
				}
			}
			if res, err := w.svc.Send(context.Background(), req); err != nil || !res.Duplicate || res.ID != first.ID {
				t.Fatalf("the draft's send retried 90 days later: %+v %v, want the first send", res, err)
			}
			// Restored on another host: the same bytes in new files, at
			// another version. The same content is still there unsent.
			path := filepath.Join(st.Path("bot"), protocol.FolderDrafts, id+".md")
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path+".new", data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(path+".new", path); err != nil {
				t.Fatal(err)
			}
			if v, err := st.Version("bot", protocol.FolderDrafts, id); err != nil || v == version {
				t.Fatalf("the rewritten draft's version: %q %v, want a new one", v, err)
			}
			w.clk.Advance(DefaultKeyWindow)
			w.sweep(t, 100)
			if got := w.records(t); !slices.Equal(got, want) {
				t.Fatalf("the draft restored unchanged, past the window: records %v, want %v", got, want)
			}
			switch then {
			case "edited":
				body := "edited"
				err = st.Rewrite("bot", protocol.FolderDrafts, id, func(*store.Message) (*string, error) { return &body, nil }, nil)
			case "removed":
				err = st.RemoveMessage("bot", protocol.FolderDrafts, id)
			}
			if err != nil {
				t.Fatal(err)
			}
			w.sweep(t, 100)
			if got := w.records(t); len(got) != 0 {
				t.Fatalf("the draft %s, the record is still kept: %v", then, got)
			}
		})
	}
}

// A draft an earlier release queued and left in drafts/ (the daemon
// stopped, then was upgraded) has a record under the key that release made
// from the file's version, without a digest. A retry with this release's
// key, made from the content, answers the first send while the file is at
// that version, within the window or past it; once the file is at another
// version the record answers no more, as it did not before.
func TestDraftSendAnswersAnEarlierReleasesVersionKey(t *testing.T) {
	w := newKeyWorld(t)
	st := w.svc.Sent.Store.(*store.Store)
	id, _, err := st.Deliver("bot", protocol.FolderDrafts, &store.Message{To: []string{"x@remote.test"}, Subject: "s"}, "b", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	version, err := st.Version("bot", protocol.FolderDrafts, id)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := st.DraftDigest("bot", protocol.FolderDrafts, id)
	if err != nil {
		t.Fatal(err)
	}
	earlier := w.request("version-key", nil)
	earlier.Draft = &DraftSource{ID: id, Version: version}
	first, err := w.svc.Send(context.Background(), earlier)
	if err != nil {
		t.Fatal(err)
	}
	now := w.request("content-key", nil)
	now.Draft = &DraftSource{ID: id, Version: version, Digest: digest, VersionKey: "version-key"}
	for _, after := range []time.Duration{0, DefaultKeyWindow} {
		w.clk.Advance(after)
		if res, err := w.svc.Send(context.Background(), now); err != nil || !res.Duplicate || res.ID != first.ID {
			t.Fatalf("%v after the earlier release's send: %+v %v, want the first send", after, res, err)
		}
	}
	// At another version, the key that release makes is another.
	now.Draft.Version, now.Draft.VersionKey = "another", "version-key-of-another"
	if res, err := w.svc.Send(context.Background(), now); err != nil || res.Duplicate {
		t.Fatalf("the draft at another version: %+v %v, want a new send", res, err)
	}
}

// TestSweepRefusesFIFOForItsDirectory: the sweep opens the records'
// directory by name; a FIFO there fails the pass at once instead of
// holding the sweep (and each send waiting on it) until a writer comes.
func TestSweepRefusesFIFOForItsDirectory(t *testing.T) {
	w := newKeyWorld(t)
	dir := filepath.Join(w.q.Dir(), queue.IdempotencyDir)
	os.RemoveAll(dir)
	testwait.FIFO(t, dir)
	if err := testwait.Returns(t, "a sweep with a FIFO for its directory", func() error {
		_, err := w.svc.SweepKeys(64)
		return err
	}); err == nil {
		t.Error("SweepKeys with a FIFO for its directory: no error")
	}
}
