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

// nameLock is one name's state, kept under nameLocks.mu: each change is
// made in one critical section with the test that allows it, so a delete
// that is told to wait (nameWait) is already counted as waiting, and from
// then on no new shared hold passes it.
//
// As with the sync.RWMutex the locks once were, the shared holds waiting
// when a hold alone is let go are had before the next one alone: deletes
// and creates that keep coming on a name do not hold its requests off for
// ever (TestWaitingSharesGoBeforeTheNextDelete). The holds alone are had
// first come, first served: each takes a ticket, and the tickets are
// served in order (TestNameLocksServeHoldsAloneInTheOrderTheyCame), so a delete
// and a create of one name happen in the order they were asked for.
type nameLock struct {
	readers int           // shared holds
	alone   bool          // held alone
	waiting int           // exclusive holds waiting for the name
	sharing int           // shared holds waiting for the name
	freed   uint64        // holds alone let go so far
	turn    int           // shares waiting when the last hold alone was let go, not had yet
	tickets uint64        // holds alone asked for so far
	serving uint64        // the ticket of the next hold alone to be had
	users   int           // requests holding or waiting for it
	changed chan struct{} // closed when a hold is let go, while anyone waits
}

// shareable tells whether a shared hold may be had now: nothing holds the name
// alone or waits to.
func (n *nameLock) shareable() bool { return !n.alone && n.waiting == 0 }

// wake tells every waiter of the name to look again.
func (n *nameLock) wake() {
	if n.changed != nil {
		close(n.changed)
		n.changed = nil
	}
}

// next is what a waiter waits on; call it under nameLocks.mu.
func (n *nameLock) next() <-chan struct{} {
	if n.changed == nil {
		n.changed = make(chan struct{})
	}
	return n.changed
}

// enter counts a request on name, making its entry; call it under mu.
func (l *nameLocks) enter(name string) *nameLock {
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

// leave ends a request on name; call it under mu.
func (l *nameLocks) leave(name string, n *nameLock) {
	if n.users--; n.users == 0 {
		delete(l.m, name)
	}
}

// unshare lets a shared hold of name go.
func (l *nameLocks) unshare(name string, n *nameLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n.readers--; n.readers == 0 {
		n.wake()
	}
	l.leave(name, n)
}

// shareOne holds name shared, waiting for as long as a delete or a create
// holds it or waits for it, or until expired is ready (nil: no bound). ok
// is false when the bound ran out, and nothing is held then.
func (l *nameLocks) shareOne(name string, expired <-chan time.Time) (n *nameLock, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n = l.enter(name)
	if !n.shareable() {
		since := n.freed
		n.sharing++
		// Its turn came once a hold alone was let go since it began to wait.
		passes := func() bool { return n.shareable() || !n.alone && n.freed != since }
		for !passes() {
			next := n.next()
			l.mu.Unlock()
			select {
			case <-next:
				l.mu.Lock()
			case <-expired:
				l.mu.Lock()
				if passes() { // let go just as the bound ran out
					continue
				}
				n.sharing--
				l.leave(name, n)
				return nil, false
			}
		}
		n.sharing--
		if n.freed != since {
			n.turn--
		}
	}
	n.readers++
	return n, true
}

// share holds each of names shared and returns what lets them go. Names are
// taken in sorted order, once each, so that two requests naming the same
// mailboxes in another order cannot wait for each other behind a delete.
func (l *nameLocks) share(names []string) (release func()) {
	sorted := slices.Compact(slices.Sorted(slices.Values(names)))
	held := make([]*nameLock, len(sorted))
	for i, name := range sorted {
		held[i], _ = l.shareOne(name, nil)
	}
	return func() {
		for i, name := range sorted {
			l.unshare(name, held[i])
		}
	}
}

// tryShare holds name shared if it is free of exclusive holds and of
// waiters for one.
func (l *nameLocks) tryShare(name string) (release func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.m[name]; n != nil && !n.shareable() {
		return nil, false
	}
	n := l.enter(name)
	n.readers++
	return func() { l.unshare(name, n) }, true
}

// shareWithin holds name shared, waiting at most wait for it.
func (l *nameLocks) shareWithin(name string, wait time.Duration) (release func(), ok bool) {
	t := time.NewTimer(wait)
	defer t.Stop()
	n, ok := l.shareOne(name, t.C)
	if !ok {
		return nil, false
	}
	return func() { l.unshare(name, n) }, true
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
// between its access check and its end while it is held. One that has to
// wait is counted as waiting before nameWait is told, and from then on no
// new shared hold of the name is had. It waits behind every hold alone of
// the name asked for before it, too.
func (l *nameLocks) exclusive(name string) (release func()) {
	l.mu.Lock()
	n := l.enter(name)
	ticket := n.tickets
	n.tickets++
	busy := func() bool { return n.alone || n.readers > 0 || n.turn > 0 || n.serving != ticket }
	if busy() {
		n.waiting++
		l.mu.Unlock()
		nameWait(name)
		l.mu.Lock()
		for busy() {
			next := n.next()
			l.mu.Unlock()
			<-next
			l.mu.Lock()
		}
		n.waiting--
	}
	n.alone = true
	n.serving++
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		n.alone = false
		n.freed++
		n.turn = n.sharing
		n.wake()
		l.leave(name, n)
	}
}
