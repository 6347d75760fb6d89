package daemon

import (
	"context"
	"fmt"
	"net/smtp"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// TestHookCannotReadTheDaemonsDescriptors starts the daemon with a
// root-only file left open on fd 7, as a careless init script could, and
// has mail wake a hook that lists its descriptors and reads fd 7: the hook,
// running as the mailbox owner, holds 0, 1 and 2 only.
func TestHookCannotReadTheDaemonsDescriptors(t *testing.T) {
	owner := myName(t)
	if os.Geteuid() == 0 {
		owner = testusers.Create(t, "mcfd").Name
	}
	td := startDaemon(t, fmt.Sprintf(`
[[mailboxes]]
name = "agent"
owner = %q

[[hooks]]
name = "fds"
mailbox = "agent"
event = "on_receive"
fire_on_untrusted = true
cmd = ["/bin/sh", "-c", "exec 1>&2; ls /proc/$$/fd; cat <&7"]
`, owner))
	cfgPath, socket := td.cfg.File, td.socket
	td.stop()

	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("ROOT-ONLY-SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	var files []*os.File
	for range 4 {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files = append(files, f)
	}
	sf, err := os.Open(secret)
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	files = append(files, sf) // fd 3+4 = 7 in the daemon
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "MAILCTL_TEST_DAEMON="+cfgPath)
	cmd.ExtraFiles = files
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var c *protocol.Client
	for c == nil {
		if c, err = protocol.Dial(ctx, socket); err != nil {
			if ctx.Err() != nil {
				t.Fatalf("the daemon did not start: %v", err)
			}
			c = nil
			time.Sleep(20 * time.Millisecond)
		}
	}
	defer c.Close()
	var st protocol.Status
	if err := c.Call(ctx, protocol.VerbStatus, nil, &st); err != nil {
		t.Fatal(err)
	}
	addr := ""
	for _, l := range st.Listeners {
		if !strings.HasPrefix(l, "control:") && !strings.HasPrefix(l, "lmtp:") {
			addr = l
		}
	}
	if err := smtp.SendMail(addr, nil, "s@remote.test", []string{"agent@example.test"}, []byte("Subject: wake\r\n\r\nx\r\n")); err != nil {
		t.Fatal(err)
	}
	// A run is recorded once the hook has finished.
	var runs protocol.HookRuns
	for len(runs.Runs) == 0 {
		if ctx.Err() != nil {
			t.Fatal("the hook never ran")
		}
		time.Sleep(20 * time.Millisecond)
		if err := c.Call(ctx, protocol.VerbHookRuns, protocol.HookRunsArgs{Name: "fds"}, &runs); err != nil {
			t.Fatal(err)
		}
	}
	// ls prints the descriptors one a line; cat's error (fd 7 closed) follows.
	tail := runs.Runs[0].StderrTail
	var fds []string
	for _, line := range strings.Split(tail, "\n") {
		if _, err := strconv.Atoi(line); err != nil {
			break
		}
		fds = append(fds, line)
	}
	if strings.Contains(tail, "ROOT-ONLY-SECRET") || strings.Join(fds, " ") != "0 1 2" {
		t.Errorf("the hook holds descriptors %q, want 0 1 2 only: %q", fds, tail)
	}
}
