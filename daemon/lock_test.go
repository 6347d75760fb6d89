package daemon

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/mailctl/mailctl/store"
)

// TestSocketDirCreatedUnderAStrictUmaskLetsUsersIn: without systemd's
// RuntimeDirectory (a container, a host whose /run a reboot emptied), the
// daemon creates the socket's directory itself. Started from a shell with
// umask 077 it made /run/mailctl 0700, so no user reached the 0666 socket
// while root's doctor saw nothing wrong. The directory it creates is 0755
// whatever the umask; one that exists is left as it is (dev's own folder).
func TestSocketDirCreatedUnderAStrictUmaskLetsUsersIn(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	base := t.TempDir()
	sock := filepath.Join(base, "run", "mailctl", "mailctl.sock")
	lock, err := acquireLock(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	for _, d := range []string{filepath.Dir(sock), filepath.Dir(filepath.Dir(sock))} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != 0o755 {
			t.Errorf("%s created with mode %o, want 755", d, got)
		}
	}

	own := filepath.Join(base, "own")
	if err := os.Mkdir(own, 0o700); err != nil {
		t.Fatal(err)
	}
	lock2, err := acquireLock(filepath.Join(own, "mailctl.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock2.Close()
	if fi, err := os.Stat(own); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("an existing socket directory changed: %v %v", fi.Mode(), err)
	}
}

// TestStateDirMadeUnderAStrictUmaskLetsOwnersIn: the socket's folder is not
// the only one users pass through. A daemon started from a shell with umask
// 077 on a state directory setup did not make (a config changed by hand)
// made it 0700, and no owner reached the mailbox folders in it. It is made
// 0711 whatever the umask, and the mailboxes' folder its store's mode.
func TestStateDirMadeUnderAStrictUmaskLetsOwnersIn(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	td := startDaemon(t, "")
	for dir, want := range map[string]os.FileMode{td.cfg.Paths.StateDir: 0o711, td.cfg.Paths.MailboxesDir(): store.RootMode} {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s made with mode %o, want %o", dir, got, want)
		}
	}
}
