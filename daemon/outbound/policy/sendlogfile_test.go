package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/internal/testwait"
)

// TestSendLogRefusesWhatIsNoRegularFile: the send log is opened by name at
// start (LogVersion, OpenRateLimiter) and again after each rewrite. A
// symbolic link in its place is refused there, not followed (the file it
// leads to stays as it was), and a FIFO is refused without waiting for its
// other end, each with an error naming the path.
func TestSendLogRefusesWhatIsNoRegularFile(t *testing.T) {
	other := filepath.Join(t.TempDir(), "precious")
	const kept = "mailctl ratelimit log 2\n1 0 \"not the limiter's\"\n"
	if err := os.WriteFile(other, []byte(kept), 0o600); err != nil {
		t.Fatal(err)
	}
	clk := testclock.New()
	for _, what := range []string{"a symbolic link", "a FIFO"} {
		path := filepath.Join(t.TempDir(), "ratelimit.log")
		plant := func() {
			os.Remove(path)
			if what == "a FIFO" {
				testwait.FIFO(t, path)
			} else if err := os.Symlink(other, path); err != nil {
				t.Fatal(err)
			}
		}
		refused := func(call string, err error) {
			t.Helper()
			if !errors.Is(err, safeio.ErrNotRegular) || !strings.Contains(err.Error(), path) {
				t.Errorf("%s: %s: %v, want it refused as no regular file, naming %s", what, call, err, path)
			}
		}
		plant()
		refused("LogVersion", testwait.Returns(t, "LogVersion on "+what, func() error {
			_, err := LogVersion(path)
			return err
		}))
		refused("OpenRateLimiter", testwait.Returns(t, "OpenRateLimiter on "+what, func() error {
			r, err := OpenRateLimiter(path, clk.Now, nil, nil)
			if err == nil {
				r.Close()
			}
			return err
		}))

		os.Remove(path)
		r, err := OpenRateLimiter(path, clk.Now, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		// What a rewrite opens after its rename: planted between the two.
		plant()
		r.mu.Lock()
		err = testwait.Returns(t, "the send log's reopen on "+what, func() error { return r.log.reopen(0) })
		r.mu.Unlock()
		refused("reopen", err)
		r.Close()
	}
	if b, _ := os.ReadFile(other); string(b) != kept {
		t.Errorf("the file a link in the send log's place leads to now holds %q", b)
	}
}
