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
	r := testRunner(t)
	other := newTestUser(t)
	for _, tc := range []struct {
		name string
		home bool // the home is the dead mount, not a folder holding cmd[0]
	}{
		{"cmd0", false},
		{"home", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newTestUser(t)
			dir := u.Dir
			if !tc.home {
				dir = filepath.Join(u.Dir, "fuse")
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			// After the mount is gone (cleanups run last first), the
			// process that waited on it is killed (until it execs, it
			// holds a copy of the test's /dev/fuse descriptor, so closing
			// that alone does not end the connection) and reaped before
			// its user goes.
			t.Cleanup(func() {
				killUID(u.UID)
				testwait.For(t, "the process that waited to start to be reaped", func() bool {
					r.mu.Lock()
					defer r.mu.Unlock()
					return r.byOwner[u.UID] == nil
				})
			})
			testmount.DeadFUSE(t, dir, false)
			h := recvHook("stuck-"+tc.name, filepath.Join(dir, "on-mail"))
			if tc.home {
				h = recvHook("stuck-"+tc.name, "/bin/true")
			}
			h.TimeoutSecs = 1
			run := testwait.Returns(t, "a run whose command never starts", func() protocol.HookRun {
				return r.Run(context.Background(), h, u.Owner, recvFacts, nil)
			})
			if !run.TimedOut || !strings.HasPrefix(run.Error, "timed out after 1s before its command started") {
				t.Errorf("run = %+v, want timed out before its command started", run)
			}
			r.Go(recvHook("next-"+tc.name, "/bin/true"), u.Owner, recvFacts, nil)
			r.Wait()
			if next := r.Log.Last("next-" + tc.name); next == nil || !strings.Contains(next.Error, "is still waiting for it") {
				t.Errorf("the owner's next run while the first still waits to start: %+v, want it dropped", next)
			}
			r.Go(recvHook("other-"+tc.name, "/bin/true"), other.Owner, recvFacts, nil)
			r.Wait()
			if run := r.Log.Last("other-" + tc.name); run == nil || run.Error != "" || run.ExitCode != 0 {
				t.Errorf("another owner's run: %+v, want it run", run)
			}
		})
	}
	if err := testwait.Returns(t, "Shutdown", func() error { return r.Shutdown(context.Background()) }); err != nil {
		t.Error(err)
	}
}
