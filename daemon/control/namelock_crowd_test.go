package control

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testwait"
)

// A crowd mixing every kind of hold on overlapping names: no hold is had
// while it should not be (a name held alone has no shared hold and no
// other alone), nobody waits forever, and once all have ended no name has
// an entry left. The bounded shares use bounds short enough that some run
// out as the name is let go.
func TestNameLocksCrowd(t *testing.T) {
	names := []string{"a", "b", "c", "d"}
	var l nameLocks
	var shared, alone [4]atomic.Int32
	index := func(name string) int { return slices.Index(names, name) }
	holdShared := func(name string) {
		i := index(name)
		shared[i].Add(1)
		if alone[i].Load() != 0 {
			t.Errorf("%s shared while held alone", name)
		}
	}
	holdAlone := func(name string) {
		i := index(name)
		if !alone[i].CompareAndSwap(0, 1) {
			t.Errorf("%s held alone twice", name)
		}
		if shared[i].Load() != 0 {
			t.Errorf("%s held alone while shared", name)
		}
	}
	const workers, rounds = 16, 300
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			pick := func() []string {
				var set []string
				for _, name := range names {
					if r.IntN(2) == 0 {
						set = append(set, name)
					}
				}
				if len(set) == 0 {
					set = names[:1]
				}
				return set
			}
			for range rounds {
				switch r.IntN(5) {
				case 0:
					set := pick()
					release := l.share(set)
					for _, name := range slices.Compact(slices.Sorted(slices.Values(set))) {
						holdShared(name)
					}
					for _, name := range slices.Compact(slices.Sorted(slices.Values(set))) {
						shared[index(name)].Add(-1)
					}
					release()
				case 1:
					name := names[r.IntN(len(names))]
					if release, ok := l.tryShare(name); ok {
						holdShared(name)
						shared[index(name)].Add(-1)
						release()
					}
				case 2:
					name := names[r.IntN(len(names))]
					if release, ok := l.shareWithin(name, time.Duration(r.IntN(50))*time.Microsecond); ok {
						holdShared(name)
						shared[index(name)].Add(-1)
						release()
					}
				case 3:
					name := names[r.IntN(len(names))]
					release := l.exclusive(name)
					holdAlone(name)
					alone[index(name)].Store(0)
					release()
				case 4:
					set := pick()
					release := l.alone(set)
					for _, name := range slices.Compact(slices.Sorted(slices.Values(set))) {
						holdAlone(name)
					}
					for _, name := range slices.Compact(slices.Sorted(slices.Values(set))) {
						alone[index(name)].Store(0)
					}
					release()
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	testwait.Recv(t, "the crowd to end", done)
	if n := l.size(); n != 0 {
		t.Errorf("%d names in use after everything ended, want 0", n)
	}
}

// Shares waiting when a delete lets the name go are had before the next
// delete that waits, as with the sync.RWMutex the locks once were: deletes
// and creates that keep coming on a name do not hold its requests off for
// ever.
func TestWaitingSharesGoBeforeTheNextDelete(t *testing.T) {
	keep := nameWait
	defer func() { nameWait = keep }()
	for range 50 {
		var l nameLocks
		deleted := l.exclusive("a")
		got := make(chan func(), 2)
		go func() { got <- l.share([]string{"a"}) }()
		go func() {
			release, ok := l.shareWithin("a", time.Hour)
			if !ok {
				release = nil
			}
			got <- release
		}()
		// Yielding once lets the shares reach their wait before the
		// first look, which spares most rounds For's pause between looks;
		// For alone is what the round relies on.
		runtime.Gosched()
		testwait.For(t, "the shares to wait", func() bool { return l.users("a") == 3 })
		// The next delete is told it waits once it is counted as waiting.
		waiting := make(chan struct{})
		nameWait = func(string) { close(waiting) }
		next := make(chan func(), 1)
		go func() { next <- l.exclusive("a") }()
		testwait.Recv(t, "the next delete to wait", waiting)
		nameWait = keep
		if n := l.users("a"); n != 4 {
			t.Fatalf("%d requests hold or wait for the name once the next delete waits, want 4", n)
		}
		deleted()
		for range 2 {
			release := testwait.Recv(t, "a share waiting before the delete let go", got)
			if release == nil {
				t.Fatal("a share waiting within an hour was refused")
			}
			select {
			case <-next:
				t.Fatal("a delete had the name while a share held it")
			default:
			}
			release()
		}
		testwait.Recv(t, "the next delete", next)()
		if n := l.size(); n != 0 {
			t.Fatalf("%d names in use after everything ended, want 0", n)
		}
	}
}
