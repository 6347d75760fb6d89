package intake

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mailctl/mailctl/store"
)

// syncs counts Options.Sync calls and fails them while fail is set.
type syncs struct {
	mu   sync.Mutex
	n    int
	fail error
}

func (s *syncs) sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return s.fail
}

func open(t *testing.T, dir string, s *syncs) (*Journal, []*Pending) {
	t.Helper()
	j, pending, err := Open(dir, Options{Sync: s.sync})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j, pending
}

func entry(i int) *Entry {
	return &Entry{Mailbox: "agent", Folder: "inbox", ID: fmt.Sprintf("2026-01-02-030405-m%d", i),
		Msg: store.Message{Subject: fmt.Sprint("message ", i), Trusted: "none"}, Prefix: "Authentication-Results: x\r\n"}
}

func readAll(t *testing.T, p *Pending) string {
	t.Helper()
	b, err := io.ReadAll(p.Open())
	if err != nil || int64(len(b)) != p.Size {
		t.Fatalf("reading %s back: %d of %d bytes, %v", p.ID, len(b), p.Size, err)
	}
	return string(b)
}

// TestRecordedCopiesComeBack: copies recorded and not written come back
// after a restart, oldest first, with their entries and messages, held in
// memory or spooled; copies written do not; a checkpoint syncs, then
// empties the segments it no longer needs.
func TestRecordedCopiesComeBack(t *testing.T) {
	dir := t.TempDir()
	s := &syncs{}
	j, pending := open(t, dir, s)
	if len(pending) != 0 {
		t.Fatalf("a new journal has %d pending copies", len(pending))
	}
	t1, err := j.Add(entry(1), []byte("first message\r\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := j.NewSpool()
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("spooled line\r\n"), 100_000)
	sp.Write(big[:500_000])
	sp.Write(big[500_000:])
	if _, err := j.Add(entry(2), nil, sp); err != nil {
		t.Fatal(err)
	}
	sp.Close()
	if _, err := j.Add(entry(3), []byte("third message\r\n"), nil); err != nil {
		t.Fatal(err)
	}
	t1.Written()
	j.Close()

	j, pending = open(t, dir, s)
	if len(pending) != 2 || pending[0].ID != entry(2).ID || pending[1].ID != entry(3).ID {
		t.Fatalf("pending after a restart: %+v", pending)
	}
	if got := readAll(t, pending[0]); got != string(big) || pending[0].Msg.Subject != "message 2" || pending[0].Prefix != entry(2).Prefix {
		t.Fatalf("the spooled copy came back as %d bytes, %+v", len(got), pending[0].Entry)
	}
	if got := readAll(t, pending[1]); got != "third message\r\n" {
		t.Fatalf("the copy held in memory came back as %q", got)
	}
	for _, p := range pending {
		p.Written()
	}
	if err := j.Checkpoint(); err != nil || s.n != 1 {
		t.Fatalf("checkpoint: %v, %d syncs", err, s.n)
	}
	if st := j.Stats(); st.Spools != 0 {
		t.Errorf("%d spools kept after every copy was written and synced", st.Spools)
	}
	checkNoSpool(t, dir)
	j.Close()
	if _, pending = open(t, dir, s); len(pending) != 0 {
		t.Fatalf("%d copies pending after a checkpoint", len(pending))
	}
}

// TestWrittenFromAnotherBootIsWrittenAgain: a 'W' is trusted only in the
// boot that wrote it (after a reboot the files it speaks of may be lost), so
// a copy written in another boot and not yet synced comes back.
func TestWrittenFromAnotherBootIsWrittenAgain(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, dir, &syncs{})
	tk, err := j.Add(entry(1), []byte("message\r\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	j.boot = "a boot before this one"
	tk.Written()
	j.Close()
	if _, pending := open(t, dir, &syncs{}); len(pending) != 1 {
		t.Fatalf("%d pending, want the copy written in another boot", len(pending))
	}
}

// TestAbandonedCopyIsForgotten: a copy given up (the client was told to
// retry) is not written again at the next start.
func TestAbandonedCopyIsForgotten(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, dir, &syncs{})
	tk, err := j.Add(entry(1), []byte("message\r\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	tk.Abandon()
	j.Close()
	if _, pending := open(t, dir, &syncs{}); len(pending) != 0 {
		t.Fatalf("%d pending after the copy was given up", len(pending))
	}
}

// TestFailedSyncKeepsTheRecords: when the checkpoint's sync fails, the
// written copies keep their records (a restart writes them again), and the
// next checkpoint that syncs lets them go.
func TestFailedSyncKeepsTheRecords(t *testing.T) {
	dir := t.TempDir()
	s := &syncs{fail: errors.New("disk gone")}
	j, _ := open(t, dir, s)
	tk, _ := j.Add(entry(1), []byte("message\r\n"), nil)
	tk.Written()
	if err := j.Checkpoint(); err == nil {
		t.Fatal("a checkpoint whose sync failed succeeded")
	}
	j.Close()
	j, pending := open(t, dir, s)
	if len(pending) != 1 {
		t.Fatalf("%d pending after a failed sync, want 1", len(pending))
	}
	pending[0].Written()
	s.fail = nil
	if err := j.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	j.Close()
	if _, pending = open(t, dir, s); len(pending) != 0 {
		t.Fatalf("%d pending after a good checkpoint", len(pending))
	}
}

// TestSegmentsAreReused: under steady traffic, checkpoints empty and reuse
// the same few segment files instead of making new ones.
func TestSegmentsAreReused(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, dir, &syncs{})
	for round := range 20 {
		var inFlight *Ticket
		for i := range 10 {
			tk, err := j.Add(entry(round*10+i), []byte("message\r\n"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if i == 9 {
				inFlight = tk // written after the checkpoint, as a slow copy is
				continue
			}
			tk.Written()
		}
		if err := j.Checkpoint(); err != nil {
			t.Fatal(err)
		}
		inFlight.Written()
	}
	if st := j.Stats(); st.Segments > 3 {
		t.Errorf("%d segment files after 20 checkpoints, want at most 3", st.Segments)
	}
	j.Close()
	if _, pending := open(t, dir, &syncs{}); len(pending) != 0 {
		t.Errorf("%d pending; every copy was written", len(pending))
	}
}

// checkNoSpool fails if a spool file holds anything: only emptied ones,
// kept for reuse, may be there.
func checkNoSpool(t *testing.T, dir string) {
	t.Helper()
	spools, _ := os.ReadDir(filepath.Join(dir, spoolDir))
	for _, e := range spools {
		st, err := os.Stat(filepath.Join(dir, spoolDir, e.Name()))
		if !strings.HasPrefix(e.Name(), freePrefix) || err != nil || st.Size() != 0 {
			t.Errorf("spool file %s left (%v)", e.Name(), err)
		}
	}
	if len(spools) > maxFreeSpools {
		t.Errorf("%d spool files kept, at most %d", len(spools), maxFreeSpools)
	}
}

// TestSpoolsGo: a spool closed without a copy recorded (a refused message),
// and spool files no recorded copy names (a crash mid-message), are emptied;
// the next spool reuses such a file rather than making one.
func TestSpoolsGo(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, dir, &syncs{})
	sp, _ := j.NewSpool()
	sp.Write([]byte("refused"))
	before, _ := sp.f.Stat()
	sp.Close()
	checkNoSpool(t, dir)
	reused, _ := j.NewSpool()
	after, _ := reused.f.Stat()
	if !os.SameFile(before, after) || reused.size != 0 {
		t.Errorf("a new spool did not reuse the emptied file")
	}
	if st, _ := reused.f.Stat(); st.Size() != 0 {
		t.Errorf("a reused spool starts with %d bytes", st.Size())
	}
	reused.Write([]byte("cut off by a crash"))
	j.Close()
	open(t, dir, &syncs{})
	checkNoSpool(t, dir)
}

// TestConcurrentAddsShareFsyncs: copies recorded at once by many sessions
// share fsyncs.
func TestConcurrentAddsShareFsyncs(t *testing.T) {
	j, _ := open(t, t.TempDir(), &syncs{})
	const n = 64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := j.Add(entry(i), bytes.Repeat([]byte("x"), 4096), nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if st := j.Stats(); st.Syncs > n {
		t.Errorf("%d fsyncs for %d copies", st.Syncs, n)
	}
}

// TestWrittenCopiesAreReported: at a restart, Options.Written gets each copy
// the journal still holds that is known to be written (this boot's 'W'),
// oldest first, and no other: not one written in another boot (that one is
// pending), not one given up, not one marked to be written again, and none
// after a checkpoint let them go.
func TestWrittenCopiesAreReported(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, dir, &syncs{})
	var tks []*Ticket
	for i := range 6 {
		e := entry(i)
		e.Key = fmt.Sprintf("%064x", i)
		tk, err := j.Add(e, []byte("message\r\n"), nil)
		if err != nil {
			t.Fatal(err)
		}
		tks = append(tks, tk)
	}
	tks[4].Written()
	tks[0].Written()
	tks[1].Abandon()
	tks[3].Written()
	j.mu.Lock()
	tks[3].markLocked('R', "")
	j.mu.Unlock()
	j.boot = "a boot before this one"
	tks[5].Written()
	j.Close()

	var got []string
	reopen := func(s *syncs) (*Journal, []*Pending) {
		got = nil
		j, pending, err := Open(dir, Options{Sync: s.sync, Written: func(e Entry) { got = append(got, e.ID+" "+e.Key[60:]) }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { j.Close() })
		return j, pending
	}
	j, pending := reopen(&syncs{})
	if want := []string{entry(0).ID + " 0000", entry(4).ID + " 0004"}; !slices.Equal(got, want) {
		t.Errorf("reported written: %q, want %q", got, want)
	}
	var ids []string
	for _, p := range pending {
		ids = append(ids, p.ID)
		p.Written()
	}
	if want := []string{entry(2).ID, entry(3).ID, entry(5).ID}; !slices.Equal(ids, want) {
		t.Errorf("pending: %q, want %q", ids, want)
	}
	if err := j.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	j.Close()
	if _, pending := reopen(&syncs{}); len(got) != 0 || len(pending) != 0 {
		t.Errorf("after a checkpoint: %d reported written, %d pending", len(got), len(pending))
	}
}
