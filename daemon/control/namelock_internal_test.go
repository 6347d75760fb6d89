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
		r, ok := l.tryShare("b")
		if !ok {
			t.Fatal("a shared name refuses another share")
		}
		r()
		if n := l.m["b"].readers; n != 1 {
			t.Fatalf("a shared name has %d shared holds after one of two was let go, want 1", n)
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

func TestNamesHeldAloneTogether(t *testing.T) {
	var l nameLocks
	release := l.alone([]string{"d", "a", "d", "c"})
	for _, name := range []string{"a", "c", "d"} {
		if r, ok := l.tryShare(name); ok {
			r()
			t.Errorf("%s is shared while held alone", name)
		}
	}
	if n := l.size(); n != 3 {
		t.Errorf("%d names in use, want 3 (a name given twice is held once)", n)
	}
	release()
	for _, name := range []string{"a", "c", "d"} {
		r, ok := l.tryShare(name)
		if !ok {
			t.Fatalf("%s is still held after the release", name)
		}
		r()
	}
	if n := l.size(); n != 0 {
		t.Errorf("%d names in use after the release, want 0", n)
	}
}

// size is the number of names in use.
func (l *nameLocks) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}
