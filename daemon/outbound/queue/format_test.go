package queue

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/internal/testwait"
)

// The journal's first line is the version formats names.
func TestJournalMagicIsTheFormatVersion(t *testing.T) {
	if want := journalPrefix + strconv.Itoa(formats.QueueJournal) + "\n"; journalMagic != want {
		t.Fatalf("journalMagic = %q, formats.QueueJournal says %q", journalMagic, want)
	}
	in, err := Inspect(t.TempDir())
	if err != nil || in.Version != 0 {
		t.Fatalf("no journal: version %d, %v", in.Version, err)
	}
	if v, err := JournalVersion(t.TempDir()); err != nil || v != 0 {
		t.Fatalf("JournalVersion of no journal: %d, %v", v, err)
	}
	dir := t.TempDir()
	openTestQueue(t, dir).Close()
	if in, err := Inspect(dir); err != nil || in.Version != formats.QueueJournal {
		t.Fatalf("a new journal: version %d, %v", in.Version, err)
	}
	if v, err := JournalVersion(dir); err != nil || v != formats.QueueJournal {
		t.Fatalf("JournalVersion of a new journal: %d, %v", v, err)
	}
}

// A journal a later release wrote is refused, by Open and by Inspect, with
// both versions named, and left exactly as it was: nothing set aside.
func TestNewerJournalIsRefusedAndKept(t *testing.T) {
	dir := t.TempDir()
	q := openTestQueue(t, dir)
	if err := q.Enqueue(heldItem("a")); err != nil {
		t.Fatal(err)
	}
	q.Close()
	path := filepath.Join(dir, journalName)
	raw, _ := os.ReadFile(path)
	newer := append([]byte(journalPrefix+strconv.Itoa(formats.QueueJournal+1)+"\n"), raw[len(journalMagic):]...)
	os.WriteFile(path, newer, 0o600)

	_, err := Open(dir, &countingDeliverer{count: map[string]int{}}, newNotes(), Options{})
	var ne *formats.NewerError
	if !errors.As(err, &ne) || ne.Found != formats.QueueJournal+1 || ne.Reads != formats.QueueJournal || ne.Path != path {
		t.Fatalf("Open: %v, want a NewerError for version %d at %s", err, formats.QueueJournal+1, path)
	}
	for _, s := range []string{"format version 2", "reads versions up to 1", "restore the backup", "nothing was changed"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the error %q does not say %q", err, s)
		}
	}
	if _, err := Inspect(dir); !errors.Is(err, formats.ErrNewer) {
		t.Errorf("Inspect: %v, want ErrNewer", err)
	}
	if _, err := JournalVersion(dir); !errors.Is(err, formats.ErrNewer) {
		t.Errorf("JournalVersion: %v, want ErrNewer", err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, newer) {
		t.Error("the refused journal changed")
	}
	if c := corruptFiles(t, dir); len(c) != 0 {
		t.Errorf("the refused journal was set aside: %v", c)
	}
}

// A first line that is a journal's but whose version is not a number is a
// damaged stamp: refused, kept. One that is no journal's at all is set
// aside as before (TestJournalDamageSetAside).
func TestDamagedJournalStampIsRefusedAndKept(t *testing.T) {
	for _, line := range []string{"mailctl queue journal x\n", "mailctl queue journal 0\n", "mailctl queue journal -1\n", "mailctl queue journal 01\n"} {
		dir := t.TempDir()
		path := filepath.Join(dir, journalName)
		content := []byte(line + "\x00\x00\x00\x05rest")
		os.WriteFile(path, content, 0o600)
		_, err := Open(dir, &countingDeliverer{count: map[string]int{}}, newNotes(), Options{})
		if !errors.Is(err, formats.ErrDamaged) || !strings.Contains(err.Error(), path) {
			t.Errorf("%q: Open: %v, want a damaged stamp naming the file", line, err)
		}
		if _, err := Inspect(dir); !errors.Is(err, formats.ErrDamaged) {
			t.Errorf("%q: Inspect: %v", line, err)
		}
		if _, err := JournalVersion(dir); !errors.Is(err, formats.ErrDamaged) {
			t.Errorf("%q: JournalVersion: %v", line, err)
		}
		if got, _ := os.ReadFile(path); !bytes.Equal(got, content) {
			t.Errorf("%q: the journal changed", line)
		}
		if c := corruptFiles(t, dir); len(c) != 0 {
			t.Errorf("%q: set aside: %v", line, c)
		}
	}
}

// TestJournalReadersRefuseOddFiles: what reads the journal from outside
// the queue (mailctl doctor's Inspect, the daemon's JournalVersion at
// start) finds a FIFO where the journal is kept to be no journal, without
// waiting for a writer, and a link an error, as Open does.
func TestJournalReadersRefuseOddFiles(t *testing.T) {
	fifo := t.TempDir()
	testwait.FIFO(t, filepath.Join(fifo, journalName))
	in := testwait.Returns(t, "Inspect of a FIFO", func() *Inspection {
		in, err := Inspect(fifo)
		if err != nil {
			t.Errorf("Inspect of a FIFO: %v", err)
		}
		return in
	})
	if in == nil || in.Damaged == "" || in.Version != 0 {
		t.Errorf("Inspect of a FIFO: %+v, want it damaged", in)
	}
	err := testwait.Returns(t, "JournalVersion of a FIFO", func() error {
		v, err := JournalVersion(fifo)
		if v != 0 {
			t.Errorf("JournalVersion of a FIFO: %d", v)
		}
		return err
	})
	if err != nil {
		t.Errorf("JournalVersion of a FIFO: %v, want no journal", err)
	}

	link, real := t.TempDir(), t.TempDir()
	openTestQueue(t, real).Close()
	if err := os.Symlink(filepath.Join(real, journalName), filepath.Join(link, journalName)); err != nil {
		t.Fatal(err)
	}
	if in, err := Inspect(link); !errors.Is(err, safeio.ErrSymlink) {
		t.Errorf("Inspect of a link: %+v, %v; want it refused", in, err)
	}
	if v, err := JournalVersion(link); !errors.Is(err, safeio.ErrSymlink) {
		t.Errorf("JournalVersion of a link: %d, %v; want it refused", v, err)
	}
}
