package control

import (
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testwait"
)

// A shared hold that waits within a bound: it is had at once when the name
// is free, after the wait when a delete lets the name go in time, and not
// at all when the delete holds it past the bound; a hold given up leaves
// nothing behind once the name is free (the next delete takes it).
func TestShareWithin(t *testing.T) {
	var l nameLocks
	release, ok := l.shareWithin("a", time.Hour)
	if !ok {
		t.Fatal("a free name was not held")
	}
	release()

	// A delete holds the name; the hold waits and has it once let go.
	deleted := l.exclusive("a")
	got := make(chan bool, 1)
	go func() {
		release, ok := l.shareWithin("a", time.Hour)
		if ok {
			release()
		}
		got <- ok
	}()
	testwait.For(t, "the hold to wait for the delete", func() bool { return l.users("a") == 2 })
	deleted()
	if !testwait.Returns(t, "the hold", func() bool { return <-got }) {
		t.Error("a hold whose name was let go within its wait was refused")
	}

	// Held past the bound: refused, and nothing of it stays.
	deleted = l.exclusive("a")
	if _, ok := l.shareWithin("a", time.Millisecond); ok {
		t.Fatal("a hold was had while a delete held its name")
	}
	deleted()
	testwait.Returns(t, "a delete after a hold that gave up", func() bool {
		l.exclusive("a")()
		return true
	})
	testwait.For(t, "the name's entry to go", func() bool { return l.users("a") == 0 })
}

// users is how many hold or wait for name.
func (l *nameLocks) users(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.m[name]; n != nil {
		return n.users
	}
	return 0
}

// A delete that is told it waits is already waiting: from then on no new
// shared hold passes it, neither one that must not wait nor one that waits
// within a bound, until the delete has had the name and let it go.
func TestWaitingDeleteStopsNewShares(t *testing.T) {
	for range 200 {
		var l nameLocks
		request := l.share([]string{"a"})
		waiting := make(chan struct{})
		keep := nameWait
		nameWait = func(string) { close(waiting) }
		done := make(chan func(), 1)
		go func() { done <- l.exclusive("a") }()
		testwait.Recv(t, "the delete to wait", waiting)
		nameWait = keep
		if r, ok := l.tryShare("a"); ok {
			r()
			t.Fatal("a share passed a delete waiting for the name")
		}
		if r, ok := l.shareWithin("a", time.Microsecond); ok {
			r()
			t.Fatal("a bounded share passed a delete waiting for the name")
		}
		request()
		deleted := testwait.Recv(t, "the delete to have the name", done)
		if r, ok := l.tryShare("a"); ok {
			r()
			t.Fatal("a share was had while the delete held the name")
		}
		deleted()
		r, ok := l.tryShare("a")
		if !ok {
			t.Fatal("the name is still held after the delete let it go")
		}
		r()
		if n := l.size(); n != 0 {
			t.Fatalf("%d names in use after everything ended, want 0", n)
		}
	}
}
