package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mailctl/mailctl/internal/testmount"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/store"
)

// TestUsageCountNeverOpensAFIFO counts a mailbox whose owner keeps
// swapping a directory and a FIFO under one name (an atomic exchange, so
// the name always exists): whichever the count finds when it opens the
// name, it must not block. An open that waited for a writer would hang the
// delivery or request that asked for the count, forever.
func TestUsageCountNeverOpensAFIFO(t *testing.T) {
	dir := t.TempDir()
	inbox := filepath.Join(dir, "inbox")
	if err := os.Mkdir(inbox, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(inbox, "2026-01-01-000000-aaaa.md"), []byte("+++\n+++\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(inbox, "swap"), 0o700); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(inbox, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	swapped := make(chan struct{})
	go func() {
		defer close(swapped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			unix.Renameat2(unix.AT_FDCWD, filepath.Join(inbox, "swap"), unix.AT_FDCWD, fifo, unix.RENAME_EXCHANGE)
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-swapped
		// Let a count stuck in open(2) go: opening the FIFO for writing
		// wakes its reader.
		for _, n := range []string{"swap", "fifo"} {
			if fd, err := unix.Open(filepath.Join(inbox, n), unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
				unix.Close(fd)
			}
		}
	})
	err := testwait.Returns(t, "3000 counts of a mailbox with a FIFO swapped in and out (a count blocked opening the FIFO)", func() error {
		for range 3000 {
			if _, messages, err := countUsage(dir); err != nil || messages != 1 {
				return fmt.Errorf("counted %d messages, want 1: %v", messages, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("count: %v", err)
	}
}

// TestUsageCountsEveryDepth counts a file the owner put hundreds of
// directories deep: no depth hides a file from the quota.
func TestUsageCountsEveryDepth(t *testing.T) {
	dir := t.TempDir()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fd = nestDirs(t, fd, 600)
	f, err := unix.Openat(fd, "big", unix.O_CREAT|unix.O_WRONLY, 0o600)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	unix.Ftruncate(f, 1<<20)
	unix.Close(f)
	bytes, _, err := countUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	if bytes != 1<<20 {
		t.Errorf("counted %d bytes, want %d (the file 600 levels down)", bytes, 1<<20)
	}
}

// nestDirs makes depth directories, each named d, one inside the other
// below the directory fd, and returns the deepest, open; fd is closed.
func nestDirs(t *testing.T, fd, depth int) int {
	t.Helper()
	for range depth {
		unix.Mkdirat(fd, "d", 0o700)
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	return fd
}

// TestUsageCountLeavesOutMounts counts a mailbox with file systems mounted
// inside it: a disk's worth of files there is not the mailbox's (nor is
// it what the store writes), and an owner's FUSE file system whose daemon
// never answers must not hold the count, and with it the delivery that
// asked for it, forever.
func TestUsageCountLeavesOutMounts(t *testing.T) {
	if !testmount.InNamespace(t) {
		return
	}
	dir := t.TempDir()
	for _, d := range []string{"inbox/disk", "inbox/fuse"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "inbox", "2026-01-01-000000-aaaa.md"), []byte("+++\n+++\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testmount.Tmpfs(t, filepath.Join(dir, "inbox", "disk"))
	if err := os.WriteFile(filepath.Join(dir, "inbox", "disk", "2026-01-01-000000-bbbb.md"), make([]byte, 100000), 0o600); err != nil {
		t.Fatal(err)
	}
	testmount.DeadFUSE(t, filepath.Join(dir, "inbox", "fuse"), false)
	type count struct {
		bytes, messages int64
		err             error
	}
	c := testwait.Returns(t, "a count of a mailbox with a FUSE mount that never answers", func() count {
		b, m, err := countUsage(dir)
		return count{b, m, err}
	})
	if c.err != nil || c.bytes != 8 || c.messages != 1 {
		t.Errorf("counted %d bytes, %d messages (%v); want 8 and 1, the mounts left out", c.bytes, c.messages, c.err)
	}
}

// TestRetentionNeverAsksAMount: when trash came to hold a message is read
// from its file's ctime; a file there that is an owner's FUSE mount whose
// daemon never answers is refused, not waited on.
func TestRetentionNeverAsksAMount(t *testing.T) {
	if !testmount.InNamespace(t) {
		return
	}
	dir := filepath.Join(t.TempDir(), "agent")
	if err := os.MkdirAll(filepath.Join(dir, "trash"), 0o700); err != nil {
		t.Fatal(err)
	}
	md := filepath.Join(dir, "trash", "2026-01-01-000000-aaaa.md")
	if err := os.WriteFile(md, []byte("+++\n+++\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testmount.DeadFUSE(t, md, true)
	err := testwait.Returns(t, "the ctime of a message file that is a FUSE mount", func() error {
		_, err := changedAt(dir, "trash/2026-01-01-000000-aaaa.md")
		return err
	})
	if !errors.Is(err, store.ErrOtherMount) {
		t.Errorf("changedAt: %v, want store.ErrOtherMount", err)
	}
}
