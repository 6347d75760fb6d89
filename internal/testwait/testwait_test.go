package testwait

import (
	"strings"
	"testing"
	"time"
)

func TestRecvGivesTheValue(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if got := Recv(t, "the value", ch); got != 7 {
		t.Errorf("Recv = %d, want 7", got)
	}
	close(ch)
	if got := Recv(t, "the close", ch); got != 0 {
		t.Errorf("Recv of a closed channel = %d, want 0", got)
	}
}

func TestRecvFailsNamingWhatNeverCame(t *testing.T) {
	r := &Recorder{TB: t}
	got := recv(r, "the reply", make(chan string), 10*time.Millisecond)
	if r.Message != "timed out waiting for the reply" || got != "" {
		t.Errorf("recv of a channel nothing is sent on: failed %q, gave %q; want the wait named and the zero value", r.Message, got)
	}
}

func TestStoppedPassesAServerThatEnds(t *testing.T) {
	r := &Recorder{TB: t}
	done := make(chan error, 1)
	done <- nil
	StoppedWithin(r, "the server", done, time.Hour)
	if r.Message != "" {
		t.Errorf("a server that ended failed the test: %q", r.Message)
	}
}

// A server that does not end fails the test, which is shown where each
// goroutine is stuck (here, the one that never ends, in stuckServer).
func TestStoppedFailsShowingTheStuckGoroutines(t *testing.T) {
	r := &Recorder{TB: t}
	never, done := make(chan struct{}), make(chan error)
	go stuckServer(never)
	defer close(never)
	StoppedWithin(r, "the server", done, 10*time.Millisecond)
	if !strings.HasPrefix(r.Message, "the server did not stop within 10ms; goroutines:\n") || !strings.Contains(r.Message, "testwait.stuckServer") {
		t.Errorf("a server that did not end failed the test with %q; want what was waited for and every goroutine's stack", r.Message)
	}
}

func stuckServer(never <-chan struct{}) { <-never }
