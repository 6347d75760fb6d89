package store

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testwait"
)

func TestGroupSyncConcurrentCallersAllReturn(t *testing.T) {
	d, err := OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var g groupSync
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- g.sync(d)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if g.started == 0 || g.started > 64 || g.done != g.started || g.running {
		t.Fatalf("state after: started=%d done=%d running=%v", g.started, g.done, g.running)
	}
	t.Logf("64 callers shared %d directory fsyncs", g.started)
}

// A caller arriving while a sync runs must not be satisfied by it: that sync
// may have begun before the caller's rename.
func TestGroupSyncNeedsASyncStartedAfterTheCall(t *testing.T) {
	d, err := OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	g := groupSync{started: 5, done: 4, running: true}
	finished := make(chan error, 1)
	go func() { finished <- g.sync(d) }()
	// Finish the running sync (generation 5): the waiter needs generation 6.
	g.mu.Lock()
	for g.cond == nil {
		g.mu.Unlock()
		g.mu.Lock()
	}
	g.running, g.done = false, 5
	g.cond.Broadcast()
	g.mu.Unlock()
	if err := testwait.Recv(t, "the waiting sync to return once generation 5 finished", finished); err != nil {
		t.Fatal(err)
	}
	if g.started != 6 || g.done != 6 {
		t.Fatalf("the waiter did not run its own sync: started=%d done=%d", g.started, g.done)
	}
}

func TestOrphansOfUncommittedMessagesAreCleaned(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	old := time.Now().Add(-2 * StaleTempAge)
	for _, f := range []string{"a.eml", "b.eml", "b.md", "c.eml"} {
		p := filepath.Join(dir, f)
		os.WriteFile(p, []byte("x"), 0o600)
		if f != "c.eml" {
			os.Chtimes(p, old, old)
		}
	}
	os.Mkdir(filepath.Join(dir, "a"+attSuffix), 0o700)
	os.Chtimes(filepath.Join(dir, "a"+attSuffix), old, old)
	cleanOrphans(d)
	for f, want := range map[string]bool{"a.eml": false, "a" + attSuffix: false, "b.eml": true, "b.md": true, "c.eml": true} {
		_, err := os.Stat(filepath.Join(dir, f))
		if (err == nil) != want {
			t.Errorf("%s: exists=%v, want %v", f, err == nil, want)
		}
	}
}
