package control

import (
	"slices"
	"sync"
	"time"
)

// nameLocks keeps what a mailbox name means still while requests and
// deliveries use it. A request on a mailbox holds its name shared from
// before the access check until its handler returns, and an inbound
// delivery from routing until its copy is stored and announced (HoldNameWithin);
// deleting a mailbox and creating one hold the name alone. So a request
// checked against one owner's mailbox acts on that mailbox, and a message
// judged by one owner's trusted senders is stored in that owner's mailbox,
// never in another user's created under the same name meanwhile.
//
// Only names in use have an entry; the map does not grow with the names
// requests make up.
type nameLocks struct {
	mu sync.Mutex
	m  map[string]*nameLock
}

// nameWait is told of each exclusive hold that has to wait, the name being
// held by others (a variable so that a test can see a delete wait).
var nameWait = func(name string) {}

// SwapNameWait replaces what is told of each delete or create of a mailbox
// that has to wait for its name, and returns the one it replaced. It is for
// tests: the daemon's see a delete wait for a delivery with it.
func SwapNameWait(f func(name string)) func(name string) {
	old := nameWait
	nameWait = f
	return old
}

// HoldNames holds each of names shared, as a request on those mailboxes
// does, and returns what lets them go: deleting or creating a mailbox of
// one of those names waits until then. Hold them all in one call: names
// are taken in sorted order, and a second call made while a first holds
// names may wait behind a delete that waits for the first.
func (s *Server) HoldNames(names ...string) (release func()) {
	return s.names.share(names)
}

// HoldNamesAlone holds each of names alone, as deleting or creating a
// mailbox does: it waits until no request on a mailbox of one of those
// names is between its access check and its end, and no request passes its
// check until the release. Names are taken in sorted order, once each. The
// daemon's reload holds the names it declares or stops declaring while it
// decides who owns them.
func (s *Server) HoldNamesAlone(names ...string) (release func()) {
	return s.names.alone(names)
}

// TryHoldName holds name shared, as HoldNames does, unless a delete or a
// create of a mailbox of that name holds it or waits for it: ok is then
// false and nothing is held. It is for a caller that must not wait, such as
// one holding a lock the delete takes.
func (s *Server) TryHoldName(name string) (release func(), ok bool) {
	return s.names.tryShare(name)
}

// HoldNameWithin holds name shared, as HoldNames does, waiting at most wait
// for a delete or a create of a mailbox of that name that holds it or
// waits for it: ok is false when the wait ran out, and nothing is held.
// The inbound path holds each copy's name so, one name to a copy: a
// mailbox whose delete waits behind its owner's long request delays no
// copy for another mailbox, and its own copy is answered "try again" within
// wait instead of holding the sender until the delete is done.
func (s *Server) HoldNameWithin(name string, wait time.Duration) (release func(), ok bool) {
	return s.names.shareWithin(name, wait)
}

type nameLock struct {
	sync.RWMutex
	users int // requests holding or waiting for it
}

func (l *nameLocks) get(name string) *nameLock {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]*nameLock{}
	}
	n := l.m[name]
	if n == nil {
		n = &nameLock{}
		l.m[name] = n
	}
	n.users++
	return n
}

func (l *nameLocks) put(name string, n *nameLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n.users--; n.users == 0 {
		delete(l.m, name)
	}
}

// share holds each of names shared and returns what lets them go. Names are
// taken in sorted order, once each, so that two requests naming the same
// mailboxes in another order cannot wait for each other behind a delete.
func (l *nameLocks) share(names []string) (release func()) {
	sorted := slices.Compact(slices.Sorted(slices.Values(names)))
	held := make([]*nameLock, len(sorted))
	for i, name := range sorted {
		held[i] = l.get(name)
		held[i].RLock()
	}
	return func() {
		for i, name := range sorted {
			held[i].RUnlock()
			l.put(name, held[i])
		}
	}
}

// tryShare holds name shared if it is free of exclusive holds and of
// waiters for one.
func (l *nameLocks) tryShare(name string) (release func(), ok bool) {
	n := l.get(name)
	if !n.TryRLock() {
		l.put(name, n)
		return nil, false
	}
	return func() {
		n.RUnlock()
		l.put(name, n)
	}, true
}

// shareWithin holds name shared, waiting at most wait for it. A wait that
// runs out leaves a goroutine waiting for the lock, which lets it go as
// soon as it has it.
func (l *nameLocks) shareWithin(name string, wait time.Duration) (release func(), ok bool) {
	if release, ok := l.tryShare(name); ok {
		return release, true
	}
	n := l.get(name)
	var mu sync.Mutex
	held, gaveUp := false, false
	got := make(chan struct{})
	go func() {
		n.RLock()
		mu.Lock()
		defer mu.Unlock()
		if gaveUp {
			n.RUnlock()
			l.put(name, n)
			return
		}
		held = true
		close(got)
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-got:
	case <-t.C:
		mu.Lock()
		defer mu.Unlock()
		if !held {
			gaveUp = true
			return nil, false
		}
	}
	return func() {
		n.RUnlock()
		l.put(name, n)
	}, true
}

// alone holds each of names alone, in sorted order, once each.
func (l *nameLocks) alone(names []string) (release func()) {
	sorted := slices.Compact(slices.Sorted(slices.Values(names)))
	held := make([]func(), len(sorted))
	for i, name := range sorted {
		held[i] = l.exclusive(name)
	}
	return func() {
		for _, r := range held {
			r()
		}
	}
}

// exclusive holds name alone: no request on a mailbox of that name is
// between its access check and its end while it is held.
func (l *nameLocks) exclusive(name string) (release func()) {
	n := l.get(name)
	if !n.TryLock() {
		nameWait(name)
		n.Lock()
	}
	return func() {
		n.Unlock()
		l.put(name, n)
	}
}
