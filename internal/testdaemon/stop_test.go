package testdaemon

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// errorRecorder is a testing.TB whose Errorf records the message instead of
// failing the test, so that a test can see what Stop's failure says.
type errorRecorder struct {
	testing.TB
	failed string
}

func (r *errorRecorder) Helper() {}

func (r *errorRecorder) Errorf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

// A daemon that does not end when stopped fails its test, showing where its
// goroutines are, instead of being given up on in silence.
func TestStopFailsTheTestOfADaemonThatDoesNotEnd(t *testing.T) {
	r := &errorRecorder{TB: t}
	cancelled := false
	d := &Daemon{tb: r, cancel: func() { cancelled = true }, done: make(chan error), within: time.Millisecond}
	d.Stop()
	if !cancelled {
		t.Error("Stop did not cancel the daemon's context")
	}
	if !strings.HasPrefix(r.failed, "the daemon did not stop within 1ms; goroutines:\n") || !strings.Contains(r.failed, "goroutine ") {
		t.Errorf("a daemon that did not end failed its test with %q; want it said, with the goroutines' stacks", r.failed)
	}
}
