package daemon

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// startDaemonProcess runs the daemon as a child process on td's config.
func startDaemonProcess(t *testing.T, cfgPath, socket string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := spawnDaemon(t, cfgPath, env...)
	// The socket takes connections from the moment it listens, before the
	// SMTP listeners are up; it answers them once the daemon is ready, so
	// an answer, not a connection, says the daemon is up.
	// (A restart replays what a crash left before it is ready: the bound
	// is generous.)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if daemonAnswers(socket) {
			return cmd
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Kill()
	t.Fatal("daemon process did not start")
	return nil
}

// daemonAnswers reports whether the daemon at socket answers a request.
func daemonAnswers(socket string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := protocol.Dial(ctx, socket)
	if err != nil {
		return false
	}
	defer c.Close()
	return c.Call(ctx, protocol.VerbVersion, nil, nil) == nil
}

// spawnDaemon starts the daemon as a child process on a config, with env
// added to its environment, and does not wait for it.
func spawnDaemon(t *testing.T, cfgPath string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), "MAILCTL_TEST_DAEMON="+cfgPath), env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// TestKillNineDuringWrites kills the daemon with SIGKILL in the middle of a
// burst of mailbox creations and read-flag changes, restarts it, and checks
// that everything acknowledged is there, whole, and nothing partial is visible.
func TestKillNineDuringWrites(t *testing.T) {
	// Three rounds of creations by the user running the test, however many
	// a round makes before its kill: more than one user other than root may
	// own by default.
	td := startDaemon(t, "[mailbox_rules]\nmax_per_owner = 10000\n")
	cfgPath, socket := td.cfg.File, td.socket
	td.stop()

	for round := 0; round < 3; round++ {
		cmd := startDaemonProcess(t, cfgPath, socket)
		var mu sync.Mutex
		acked := map[string]bool{}
		// The kill comes at a random point after the first acknowledgement,
		// however slowly the daemon starts taking requests (the race
		// detector, a loaded machine): before it, there is nothing to check.
		first := make(chan struct{})
		var firstOnce sync.Once
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var firstErr error // what ended a writer, under mu
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				ended := func(err error) {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
				c, err := protocol.Dial(ctx, socket)
				if err != nil {
					ended(err)
					return
				}
				defer c.Close()
				for i := 0; ctx.Err() == nil; i++ {
					name := fmt.Sprintf("r%dw%dn%d", round, w, i)
					rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
					err := c.Call(rctx, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: name}, nil)
					rcancel()
					if err != nil {
						ended(err) // the kill, or what the test must name
						return
					}
					mu.Lock()
					acked[name] = true
					mu.Unlock()
					firstOnce.Do(func() { close(first) })
				}
			}(w)
		}
		writersEnded := make(chan struct{})
		go func() { wg.Wait(); close(writersEnded) }()
		select {
		case <-first:
		case <-writersEnded:
			// Every writer stopped before the kill: a refusal, not a crash.
			cmd.Process.Kill()
			cmd.Wait()
			cancel()
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("round %d: every writer stopped before the kill, %d creations acknowledged: %v", round, len(acked), firstErr)
		case <-time.After(60 * time.Second):
			t.Fatalf("round %d: no mailbox creation was acknowledged in 60 s", round)
		}
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		cancel()
		wg.Wait()
		if len(acked) == 0 {
			t.Fatalf("round %d: nothing was acknowledged before the kill", round)
		}

		// Restart: the stale socket is replaced, every acknowledged mailbox is back.
		cmd = startDaemonProcess(t, cfgPath, socket)
		c, err := protocol.Dial(context.Background(), socket)
		if err != nil {
			t.Fatal(err)
		}
		var list protocol.MailboxList
		if err := c.Call(context.Background(), protocol.VerbMailboxList, nil, &list); err != nil {
			t.Fatal(err)
		}
		c.Close()
		have := map[string]bool{}
		for _, m := range list.Mailboxes {
			have[m.Name] = true
		}
		for name := range acked {
			if !have[name] {
				t.Errorf("round %d: acknowledged mailbox %s missing after kill -9", round, name)
			}
		}
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()

		// Nothing partial is visible: every registry entry parses, every
		// mailbox folder is complete, and no temp file survives a restart.
		reg, problems, err := registry.Open(filepath.Join(filepath.Dir(filepath.Dir(socket)), "state", "registry"))
		if err != nil || len(problems) > 0 {
			t.Fatalf("registry after crash: %v %v", err, problems)
		}
		st, err := store.Open(filepath.Join(filepath.Dir(filepath.Dir(socket)), "state", "mailboxes"))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range reg.Mailboxes() {
			for _, f := range []string{"inbox", "sent", "archive", "trash", "drafts"} {
				if fi, err := os.Stat(filepath.Join(st.Path(m.Name), f)); err != nil || !fi.IsDir() {
					t.Errorf("registered mailbox %s lacks folder %s: %v", m.Name, f, err)
				}
			}
		}
		filepath.Walk(filepath.Join(filepath.Dir(filepath.Dir(socket)), "state", "registry"), func(p string, fi os.FileInfo, err error) error {
			if err == nil && strings.Contains(filepath.Base(p), ".tmp-") {
				t.Errorf("temp file visible after restart: %s", p)
			}
			return nil
		})
		st.Close()
	}
}
