package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/internal/wal"
)

func openTestQueue(t *testing.T, dir string) *Queue {
	t.Helper()
	q, err := Open(dir, &countingDeliverer{count: map[string]int{}}, newNotes(), Options{Clock: testclock.New().Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func heldItem(id string) *Item {
	it := testItem(id, id+"@remote.test")
	it.Held = true
	return it
}

func ids(q *Queue) string {
	var out []string
	for _, it := range q.List() {
		out = append(out, it.ID)
	}
	return strings.Join(out, ",")
}

func corruptFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Join(dir, "corrupt"))
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// A crash in the middle of an append leaves a partial record at the end:
// it was never acknowledged, so the restart cuts it (keeping a copy) and
// goes on appending after the last whole record.
func TestJournalTornAppendIsCut(t *testing.T) {
	dir := t.TempDir()
	q1 := openTestQueue(t, dir)
	for _, id := range []string{"a", "b", "c"} {
		if err := q1.Enqueue(heldItem(id)); err != nil {
			t.Fatal(err)
		}
	}
	q1.Close()
	path := filepath.Join(dir, journalName)
	whole, _ := os.ReadFile(path)
	torn := wal.Record([]byte("E"), bytes.Repeat([]byte("x"), 200))[:60]
	os.WriteFile(path, append(whole, torn...), 0o600)

	q2 := openTestQueue(t, dir)
	if got := ids(q2); got != "a,b,c" {
		t.Fatalf("after a torn append: %q", got)
	}
	if st, _ := os.Stat(path); st.Size() != int64(len(whole)) {
		t.Fatalf("journal is %d bytes, want it cut back to %d", st.Size(), len(whole))
	}
	if c := corruptFiles(t, dir); len(c) != 1 {
		t.Fatalf("the torn tail was not kept aside: %v", c)
	}
	if err := q2.Enqueue(heldItem("d")); err != nil {
		t.Fatal(err)
	}
	q2.Close()
	if got := ids(openTestQueue(t, dir)); got != "a,b,c,d" {
		t.Fatalf("appends after the cut: %q", got)
	}
}

// A record that fails its checksum ends what can be trusted: the items
// before it load, it and what follows are set aside, and the queue goes on.
func TestJournalDamageSetAside(t *testing.T) {
	dir := t.TempDir()
	q1 := openTestQueue(t, dir)
	for _, id := range []string{"a", "b", "c"} {
		if err := q1.Enqueue(heldItem(id)); err != nil {
			t.Fatal(err)
		}
	}
	q1.Close()
	path := filepath.Join(dir, journalName)
	raw, _ := os.ReadFile(path)
	i := bytes.Index(raw, []byte(`"id":"b"`))
	if i < 0 {
		t.Fatal("record of b not found")
	}
	raw[i+6] = 'X'
	os.WriteFile(path, raw, 0o600)
	q2 := openTestQueue(t, dir)
	if got := ids(q2); got != "a" {
		t.Fatalf("after damage: %q", got)
	}
	if c := corruptFiles(t, dir); len(c) != 1 {
		t.Fatalf("the damaged part was not kept aside: %v", c)
	}
	if err := q2.Enqueue(heldItem("e")); err != nil {
		t.Fatalf("the queue stopped after damage: %v", err)
	}
	// A file that is not a journal at all is set aside whole.
	q2.Close()
	os.WriteFile(path, []byte("{\"not\": \"a journal\"}\n"), 0o600)
	if got := ids(openTestQueue(t, dir)); got != "" {
		t.Fatalf("from a foreign file: %q", got)
	}
	if c := corruptFiles(t, dir); len(c) != 2 {
		t.Fatalf("the foreign file was not kept aside: %v", c)
	}
}

// Once most of the journal is settled items, it is rewritten with the live
// ones only, and their messages survive the rewrite and a restart.
func TestJournalCompacts(t *testing.T) {
	dir := t.TempDir()
	j, _, err := openJournal(dir, func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	body := func(i int) []byte { return bytes.Repeat([]byte(fmt.Sprintf("%04d", i)), 25_000) } // 100 kB
	var last uint64
	for i := range 120 {
		it := testItem(fmt.Sprintf("m%03d", i), "x@remote.test")
		it.Data = body(i)
		it.Size = int64(len(it.Data))
		if last, err = j.enqueue(it, it.Data, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.commit(last); err != nil {
		t.Fatal(err)
	}
	before := j.log.Size()
	for i := range 110 {
		j.drop(fmt.Sprintf("m%03d", i))
	}
	if err := j.log.Err(); err != nil {
		t.Fatal(err)
	}
	if size := j.log.Size(); size >= before/4 {
		t.Fatalf("journal still %d bytes of %d after 110 of 120 items left", size, before)
	}
	for i := 110; i < 120; i++ {
		got, err := j.read(fmt.Sprintf("m%03d", i))
		if err != nil || !bytes.Equal(got, body(i)) {
			t.Fatalf("m%03d after the rewrite: %v", i, err)
		}
	}
	// A state appended after the rewrite is replayed on top of it.
	it := testItem("m115", "x@remote.test")
	it.Size, it.Attempts = int64(len(body(115))), 7
	w, err := j.put(it)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.commit(w); err != nil {
		t.Fatal(err)
	}
	j.close()
	j2, items, err := openJournal(dir, func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	defer j2.close()
	if len(items) != 10 || items["m115"].it.Attempts != 7 {
		t.Fatalf("after restart: %d items, m115 %+v", len(items), items["m115"])
	}
	if got, err := j2.read("m119"); err != nil || !bytes.Equal(got, body(119)) {
		t.Fatalf("m119 after restart: %v", err)
	}
}

// Items queued by the earlier layout (<id>.json and <id>.eml) move into the
// journal at start and are delivered; their files go.
func TestQueueMigratesEarlierLayout(t *testing.T) {
	dir := t.TempDir()
	it := testItem("old", "o@remote.test")
	it.Size = int64(len(it.Data))
	it.Recipients[0].Status = StatusPending
	st, _ := json.Marshal(it)
	os.WriteFile(filepath.Join(dir, "old.json"), st, 0o600)
	os.WriteFile(filepath.Join(dir, "old.eml"), it.Data, 0o600)
	d := &countingDeliverer{count: map[string]int{}}
	n := newNotes()
	q, err := Open(dir, d, n, Options{Clock: testclock.New().Now})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for _, f := range []string{"old.json", "old.eml"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("%s left after the migration", f)
		}
	}
	if _, ok := journalItems(t, dir)["old"]; !ok {
		t.Fatal("the item is not in the journal")
	}
	runQueue(t, q)
	if done := n.waitSettled(t); done.ID != "old" || done.Recipients[0].Status != StatusDelivered {
		t.Fatalf("migrated item: %+v", done)
	}
}

// An item of the earlier layout is read by name after the listing: a link
// to a file elsewhere (left as it was) or a FIFO in the place of its .json
// or its .eml is refused, naming the path, never followed nor waited on;
// at start such an item is set aside, not moved into the journal.
func TestMigrateRefusesWhatIsNoRegularFile(t *testing.T) {
	it := testItem("old", "o@remote.test")
	it.Size = int64(len(it.Data))
	st, _ := json.Marshal(it)
	elsewhere := t.TempDir()
	held := map[string][]byte{".json": st, ".eml": it.Data}
	for ext, b := range held {
		if err := os.WriteFile(filepath.Join(elsewhere, "old"+ext), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, ext := range []string{".json", ".eml"} {
		for _, link := range []bool{true, false} {
			dir := t.TempDir()
			for e, b := range held {
				if e != ext {
					if err := os.WriteFile(filepath.Join(dir, "old"+e), b, 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			path := filepath.Join(dir, "old"+ext)
			if link {
				if err := os.Symlink(filepath.Join(elsewhere, "old"+ext), path); err != nil {
					t.Fatal(err)
				}
			} else {
				testwait.FIFO(t, path)
			}
			q := &Queue{dir: dir}
			err := testwait.Returns(t, "load with "+path, func() error { _, _, err := q.load("old"); return err })
			if !errors.Is(err, safeio.ErrNotRegular) || errors.Is(err, safeio.ErrSymlink) != link || !strings.Contains(err.Error(), path) {
				t.Errorf("%s (link %v): %v, want it refused as no regular file, naming it", ext, link, err)
			}
		}
	}
	// At start: the item whose .eml is a link is set aside.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "old.json"), st, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(elsewhere, "old.eml"), filepath.Join(dir, "old.eml")); err != nil {
		t.Fatal(err)
	}
	openTestQueue(t, dir)
	if _, ok := journalItems(t, dir)["old"]; ok {
		t.Error("the item whose message is a link was moved into the journal")
	}
	if _, err := os.Lstat(filepath.Join(dir, "corrupt", "old.eml")); err != nil {
		t.Errorf("the item was not set aside: %v", err)
	}
	for ext, b := range held {
		if got, _ := os.ReadFile(filepath.Join(elsewhere, "old"+ext)); !bytes.Equal(got, b) {
			t.Errorf("the file the link leads to now holds %q", got)
		}
	}
}

// Concurrent commits share fsyncs: while one runs, the appends that arrive
// wait for the next, which covers them all.
func TestJournalGroupsCommits(t *testing.T) {
	j, _, err := openJournal(t.TempDir(), func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	hold := make(chan struct{})
	first := true
	j.log.SetFsync(func(f *os.File) error {
		if first {
			first = false
			<-hold // the first fsync runs until every append is in
		}
		return f.Sync()
	})
	const n = 8
	errs := make(chan error, n)
	commit := func(i int) {
		it := testItem(fmt.Sprintf("g%d", i), "x@remote.test")
		w, err := j.enqueue(it, it.Data, nil)
		if err == nil {
			err = j.commit(w)
		}
		errs <- err
	}
	// The first commit's fsync runs before the others append: were they
	// all appended before it began (its goroutine the last to commit), it
	// would cover them all alone.
	go commit(0)
	testwait.For(t, "the first append's sync under way", func() bool { written, syncing := j.log.State(); return written == 1 && syncing })
	for i := 1; i < n; i++ {
		go commit(i)
	}
	testwait.For(t, "every append written", func() bool { written, _ := j.log.State(); return written == n })
	close(hold)
	for range n {
		if err := testwait.Recv(t, "a commit to return", errs); err != nil {
			t.Fatal(err)
		}
	}
	if syncs := j.log.Syncs(); syncs != 2 {
		t.Fatalf("%d fsyncs for %d concurrent commits, want 2 (the one running, then one for the rest)", syncs, n)
	}
}

// An item's sent-copy data stays beside its message through a restart and a
// rewrite of the journal, and the notifier reads both back.
func TestJournalKeepsSentCopyData(t *testing.T) {
	dir := t.TempDir()
	n := newNotes()
	q1, err := Open(dir, &countingDeliverer{count: map[string]int{}}, n, Options{Clock: testclock.New().Now})
	if err != nil {
		t.Fatal(err)
	}
	it := testItem("k1", "a@remote.test")
	it.Held = true
	it.Copy = []byte(`{"copy":1}`)
	if err := q1.Enqueue(it); err != nil {
		t.Fatal(err)
	}
	q1.Close()
	r := &restorer{notes: newNotes()}
	q2, err := Open(dir, &countingDeliverer{count: map[string]int{}}, r, Options{Clock: testclock.New().Now})
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	q2.j.mu.Lock()
	err = q2.j.compactLocked()
	q2.j.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	runQueue(t, q2)
	testwait.For(t, "the item restored", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.restored) == 1 })
	r.mu.Lock()
	got := r.restored[0]
	r.mu.Unlock()
	cp, err := got.ReadCopy()
	if err != nil || string(cp) != `{"copy":1}` {
		t.Fatalf("copy read back: %q %v", cp, err)
	}
	msg, err := got.ReadMessage()
	if err != nil || string(msg) != testMsg {
		t.Fatalf("message read back: %q %v", msg, err)
	}
}

// restorer is a notes that is also a Restorer.
type restorer struct {
	*notes
	restored []*Item
}

func (r *restorer) Restore(it *Item) {
	r.mu.Lock()
	r.restored = append(r.restored, it)
	r.mu.Unlock()
}

// Run restores what the journal held at Open, and not an item queued
// since: that one's sender writes its sent copy, and a Restore racing it
// would write the copy first and make it a rewrite.
func TestRestoreSkipsItemsQueuedAfterOpen(t *testing.T) {
	dir := t.TempDir()
	q1, err := Open(dir, &countingDeliverer{count: map[string]int{}}, newNotes(), Options{Clock: testclock.New().Now})
	if err != nil {
		t.Fatal(err)
	}
	old := heldItem("old")
	old.Copy = []byte(`{"copy":1}`)
	if err := q1.Enqueue(old); err != nil {
		t.Fatal(err)
	}
	q1.Close()
	r := &restorer{notes: newNotes()}
	q2, err := Open(dir, &countingDeliverer{count: map[string]int{}}, r, Options{Clock: testclock.New().Now})
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	fresh := heldItem("fresh")
	fresh.Copy = []byte(`{"copy":2}`)
	if err := q2.Enqueue(fresh); err != nil { // before Run starts
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Run restores, then returns at once
	q2.Run(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	var got []string
	for _, it := range r.restored {
		got = append(got, it.ID)
	}
	if strings.Join(got, ",") != "old" {
		t.Fatalf("restored %v, want only the item found at Open", got)
	}
}
