package store

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestMessageIDSquattingStoresBoth is the squatting attack: an unsigned
// message from one sender, then another message with the same Message-ID
// but other content and trust. Both must be kept; the first must not
// swallow the second.
func TestMessageIDSquattingStoresBoth(t *testing.T) {
	s := newTestStore(t)
	evil := testMessage(1)
	evil.From, evil.Trusted = "x@evil.test", "false"
	real := testMessage(1)
	real.From, real.Trusted = "boss@example.org", "true"
	id1, dup1, err1 := s.DeliverOnce(sha256.Sum256([]byte("evil bytes")), "agent", "inbox", evil, "pay me", []byte("evil bytes"), nil)
	id2, dup2, err2 := s.DeliverOnce(sha256.Sum256([]byte("real bytes")), "agent", "inbox", real, "hello", []byte("real bytes"), nil)
	if err1 != nil || err2 != nil || dup1 || dup2 || id1 == id2 {
		t.Fatalf("deliveries: %q %v %v, %q %v %v", id1, dup1, err1, id2, dup2, err2)
	}
	// Deliver without a key never de-duplicates either.
	if id3, dup, err := s.Deliver("agent", "inbox", testMessage(1), "third", nil, nil); err != nil || dup || id3 == id1 || id3 == id2 {
		t.Fatalf("Deliver: %q %v %v", id3, dup, err)
	}
	got := listIDs(t, s, "inbox")
	if len(got) != 3 {
		t.Fatalf("inbox holds %v, want 3 messages", got)
	}
	m, _, err := s.Get("agent", "inbox", id2)
	if err != nil || m.From != "boss@example.org" || m.Trusted != "true" {
		t.Errorf("trusted copy: %+v %v", m, err)
	}
}

// TestDeliverOnceRepeatWithinWindow stores a repeat of the same delivery
// once, in the same folder only, and again once the window has passed or
// the first copy was removed.
func TestDeliverOnceRepeatWithinWindow(t *testing.T) {
	s := newTestStore(t)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s.now = func() time.Time { return now }
	key := sha256.Sum256([]byte("same bytes"))
	id1, dup, err := s.DeliverOnce(key, "agent", "inbox", testMessage(1), "a", []byte("same bytes"), nil)
	if err != nil || dup {
		t.Fatal(id1, dup, err)
	}
	now = now.Add(DedupWindow - time.Second)
	if id, dup, err := s.DeliverOnce(key, "agent", "inbox", testMessage(1), "a", []byte("same bytes"), nil); err != nil || !dup || id != id1 {
		t.Errorf("repeat within the window = %q %v %v, want %q true nil", id, dup, err, id1)
	}
	if _, dup, _ := s.DeliverOnce(key, "agent", "archive", testMessage(1), "a", []byte("same bytes"), nil); dup {
		t.Errorf("duplicate detected across folders")
	}
	now = now.Add(2 * time.Second)
	id2, dup, err := s.DeliverOnce(key, "agent", "inbox", testMessage(1), "a", []byte("same bytes"), nil)
	if err != nil || dup || id2 == id1 {
		t.Errorf("repeat after the window = %q %v %v, want a new message", id2, dup, err)
	}
	// A remembered delivery whose file the owner removed is stored again.
	os.Remove(filepath.Join(s.Path("agent"), "inbox", id2+".md"))
	if id3, dup, err := s.DeliverOnce(key, "agent", "inbox", testMessage(1), "a", []byte("same bytes"), nil); dup || err != nil || id3 == id2 {
		t.Errorf("Deliver after removal: %q dup %v err %v", id3, dup, err)
	}
}

