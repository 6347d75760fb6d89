package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// TestRestartSweepsFreshLeftovers restarts the daemon moments after a crash
// left a temporary file and an uncommitted raw copy in a folder: the new
// daemon, holding the lock, removes them at start-up, young as they are.
func TestRestartSweepsFreshLeftovers(t *testing.T) {
	td := startDaemon(t, "")
	td.ensureMine(t, "agent")
	td.stop()
	inbox := filepath.Join(td.store.Path("agent"), protocol.FolderInbox)
	leftovers := []string{filepath.Join(inbox, store.TempPrefix+"0011223344556677"), filepath.Join(inbox, "2026-01-01-000000-crash.eml")}
	for _, p := range leftovers {
		if err := os.WriteFile(p, []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	runTestDaemon(t, td.cfg, td.dir, Options{})
	for _, p := range leftovers {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s still there after the restart: %v", filepath.Base(p), err)
		}
	}
}

// TestSecondDaemonTouchesNothing starts a second daemon on the config of a
// running one: it must stop at the lock, before it loads or sweeps
// anything, so a write the first has in progress is left alone.
func TestSecondDaemonTouchesNothing(t *testing.T) {
	td := startDaemon(t, "")
	td.ensureMine(t, "agent")
	inProgress := []string{
		filepath.Join(td.store.Path("agent"), protocol.FolderInbox, store.TempPrefix+"8899aabbccddeeff"),
		filepath.Join(td.store.Root(), store.TempPrefix+"del-8899aabbccddeeff"),
	}
	for _, p := range inProgress {
		if err := os.WriteFile(p, []byte("being written"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := New(td.cfg, Options{Logger: quietLogger(t)}); err == nil || !strings.Contains(err.Error(), "another mailctl daemon is running") {
		t.Fatalf("second daemon: %v, want refused at the lock", err)
	}
	for _, p := range inProgress {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("the second daemon removed %s: %v", filepath.Base(p), err)
		}
	}
}

// TestDeleteMailboxWithDeepTree deletes, through the socket, a mailbox whose
// owner planted a directory tree far deeper than a recursive removal may
// go. The delete finishes: nothing is left in the store root, the registry
// forgets the name, mail to it is refused as unknown (not deferred) and the
// name can be created again.
func TestDeleteMailboxWithDeepTree(t *testing.T) {
	td, addr, _ := startInbound(t, "")
	if err := td.call(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "deep"}, nil); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(filepath.Join(td.store.Path("deep"), protocol.FolderInbox), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fd = nestDirs(t, fd, 600)
	unix.Close(fd)
	if err := td.call(t, protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "deep", Force: true}, nil); err != nil {
		t.Fatalf("delete: %v", err)
	}
	names, _ := os.ReadDir(td.store.Root())
	for _, e := range names {
		if strings.HasPrefix(e.Name(), store.TempPrefix) {
			t.Errorf("left in the store root: %s", e.Name())
		}
	}
	if _, ok := td.lookupMailbox("deep"); ok {
		t.Error("the registry still holds the deleted mailbox")
	}
	if err := sendSMTP(t, addr, "s@remote.test", []string{"deep@example.test"}, "Subject: x\n\nbody\n"); err == nil || !strings.Contains(err.Error(), "550") {
		t.Errorf("mail to the deleted mailbox: %v, want 550", err)
	}
	if err := td.call(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "deep"}, nil); err != nil {
		t.Errorf("creating the name again: %v", err)
	}
}

// TestRestartRemovesAKilledRestoresStaging: a restore killed part-way
// leaves its staging directory in the state directory; the daemon, holding
// the lock, removes it at start-up and leaves the rest of the state alone.
func TestRestartRemovesAKilledRestoresStaging(t *testing.T) {
	td := startDaemon(t, "")
	td.ensureMine(t, "agent")
	td.stop()
	stage := filepath.Join(td.cfg.Paths.StateDir, store.TempPrefix+"restore-123456")
	if err := os.MkdirAll(filepath.Join(stage, "mailboxes", "agent", "inbox"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stage, "mailboxes", "agent", "inbox", "2026-01-01-000000-a.md"), []byte("+++\n+++\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	runTestDaemon(t, td.cfg, td.dir, Options{})
	if _, err := os.Lstat(stage); !os.IsNotExist(err) {
		t.Errorf("the staging directory is still there after the restart: %v", err)
	}
	if _, err := os.Stat(td.store.Path("agent")); err != nil {
		t.Errorf("the mailbox: %v", err)
	}
}

// TestStartRefusesAHalfSwappedRestore: a restore killed while it moved the
// archive's parts into the state directory leaves its mark there; the
// daemon refuses to start on that state (part old, part restored) rather
// than serve it and remove the staged rest of the archive, and says to run
// the restore again.
func TestStartRefusesAHalfSwappedRestore(t *testing.T) {
	td := startDaemon(t, "")
	td.ensureMine(t, "agent")
	td.stop()
	mark := filepath.Join(td.cfg.Paths.StateDir, "restore-incomplete")
	if err := os.WriteFile(mark, []byte("mailctl-backup.tar.gz\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stage := filepath.Join(td.cfg.Paths.StateDir, store.TempPrefix+"restore-123456", "registry")
	if err := os.MkdirAll(stage, 0o700); err != nil {
		t.Fatal(err)
	}
	hostPorts(t, td.cfg)
	d, err := New(td.cfg, Options{Version: "test", Logger: quietLogger(t)})
	if err == nil {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		d.Run(ctx)
		t.Fatal("the daemon started on the state of a restore killed half-way")
	}
	if !strings.Contains(err.Error(), "mailctl restore") {
		t.Errorf("refusal %q does not say to run the restore again", err)
	}
	if _, err := os.Stat(stage); err != nil {
		t.Errorf("the refused start removed the restore's staging: %v", err)
	}
}
