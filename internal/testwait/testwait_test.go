package testwait

import (
	"fmt"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records the message instead of
// ending the test, so that a test can see what a failed wait says.
type fatalRecorder struct {
	testing.TB
	failed string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

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
	r := &fatalRecorder{TB: t}
	got := recv(r, "the reply", make(chan string), 10*time.Millisecond)
	if r.failed != "timed out waiting for the reply" || got != "" {
		t.Errorf("recv of a channel nothing is sent on: failed %q, gave %q; want the wait named and the zero value", r.failed, got)
	}
}
