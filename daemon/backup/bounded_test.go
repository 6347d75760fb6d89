package backup

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// idemName is the i-th of the names queue.IdempotencyFile makes.
func idemName(i int) string { return fmt.Sprintf("%064x.json", i) }

// idemRecord is a record of mailbox agent that a restore keeps.
const idemRecord = `{"sent_id":"2026-11-29-120000-a","message_id":"<a@x>","mailbox":"agent"}`

// snapshotDir makes the snapshot a daemon would hand over: mailbox agent
// with one message, and the files given (relative to the snapshot).
func snapshotDir(t *testing.T, files map[string]string) string {
	t.Helper()
	snap := t.TempDir()
	files["mailboxes/agent/inbox/2026-01-01-000000-a.md"] = "+++\n+++\nbody"
	writeFiles(t, snap, files)
	return snap
}

func snapshotSource(snap string) Source {
	return Source{Snapshot: protocol.BackupSnapshot{Dir: snap, Mailboxes: []protocol.BackupMailbox{{Name: "agent", Messages: 1}}},
		UserName: func(uint32) string { return "someone" }}
}

// TestBackupNeverWaitsOnAFIFO: a FIFO where a registry file or an
// idempotency record goes must not hang the backup in open(2): it is not a
// file of the daemon's, so the backup leaves it out and writes the rest.
func TestBackupNeverWaitsOnAFIFO(t *testing.T) {
	snap := snapshotDir(t, map[string]string{
		"registry/mailboxes/agent.json":    `{"name":"agent","owner_uid":1000}`,
		"queue/idempotency/" + idemName(1): idemRecord,
	})
	testwait.FIFO(t, filepath.Join(snap, "registry", "mailboxes", "fifo.json"))
	os.MkdirAll(filepath.Join(snap, "registry", "hooks"), 0o700)
	testwait.FIFO(t, filepath.Join(snap, "registry", "hooks", "fifo.json"))
	testwait.FIFO(t, filepath.Join(snap, "queue", queue.IdempotencyDir, idemName(2)))
	var out bytes.Buffer
	err := testwait.Returns(t, "a backup of a snapshot holding FIFOs", func() error {
		_, err := Write(&out, snapshotSource(snap))
		return err
	})
	if err != nil {
		t.Fatalf("backup of a snapshot holding FIFOs: %v", err)
	}
	names, err := readAllEntries(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(names, "\n")
	for _, want := range []string{dirRegMboxes + "agent.json", dirIdem + idemName(1)} {
		if !strings.Contains(got, prefix+want) {
			t.Errorf("the archive does not hold %s:\n%s", want, got)
		}
	}
	for _, fifo := range []string{"fifo.json", idemName(2)} {
		if strings.Contains(got, fifo) {
			t.Errorf("the archive holds the FIFO %s:\n%s", fifo, got)
		}
	}
}

// TestBackupLeavesOutAnIdempotencyRecordPastItsBound: a record larger than
// a record may be is none the daemon wrote (it answers no key, and the
// sweep removes it): the backup leaves it out with a warning rather than
// failing, while a registry file past its bound (a mailbox's identity and
// owner) stops the backup, naming it.
func TestBackupLeavesOutAnIdempotencyRecordPastItsBound(t *testing.T) {
	snap := snapshotDir(t, map[string]string{
		"queue/idempotency/" + idemName(1): idemRecord,
		"queue/idempotency/" + idemName(2): idemRecord + strings.Repeat(" ", MaxIdemRecord),
	})
	var out bytes.Buffer
	st, err := Write(&out, snapshotSource(snap))
	if err != nil {
		t.Fatalf("backup with an oversized idempotency record: %v", err)
	}
	if st.Skipped != 1 || len(st.Warnings) != 1 || !strings.Contains(st.Warnings[0], idemName(2)) {
		t.Errorf("skipped %d, warnings %q: want the oversized record named", st.Skipped, st.Warnings)
	}
	names, err := readAllEntries(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(names, "\n"); !strings.Contains(got, idemName(1)) || strings.Contains(got, idemName(2)) {
		t.Errorf("the archive holds\n%s\nwant the record and not the oversized one", got)
	}

	reg := filepath.Join(snap, "registry", "mailboxes")
	os.MkdirAll(reg, 0o700)
	f, err := os.Create(filepath.Join(reg, "agent.json"))
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(MaxRegistry + 1)
	f.Close()
	if _, err := Write(io.Discard, snapshotSource(snap)); err == nil || !strings.Contains(err.Error(), "agent.json") {
		t.Errorf("backup with a registry file past its bound: %v, want it refused by name", err)
	}
}

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// heapProbe passes an archive on and takes the live heap once the
// archive has reached the at-th idempotency record.
type heapProbe struct {
	w        io.Writer
	seen, at int
	heap     uint64
}

func (p *heapProbe) Write(b []byte) (int, error) {
	// A record's header: its name, or (split by the ustar format) the
	// directory part of it.
	if bytes.Contains(b, []byte(strings.TrimSuffix(dirIdem, "/"))) {
		if p.seen++; p.seen == p.at {
			p.heap = liveHeap()
		}
	}
	return p.w.Write(b)
}

// TestBackupOfManyIdempotencyRecordsHoldsFewNames: the records' directory
// holds one file per keyed send of the window, hundreds of thousands on a
// busy host. The backup lists it a batch at a time: part-way through
// writing 5,000 records it holds far less than their names (a listing of
// them all is about 800 KB, a batch's under 70 KB), and the archive
// restores every record.
func TestBackupOfManyIdempotencyRecordsHoldsFewNames(t *testing.T) {
	const n = 5_000
	snap := snapshotDir(t, map[string]string{})
	dir := filepath.Join(snap, "queue", queue.IdempotencyDir)
	os.MkdirAll(dir, 0o700)
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, idemName(i)), []byte(idemRecord), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	arch, err := os.Create(filepath.Join(t.TempDir(), "archive.tar"))
	if err != nil {
		t.Fatal(err)
	}
	defer arch.Close()
	base := liveHeap()
	probe := &heapProbe{w: arch, at: n / 2}
	if _, err := Write(probe, snapshotSource(snap)); err != nil {
		t.Fatal(err)
	}
	if probe.heap == 0 {
		t.Fatalf("the archive named the records' directory %d times, want %d at least", probe.seen, probe.at)
	}
	if grown := int64(probe.heap) - int64(base); grown > 384<<10 {
		t.Errorf("the heap grew by %d bytes part-way through the records: the backup holds the directory's listing", grown)
	}

	if _, err := arch.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state")
	res, err := Restore(arch, RestoreOptions{StateDir: state, DKIMDir: filepath.Join(t.TempDir(), "dkim"), LookupUser: selfOwner})
	if err != nil {
		t.Fatal(err)
	}
	restored := 0
	if err := safeio.EachEntry(filepath.Join(state, "queue", queue.IdempotencyDir), func(fs.DirEntry) error { restored++; return nil }); err != nil {
		t.Fatal(err)
	}
	if res.IdemRecords != n || restored != n {
		t.Errorf("restored %d records, %d files: want %d", res.IdemRecords, restored, n)
	}
}

// TestRestoreNeverWaitsOnAFIFO: what a restore reads of the host it
// restores onto (the queue journal's first line, a DKIM key of the
// archive's name, the mark of an interrupted restore) must not hang it in
// open(2) when it is a FIFO. A FIFO is no journal with records; in place
// of a key it differs from the archive's key, refused without --force and
// moved aside with it; in place of the mark it still says a restore was
// stopped there.
func TestRestoreNeverWaitsOnAFIFO(t *testing.T) {
	dir := t.TempDir()
	state, keys := filepath.Join(dir, "state"), filepath.Join(dir, "dkim")
	for _, d := range []string{filepath.Join(state, "queue"), keys} {
		os.MkdirAll(d, 0o700)
	}
	testwait.FIFO(t, filepath.Join(state, "queue", queue.JournalName))
	testwait.FIFO(t, filepath.Join(keys, "ed202611.key"))
	data := archive(t, manifestEntry("agent"),
		entry{name: prefix + dirDKIM + "ed202611.key", data: "the archive's key"},
		entry{name: prefix + dirMailboxes + "agent/inbox/2026-02-01-000000-a.md", data: "a message"})
	restore := func(force bool) error {
		return testwait.Returns(t, "a restore onto a host holding FIFOs", func() error {
			_, err := Restore(bytes.NewReader(data), RestoreOptions{StateDir: state, DKIMDir: keys, Force: force, LookupUser: selfOwner})
			return err
		})
	}
	if err := restore(false); err == nil || !strings.Contains(err.Error(), "ed202611.key differs") {
		t.Fatalf("restore over a FIFO where a key of the archive's goes: %v, want it refused naming the key", err)
	}
	if err := restore(true); err != nil {
		t.Fatalf("restore --force over a FIFO where a key of the archive's goes: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(keys, "ed202611.key")); err != nil || string(b) != "the archive's key" {
		t.Errorf("the restored key: %q, %v", b, err)
	}

	os.Remove(filepath.Join(state, IncompleteName))
	testwait.FIFO(t, filepath.Join(state, IncompleteName))
	err := testwait.Returns(t, "CheckIncomplete of a FIFO", func() error { return CheckIncomplete(state) })
	if err == nil || !strings.Contains(err.Error(), IncompleteName) {
		t.Errorf("a FIFO where the mark goes: %v, want the start refused", err)
	}
}