// TestDeliverOnceWaitsForTheCopyInFlight has a repeat arrive while the first
// copy is being written (held by the test in testHookBeforeWrite). The repeat
// must not answer while the write is held, and must be woken by the write's
// end: in a synctest bubble, once every goroutine is blocked again after the
// release, the repeat has answered. A waiter that sleeps and polls is still
// asleep then, and fails. It answers with the first copy's id, or, when that
// write failed, is stored itself.
func TestDeliverOnceWaitsForTheCopyInFlight(t *testing.T) {
	for _, firstFails := range []bool{false, true} {
		name := "first stored"
		if firstFails {
			name = "first failed"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newTestStore(t)
				key := sha256.Sum256([]byte("in flight"))
				writing, release := make(chan struct{}), make(chan struct{})
				var writes atomic.Int32
				testHookBeforeWrite = func(string, string) error {
					if writes.Add(1) > 1 {
						return nil // the repeat's own write, after a failed first one
					}
					close(writing)
					<-release
					if firstFails {
						return os.ErrDeadlineExceeded
					}
					return nil
				}
				t.Cleanup(func() { testHookBeforeWrite = nil })
				type result struct {
					id  string
					dup bool
					err error
				}
				deliver := func(out chan<- result) {
					id, dup, err := s.DeliverOnce(key, "agent", "inbox", testMessage(2), "b", []byte("in flight"), nil)
					out <- result{id, dup, err}
				}
				first, repeat := make(chan result, 1), make(chan result, 1)
				go deliver(first)
				<-writing
				go deliver(repeat)
				synctest.Wait()
				var r result
				answered := false
				select {
				case r = <-repeat:
					answered = true
					t.Errorf("the repeat answered %+v while the first copy was still being written", r)
				default:
				}

				close(release)
				synctest.Wait()
				if !answered {
					select {
					case r = <-repeat:
					default:
						t.Error("the first write finished but the repeat was not woken")
						r = <-repeat // let it end, so that the bubble can
					}
				}
				f := <-first
				switch {
				case firstFails && f.err == nil:
					t.Errorf("first copy = %q, want the injected failure", f.id)
				case !firstFails && (f.err != nil || f.dup):
					t.Errorf("first copy = %q %v %v, want stored", f.id, f.dup, f.err)
				case r.err != nil:
					t.Errorf("repeat: %v", r.err)
				case !firstFails && (!r.dup || r.id != f.id):
					t.Errorf("repeat of a stored copy = %q %v, want %q true", r.id, r.dup, f.id)
				case firstFails && (r.dup || r.id == "" || !s.Has("agent", "inbox", r.id)):
					t.Errorf("repeat of a failed copy = %q %v, want stored", r.id, r.dup)
				}
			})
		})
	}
}

// TestDeliverOnceMemoryIsBounded: deliveries leave memory once written
// (the store remembers them on disk); only those in flight are held.
func TestDeliverOnceMemoryIsBounded(t *testing.T) {
	var r recentDeliveries
	now := time.Now()
	var inFlight *recentDelivery
	for i := range 1000 {
		_, e := r.claim(recentKey{mailbox: "m", folder: "inbox", key: sha256.Sum256([]byte{byte(i), byte(i >> 8)})}, now)
		if i == 500 {
			inFlight = e
			continue
		}
		r.finish(e, "x", nil)
	}
	if len(r.byKey) != 1 || r.byKey[inFlight.key] != inFlight {
		t.Errorf("holding %d deliveries, want the one in flight", len(r.byKey))
	}
}

// Deliveries are remembered across a restart of the store.
func TestDeliverOnceAcrossRestart(t *testing.T) {
	s := newTestStore(t)
	key := sha256.Sum256([]byte("before the restart"))
	id1, _, err := s.DeliverOnce(key, "agent", "inbox", testMessage(1), "a", []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s)
	if id, dup, err := s.DeliverOnce(key, "agent", "inbox", testMessage(1), "a", []byte("x"), nil); err != nil || !dup || id != id1 {
		t.Errorf("repeat after a restart = %q %v %v, want %q true nil", id, dup, err, id1)
	}
	if got := listIDs(t, s, "inbox"); len(got) != 1 {
		t.Errorf("inbox %v", got)
	}
}

// The filter in front of the deliveries database never forgets a delivery
// (one it lost would be stored twice) and lets few others through to the
// database; reopened, it holds what the database holds.
func TestDeliveriesFilter(t *testing.T) {
	path := filepath.Join(t.TempDir(), DeliveriesFile)
	x, err := openDeliveriesDB(path)
	if err != nil {
		t.Fatal(err)
	}
	key := func(i int) DeliveryKey { return sha256.Sum256([]byte{byte(i), byte(i >> 8), byte(i >> 16)}) }
	for i := range 20000 {
		x.add("agent", "inbox", key(i))
	}
	if err := x.remember(&dedupRec{mailbox: "agent", folder: "inbox", identity: "x", key: key(7), id: "a", at: time.Now().UnixNano()}); err != nil {
		t.Fatal(err)
	}
	for i := range 20000 {
		if !x.mayHave("agent", "inbox", key(i)) {
			t.Fatalf("delivery %d forgotten", i)
		}
	}
	through := 0
	for i := 20000; i < 40000; i++ {
		if x.mayHave("agent", "inbox", key(i)) {
			through++
		}
	}
	if through > 200 || x.mayHave("agent", "archive", key(7)) && x.mayHave("other", "inbox", key(7)) {
		t.Errorf("%d of 20000 unseen deliveries pass the filter", through)
	}
	x.close()
	x, err = openDeliveriesDB(path)
	if err != nil {
		t.Fatal(err)
	}
	defer x.close()
	if !x.mayHave("agent", "inbox", key(7)) {
		t.Error("reopened, the filter forgot a remembered delivery")
	}
}
