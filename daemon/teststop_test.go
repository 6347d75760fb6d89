package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testwait"
)

// A test daemon that does not end when stopped fails its test, showing
// where its goroutines are, instead of being given up on in silence.
func TestStopFailsTheTestOfADaemonThatDoesNotEnd(t *testing.T) {
	r := &testwait.Recorder{TB: t}
	cancelled := false
	td := &testDaemon{t: r, cancel: func() { cancelled = true }, done: make(chan error), within: time.Millisecond}
	td.stop()
	if !cancelled {
		t.Error("stop did not cancel the daemon's context")
	}
	if !strings.HasPrefix(r.Message, "the daemon did not stop within 1ms; goroutines:\n") || !strings.Contains(r.Message, "goroutine ") {
		t.Errorf("a daemon that did not end failed its test with %q; want it said, with the goroutines' stacks", r.Message)
	}
}
