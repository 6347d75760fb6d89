package wal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/internal/testwait"
)

const magic = "wal test 1\n"

// open opens the log at path, returning it and the payloads replayed.
func open(t *testing.T, path string) (*Log, []string) {
	t.Helper()
	var got []string
	l, err := Open(path, Options{Magic: magic, MaxRecord: 1 << 20}, func(p []byte, at Loc) error {
		got = append(got, string(p))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return l, got
}

// TestReplayAndRead: records appended and committed come back in order
// after a restart, each readable at its location, checked.
func TestReplayAndRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	l, got := open(t, path)
	if len(got) != 0 || !l.Empty() {
		t.Fatalf("a new log replayed %v", got)
	}
	var locs []Loc
	var last uint64
	for i := range 5 {
		w, at, err := l.Append([]byte(fmt.Sprintf("record %d ", i)), []byte("in two parts"))
		if err != nil {
			t.Fatal(err)
		}
		locs, last = append(locs, at), w
	}
	if err := l.Commit(last); err != nil {
		t.Fatal(err)
	}
	if p, err := l.Read(locs[3]); err != nil || string(p) != "record 3 in two parts" {
		t.Fatalf("Read: %q %v", p, err)
	}
	l.Close()
	l, got = open(t, path)
	defer l.Close()
	if len(got) != 5 || got[4] != "record 4 in two parts" {
		t.Fatalf("replayed %q", got)
	}
}

// TestLargePartIsWrittenAsIs: a record whose last part is large (written
// without being copied into the record) reads back and replays whole.
func TestLargePartIsWrittenAsIs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	l, _ := open(t, path)
	big := bytes.Repeat([]byte("large part "), bigPart/5)
	w, at, err := l.Append([]byte("head "), big)
	if err != nil {
		t.Fatal(err)
	}
	l.Commit(w)
	if p, err := l.Read(at); err != nil || !bytes.Equal(p, append([]byte("head "), big...)) {
		t.Fatalf("Read: %d bytes, %v", len(p), err)
	}
	l.Close()
	if l, got := open(t, path); len(got) != 1 || len(got[0]) != 5+len(big) {
		t.Fatalf("replayed %d records", len(got))
	} else {
		l.Close()
	}
}

// TestTornTailIsCutAndKept: a record cut short at the end (a crash mid
// append) or damaged ends the replay; the tail is copied aside, the file is
// cut, and appends go on after the last whole record.
func TestTornTailIsCutAndKept(t *testing.T) {
	for _, damage := range []string{"torn", "flipped"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "log")
			l, _ := open(t, path)
			w, _, _ := l.Append([]byte("first"))
			l.Commit(w)
			l.Close()
			whole, _ := os.ReadFile(path)
			tail := Record([]byte("second, never committed"))
			if damage == "torn" {
				tail = tail[:len(tail)-4]
			} else {
				tail[len(tail)-1] ^= 0xff
			}
			os.WriteFile(path, append(whole, tail...), 0o600)
			l, got := open(t, path)
			if len(got) != 1 || got[0] != "first" {
				t.Fatalf("replayed %q", got)
			}
			if st, _ := os.Stat(path); st.Size() != int64(len(whole)) {
				t.Fatalf("file is %d bytes, want it cut to %d", st.Size(), len(whole))
			}
			if c, _ := os.ReadDir(filepath.Join(dir, "corrupt")); len(c) != 1 {
				t.Fatalf("the tail was not kept aside: %v", c)
			}
			w, _, _ = l.Append([]byte("third"))
			l.Commit(w)
			l.Close()
			if _, got = open(t, path); len(got) != 2 || got[1] != "third" {
				t.Fatalf("after the cut: %q", got)
			}
		})
	}
}

// TestCommitsAreGrouped: while one fsync runs, the appends that arrive wait
// for the next, which covers them all: n concurrent commits cost 2 fsyncs.
func TestCommitsAreGrouped(t *testing.T) {
	l, _ := open(t, filepath.Join(t.TempDir(), "log"))
	defer l.Close()
	hold := make(chan struct{})
	first := true
	l.SetFsync(func(f *os.File) error {
		if first {
			first = false
			<-hold
		}
		return f.Sync()
	})
	const n = 8
	errs := make(chan error, n)
	commit := func(i int) {
		w, _, err := l.Append([]byte(fmt.Sprint(i)))
		if err == nil {
			err = l.Commit(w)
		}
		errs <- err
	}
	// The first commit's fsync runs before the others append: were they
	// all appended before it began (its goroutine the last to commit), it
	// would cover them all alone.
	go commit(0)
	testwait.For(t, "the first append's fsync under way", func() bool { w, s := l.State(); return w == 1 && s })
	for i := 1; i < n; i++ {
		go commit(i)
	}
	testwait.For(t, "every append written", func() bool { w, _ := l.State(); return w == n })
	close(hold)
	for range n {
		if err := testwait.Recv(t, "a commit to return", errs); err != nil {
			t.Fatal(err)
		}
	}
	if s := l.Syncs(); s != 2 {
		t.Fatalf("%d fsyncs for %d concurrent commits, want 2", s, n)
	}
}

