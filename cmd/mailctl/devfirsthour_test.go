package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testproc"
	"github.com/mailctl/mailctl/internal/testusers"
)

// TestDevBannerLinesRunForItsUser: every line the dev banner prints runs,
// pasted into a fresh shell, for the user who started dev, root included,
// with and without --deliver. As root the agent wiring line used to be
// `agents setup claude-code`, which refuses root and exited 4; root's
// banner now prints the line that shows the snippet. With --deliver the
// send line mailed bob@example.org for real with the body "captured, not
// sent"; it now sends to the mailbox itself. TestREADMEDevBannerLinesRun
// walks the same lines as an ordinary user through go run.
func TestDevBannerLinesRunForItsUser(t *testing.T) {
	for _, flags := range [][]string{nil, {"--deliver"}} {
		t.Run(strings.Join(append([]string{"dev"}, flags...), " "), func(t *testing.T) {
			_, banner, _ := startDev(t, t.TempDir(), flags...)
			lines := bannerLines(banner.String())
			if len(lines) < 5 {
				t.Fatalf("banner has %d command lines:\n%s", len(lines), banner.String())
			}
			home := t.TempDir()
			testusers.QuietGo(t, home) // agents setup asks the go command
			var wired, sent bool
			for _, l := range lines {
				if strings.HasPrefix(l, "swaks ") {
					if _, err := exec.LookPath("swaks"); err != nil {
						t.Logf("swaks not installed; skipping %q", l)
						continue
					}
				}
				wired = wired || strings.Contains(l, "agents setup")
				cmd := exec.Command("/bin/sh", "-c", l)
				// The banner's binary is a copy of this test binary: the
				// variable makes it act as mailctl.
				cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "MAILCTL_AS_BINARY=1"}
				cmd.Dir = home
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Errorf("banner line %q failed in a fresh shell (uid %d): %v\n%s", l, os.Geteuid(), err, out)
				}
				if strings.Contains(l, " send ") {
					sent = true
					if len(flags) > 0 && (strings.Contains(l, "example.org") || strings.Contains(l, "captured") || !strings.Contains(string(out), "delivered")) {
						t.Errorf("with --deliver the send line %q mails elsewhere or says captured:\n%s", l, out)
					}
				}
			}
			if !wired || !sent {
				t.Fatalf("banner has no agent wiring line (%v) or no send line (%v):\n%s", wired, sent, banner.String())
			}
		})
	}
}

