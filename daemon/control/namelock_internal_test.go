package control

import "testing"

// Names are held only while in use: however many names requests make up,
// the locks' map is empty once they have ended, and a name named twice in
// one request is held once.
func TestNameLocksKeepOnlyNamesInUse(t *testing.T) {
	var l nameLocks
	for i := range 1000 {
		release := l.share([]string{"b", string(rune('c' + i%24)), "b"})
		if n := l.m["b"].users; n != 1 {
			t.Fatalf("a name the request names twice is held %d times, want once", n)
		}
		if !l.get("b").TryRLock() {
			t.Fatal("a shared name refuses another share")
		}
		l.m["b"].RUnlock()
		l.put("b", l.m["b"])
		if l.m["b"].TryLock() {
			t.Fatal("a shared name can be held alone")
		}
		release()
	}
	release := l.exclusive("b")
	if n := l.size(); n != 1 {
		t.Errorf("%d names in use, want 1", n)
	}
	release()
	if n := l.size(); n != 0 {
		t.Errorf("%d names in use after every request ended, want 0", n)
	}
}

// size is the number of names in use.
func (l *nameLocks) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}