// TestFailedFsyncStopsTheLog: after an fsync fails, nothing written since the
// last good one can be trusted: every commit and append fails until the log
// is reopened.
func TestFailedFsyncStopsTheLog(t *testing.T) {
	l, _ := open(t, filepath.Join(t.TempDir(), "log"))
	defer l.Close()
	l.SetFsync(func(*os.File) error { return os.ErrInvalid })
	w, _, _ := l.Append([]byte("x"))
	if err := l.Commit(w); err == nil {
		t.Fatal("a failed fsync committed")
	}
	if _, _, err := l.Append([]byte("y")); err == nil {
		t.Fatal("an append after a failed fsync was taken")
	}
}

// TestRewriteAndReset: a rewrite replaces the records with what it writes,
// reading the old ones as it goes; a reset empties the log for good.
func TestRewriteAndReset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	l, _ := open(t, path)
	var keep Loc
	for i := range 10 {
		_, at, _ := l.Append(bytes.Repeat([]byte{byte('a' + i)}, 1000))
		if i == 7 {
			keep = at
		}
	}
	var moved Loc
	err := l.Rewrite(func(w *Writer) error {
		p, err := w.Read(keep)
		if err != nil {
			return err
		}
		moved = w.Append(p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := l.Read(moved); err != nil || p[0] != 'h' || len(p) != 1000 {
		t.Fatalf("after the rewrite: %q %v", p[:1], err)
	}
	w, _, _ := l.Append([]byte("after"))
	l.Commit(w)
	l.Close()
	l, got := open(t, path)
	if len(got) != 2 || got[1] != "after" {
		t.Fatalf("replayed %d records", len(got))
	}
	if err := l.Reset(); err != nil || !l.Empty() {
		t.Fatal(err)
	}
	l.Close()
	if _, got = open(t, path); len(got) != 0 {
		t.Fatalf("after a reset: %q", got)
	}
}

// TestForeignFileIsSetAside: a file that is not this log (another magic) is
// kept in corrupt/ and a new log starts.
func TestForeignFileIsSetAside(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "log")
	os.WriteFile(path, []byte("something else entirely"), 0o600)
	l, got := open(t, path)
	defer l.Close()
	if len(got) != 0 || !l.Empty() {
		t.Fatalf("replayed %q", got)
	}
	if c, _ := os.ReadDir(filepath.Join(dir, "corrupt")); len(c) != 1 {
		t.Fatalf("the foreign file was not kept: %v", c)
	}
}

// Regression: Open followed a symbolic link where the log is kept, set the
// file it led to aside as foreign and wrote the log's magic into it (the
// daemon runs as root: any file on the host), and took a FIFO for an empty
// log, failing on "illegal seek". Each, and a directory, is refused as no
// regular file, and the file a link leads to is left as it was.
func TestOpenRefusesWhatIsNoRegularFile(t *testing.T) {
	other := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(other, []byte("not the log's"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		make func(path string) error
		link bool
	}{
		{"a symbolic link", func(p string) error { return os.Symlink(other, p) }, true},
		{"a FIFO", func(p string) error { return syscall.Mkfifo(p, 0o600) }, false},
		{"a directory", func(p string) error { return os.Mkdir(p, 0o700) }, false},
	} {
		path := filepath.Join(t.TempDir(), "log")
		if err := c.make(path); err != nil {
			t.Fatal(err)
		}
		l, err := Open(path, Options{Magic: magic}, func([]byte, Loc) error { return nil })
		if err == nil {
			l.Close()
		}
		if !errors.Is(err, safeio.ErrNotRegular) || errors.Is(err, safeio.ErrSymlink) != c.link {
			t.Errorf("%s: Open: %v, want it refused as no regular file", c.name, err)
		}
	}
	if b, _ := os.ReadFile(other); string(b) != "not the log's" {
		t.Errorf("the file the link leads to now holds %q", b)
	}
}

// Snapshot opens the file by its name, under the lock appends take: a FIFO
// or a link put in its place meanwhile is refused at once, never waited on
// (with every append behind it) nor followed.
func TestSnapshotRefusesWhatIsNoRegularFile(t *testing.T) {
	for _, link := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "log")
		l, _ := open(t, path)
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		var err error
		if link {
			err = os.Symlink(os.Args[0], path)
		} else {
			err = syscall.Mkfifo(path, 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := l.Snapshot(&buf); !errors.Is(err, safeio.ErrNotRegular) || errors.Is(err, safeio.ErrSymlink) != link {
			t.Errorf("link %v: Snapshot: %v, want it refused as no regular file", link, err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