// TestDevRefusesAnotherOwnerSayingWhy: the user who runs dev, asking for a
// mailbox owned by someone else (--owner), is told that dev keeps mailboxes
// for its user only. It was told "only root can create a mailbox for
// another user", which sent it to sudo, and root is refused on that socket
// too (TestDialRefusesAnotherUsersSocket).
func TestDevRefusesAnotherOwnerSayingWhy(t *testing.T) {
	bin, dir, as := devAsUser(t, "mcown")
	env := append(os.Environ(), "MAILCTL_AS_BINARY=1", "MAILCTL_SOCKET="+filepath.Join(dir, "mailctl.sock"))
	dev := as(exec.Command(bin, "dev", "--dir", dir, "--smtp", freePort(t)))
	dev.Env = env
	var out testproc.Output
	dev.Stdout, dev.Stderr = &out, &out
	p := &testproc.Proc{}
	if err := p.Start(dev); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill9)
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), "Ctrl-C"); {
		if time.Now().After(deadline) || p.Exited() {
			t.Fatalf("dev did not start:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	c := as(exec.Command(bin, "mailboxes", "create", "elsewhere", "--owner", "root"))
	c.Env = env
	got, err := c.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 4 || !strings.Contains(string(got), "a mailctl dev instance") ||
		strings.Contains(string(got), "only root can") {
		t.Fatalf("--owner root on dev: %v, want forbidden (exit 4) saying dev keeps mailboxes for its user:\n%s", err, got)
	}
	if _, err := os.Lstat(filepath.Join(dir, "state", "mailboxes", "elsewhere")); !os.IsNotExist(err) {
		t.Errorf("the refused create left a folder: %v", err)
	}
}

// TestDevSendWithoutTheCapturedMailboxSaysSo: with the mailbox "captured"
// deleted, a send to another domain fails saying that mailbox is gone and
// how to make it again, not "No such mailbox here", which reads as if the
// recipient were unknown; made again, it captures again.
func TestDevSendWithoutTheCapturedMailboxSaysSo(t *testing.T) {
	_, _, sock := startDev(t, t.TempDir())
	env := []string{"MAILCTL_SOCKET=" + sock}
	if _, e, code := mailctl(t, env, "mailboxes", "delete", "captured", "--force", "--yes"); code != 0 {
		t.Fatalf("delete captured: exit %d: %s", code, e)
	}
	out, e, code := mailctl(t, env, "send", "--from", "agent", "--to", "bob@example.org", "--subject", "gone", "--body", "x")
	if code == 0 || !strings.Contains(out+e, `the mailbox "captured", where mailctl dev keeps outbound mail, no longer exists`) ||
		!strings.Contains(out+e, "mailctl mailboxes create captured") {
		t.Fatalf("send with captured deleted: exit %d, want a failure naming the captured mailbox:\n%s%s", code, out, e)
	}
	if _, e, code := mailctl(t, env, "mailboxes", "create", "captured"); code != 0 {
		t.Fatalf("create captured: exit %d: %s", code, e)
	}
	if out, e, code := mailctl(t, env, "send", "--from", "agent", "--to", "bob@example.org", "--subject", "back", "--body", "x"); code != 0 || !strings.Contains(out, "captured") {
		t.Fatalf("send after captured is made again: exit %d:\n%s%s", code, out, e)
	}
}

// TestDevInAFolderItCannotWriteSaysDir: dev started where its user cannot
// write (its default --dir is relative: from /, or another user's checkout)
// says how to go on, not only "permission denied".
func TestDevInAFolderItCannotWriteSaysDir(t *testing.T) {
	bin, parent := os.Args[0], t.TempDir()
	var as func(*exec.Cmd) *exec.Cmd = func(c *exec.Cmd) *exec.Cmd { return c }
	if os.Geteuid() == 0 {
		u := testusers.Create(t, "mcro")
		bin = testusers.Executable(t)
		parent = testusers.SharedDir(t)
		as = func(c *exec.Cmd) *exec.Cmd { return testusers.As(c, u.UID, u.GID) }
	}
	ro := filepath.Join(parent, "ro")
	if err := os.Mkdir(ro, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(ro, 0o755) })
	dev := as(exec.Command(bin, "dev", "--smtp", freePort(t)))
	dev.Dir = ro
	dev.Env = append(os.Environ(), "MAILCTL_AS_BINARY=1")
	out, err := dev.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "permission denied") || !strings.Contains(string(out), "run it from a folder you can write") ||
		!strings.Contains(string(out), "mailctl dev --dir ") {
		t.Fatalf("dev in a folder it cannot write: %v, want the refusal naming --dir:\n%s", err, out)
	}
	// A --dir given that is not the user's (another user's dev folder).
	dev = as(exec.Command(bin, "dev", "--dir", filepath.Join(ro, "d"), "--smtp", freePort(t)))
	dev.Env = append(os.Environ(), "MAILCTL_AS_BINARY=1")
	out, err = dev.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "name a folder of your own: mailctl dev --dir ") {
		t.Fatalf("dev --dir in a folder it cannot write: %v, want the refusal naming --dir:\n%s", err, out)
	}
}

// devAsUser is what a dev test runs and where: the test binary in a fresh
// folder of the caller's, or, run as root (hooks never run as root, and
// dev refuses it), the test binary as a new user named from prefix, in a
// folder of that user's; as makes a command run as that user.
func devAsUser(t *testing.T, prefix string) (bin, dir string, as func(*exec.Cmd) *exec.Cmd) {
	t.Helper()
	if os.Geteuid() != 0 {
		return os.Args[0], t.TempDir(), func(c *exec.Cmd) *exec.Cmd { return c }
	}
	u := testusers.Create(t, prefix)
	dir = filepath.Join(testusers.SharedDir(t), "dev")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, int(u.UID), int(u.GID)); err != nil {
		t.Fatal(err)
	}
	return testusers.Executable(t), dir, func(c *exec.Cmd) *exec.Cmd { return testusers.As(c, u.UID, u.GID) }
}
