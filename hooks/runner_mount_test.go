package hooks

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/testmount"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// TestRunWhoseCommandNeverStarts: the hook's process executes cmd[0] (and
// changes to the owner's home) before Start returns, and an owner can put
// either on a FUSE file system whose daemon never answers. The run then
// held its slot past its timeout for as long as the file system wished, and
// a shutdown waited on it. It now gives up at its timeout, and the owner's
// further runs are dropped while that process still waits to start.
func TestRunWhoseCommandNeverStarts(t *testing.T) {
	if !testmount.InNamespace(t) {
		return
	}
	u := newTestUser(t)
	dir := filepath.Join(u.Dir, "fuse")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	testmount.DeadFUSE(t, dir, false)
	r := testRunner(t)
	h := recvHook("stuck", filepath.Join(dir, "on-mail"))
	h.TimeoutSecs = 1
	run := testwait.Returns(t, "a run whose cmd[0] never answers", func() protocol.HookRun {
		return r.Run(context.Background(), h, u.Owner, recvFacts, nil)
	})
	if !run.TimedOut || !strings.HasPrefix(run.Error, "timed out after 1s before its command started") {
		t.Errorf("run = %+v, want timed out before its command started", run)
	}
	r.Go(recvHook("next", "/bin/true"), u.Owner, recvFacts, nil)
	r.Wait()
	if next := r.Log.Last("next"); next == nil || !strings.Contains(next.Error, "is still waiting for it") {
		t.Errorf("the owner's next run while the first still waits to start: %+v, want it dropped", next)
	}
	other := newTestUser(t)
	r.Go(recvHook("other", "/bin/true"), other.Owner, recvFacts, nil)
	r.Wait()
	if run := r.Log.Last("other"); run == nil || run.Error != "" || run.ExitCode != 0 {
		t.Errorf("another owner's run: %+v, want it run", run)
	}
	if err := testwait.Returns(t, "Shutdown", func() error { return r.Shutdown(context.Background()) }); err != nil {
		t.Error(err)
	}
}
