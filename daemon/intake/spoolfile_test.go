package intake

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/internal/testwait"
)

// plant puts what (a symbolic link to other, or a FIFO) where path is.
func plant(t *testing.T, path, what, other string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if what == "a FIFO" {
		testwait.FIFO(t, path)
		return
	}
	if err := os.Symlink(other, path); err != nil {
		t.Fatal(err)
	}
}

// precious is a file outside the journal's directory a planted link leads
// to; checkPrecious fails if anything changed it.
func precious(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(p, []byte(strings.Repeat("not the spool's\r\n", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func checkPrecious(t *testing.T, p string) {
	t.Helper()
	if b, _ := os.ReadFile(p); string(b) != strings.Repeat("not the spool's\r\n", 100) {
		t.Errorf("the file a link in the spool directory leads to now holds %d bytes", len(b))
	}
}

// TestNewSpoolRefusesWhatIsNoRegularFile: an emptied spool file kept for
// reuse is opened again by name; a symbolic link put in its place is
// refused, its target not emptied, and a FIFO is refused without waiting
// for a writer, each naming the path.
func TestNewSpoolRefusesWhatIsNoRegularFile(t *testing.T) {
	other := precious(t)
	for _, what := range []string{"a symbolic link", "a FIFO"} {
		dir := t.TempDir()
		j, _ := open(t, dir, &syncs{})
		sp, err := j.NewSpool()
		if err != nil {
			t.Fatal(err)
		}
		sp.Write([]byte("refused"))
		sp.Close()
		if len(j.freeSpools) != 1 {
			t.Fatalf("%d spool files kept for reuse, want 1", len(j.freeSpools))
		}
		plant(t, filepath.Join(dir, spoolDir, j.freeSpools[0]), what, other)
		err = testwait.Returns(t, "NewSpool on "+what, func() error {
			sp, err := j.NewSpool()
			if err == nil {
				sp.Close()
			}
			return err
		})
		if !errors.Is(err, safeio.ErrNotRegular) || !strings.Contains(err.Error(), filepath.Join(dir, spoolDir)) {
			t.Errorf("%s: NewSpool: %v, want it refused as no regular file, naming its path", what, err)
		}
		if sp, err := j.NewSpool(); err != nil {
			t.Errorf("%s: the next spool: %v", what, err)
		} else {
			sp.Close()
		}
	}
	checkPrecious(t, other)
}

// TestReplayRefusesSpoolThatIsNoRegularFile: after a restart the spool of
// a recorded copy, and the stray spool files, are opened by name. A
// symbolic link put in their place is not followed (the copy is not made
// of the file it leads to, which is not emptied either), and a FIFO does
// not make the start wait; the copy is lost and said to be, naming the
// path.
func TestReplayRefusesSpoolThatIsNoRegularFile(t *testing.T) {
	other := precious(t)
	for _, what := range []string{"a symbolic link", "a FIFO"} {
		dir := t.TempDir()
		j, _ := open(t, dir, &syncs{})
		sp, err := j.NewSpool()
		if err != nil {
			t.Fatal(err)
		}
		sp.Write([]byte("a spooled message\r\n"))
		if _, err := j.Add(entry(1), nil, sp); err != nil {
			t.Fatal(err)
		}
		sp.Close()
		stray, err := j.NewSpool()
		if err != nil {
			t.Fatal(err)
		}
		stray.Write([]byte("cut off by a crash"))
		j.Close()
		plant(t, filepath.Join(dir, spoolDir, sp.name), what, other)
		plant(t, filepath.Join(dir, spoolDir, stray.name), what, other)

		var mu sync.Mutex
		var logged []string
		logf := func(msg string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			for i := 1; i < len(args); i += 2 {
				if err, ok := args[i].(error); ok {
					msg += " " + err.Error()
				}
			}
			logged = append(logged, msg)
		}
		type opened struct {
			j       *Journal
			pending []*Pending
			err     error
		}
		o := testwait.Returns(t, "Open with "+what+" for a spool", func() opened {
			j, pending, err := Open(dir, Options{Sync: (&syncs{}).sync, Logf: logf})
			return opened{j, pending, err}
		})
		if o.err != nil {
			t.Fatalf("%s: Open: %v", what, o.err)
		}
		o.j.Close()
		if len(o.pending) != 0 {
			t.Errorf("%s: %d copies came back, want the one whose spool is %s lost", what, len(o.pending), what)
		}
		mu.Lock()
		found := false
		for _, l := range logged {
			found = found || strings.Contains(l, "spool is unreadable") && strings.Contains(l, filepath.Join(dir, spoolDir, sp.name)) && strings.Contains(l, safeio.ErrNotRegular.Error())
		}
		mu.Unlock()
		if !found {
			t.Errorf("%s: the lost copy is not logged naming its spool as no regular file: %q", what, logged)
		}
		ents, _ := os.ReadDir(filepath.Join(dir, spoolDir))
		for _, e := range ents {
			if !e.Type().IsRegular() {
				t.Errorf("%s: %s is left in the spool directory (%v)", what, e.Name(), e.Type())
			}
		}
	}
	checkPrecious(t, other)
}
