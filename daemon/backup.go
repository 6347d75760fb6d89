package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/mailctl/mailctl/daemon/backup"
	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// BackupSnapshot is control.Snapshotter: see backupSnapshot.
func (b backend) BackupSnapshot(ctx context.Context) (protocol.BackupSnapshot, error) {
	return b.d.backupSnapshot(ctx)
}

// backupSnapshot puts what a backup holds into a new directory only root
// can reach, inside the store (hard links need its file system), in an
// order that makes it consistent while mail flows:
//
//  1. the registry's files (each replaced whole, by rename, when it
//     changes), so that every mailbox created before the cut is named;
//  2. the idempotency records (each replaced whole), then the queue
//     journal up to its last whole record: every item queued before the
//     cut, with its message and its sent copy's data;
//  3. each mailbox's committed messages, linked with its folders locked;
//  4. the sends the rate limiter counts, from its memory.
//
// A send records its idempotency key after its item is queued, so every
// record taken is of an item the journal taken after it holds, or one gone
// from it. The journal comes before the mailboxes: an item gone from the
// journal had its sent copy written durably before it went, so the copy is
// in the mailbox's snapshot; an item still in the journal writes its sent
// copy again when the restored daemon starts. A retry after a restore thus
// finds the message its key made. Nothing derived (the index, the
// deliveries database, caches, logs) is taken.
func (d *Daemon) backupSnapshot(ctx context.Context) (protocol.BackupSnapshot, error) {
	cfg := d.cfg()
	stage, err := os.MkdirTemp(d.store.Root(), store.TempPrefix+"backup-")
	if err != nil {
		return protocol.BackupSnapshot{}, err
	}
	out := protocol.BackupSnapshot{Dir: stage, CutAt: d.now().UTC(), Mailboxes: []protocol.BackupMailbox{}}
	if err := d.fillSnapshot(ctx, cfg, stage, &out); err != nil {
		os.RemoveAll(stage)
		return protocol.BackupSnapshot{}, err
	}
	return out, nil
}

func (d *Daemon) fillSnapshot(ctx context.Context, cfg *config.Config, stage string, out *protocol.BackupSnapshot) error {
	for _, sub := range []string{"mailboxes", "hooks"} {
		if err := copyRootFiles(filepath.Join(cfg.Paths.RegistryDir(), sub), filepath.Join(stage, "registry", sub), ".json", maxStateFile, nil); err != nil {
			return fmt.Errorf("registry: %w", err)
		}
	}
	// The format stamps (written at start, before any request) say which
	// format the files are in, so that a restore stamps them so and a
	// release that reads another refuses them, rather than taking them
	// for files written before stamps.
	if err := os.MkdirAll(filepath.Join(stage, "mailboxes"), 0o700); err != nil {
		return err
	}
	for _, s := range []struct{ sub, dir string }{{"registry", cfg.Paths.RegistryDir()}, {"mailboxes", cfg.Paths.MailboxesDir()}} {
		if err := copyRootFile(filepath.Join(s.dir, formats.StampName), filepath.Join(stage, s.sub, formats.StampName), maxStateFile); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	if err := copyRootFile(filepath.Join(cfg.Paths.StateDir, "bounce.key"), filepath.Join(stage, "bounce.key"), maxStateFile); err != nil && !os.IsNotExist(err) {
		return err
	}
	if d.out != nil {
		if err := os.MkdirAll(filepath.Join(stage, "queue"), 0o700); err != nil {
			return err
		}
		// A record no send made (larger than a record may be, or not a
		// regular file) answers no key and goes with the sweep: it is left
		// out, not allowed to cost the mail its backup.
		leaveOut := func(path string, err error) {
			d.log.Warn("a damaged idempotency record is left out of the backup", "file", path, "err", err)
		}
		if err := copyRootFiles(filepath.Join(cfg.Paths.QueueDir(), queue.IdempotencyDir), filepath.Join(stage, "queue", queue.IdempotencyDir), ".json", backup.MaxIdemRecord, leaveOut); err != nil {
			return fmt.Errorf("idempotency records: %w", err)
		}
		f, err := os.OpenFile(filepath.Join(stage, "queue", queue.JournalName), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		out.QueueItems = len(d.out.queue.List())
		out.QueueBytes, err = d.out.queue.SnapshotJournal(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("queue: %w", err)
		}
	}
	names, err := d.store.Mailboxes()
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		dir := filepath.Join(stage, "mailboxes", name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			return err
		}
		to, err := store.OpenDir(dir)
		if err != nil {
			return err
		}
		snap, err := d.store.SnapshotMailbox(name, to)
		to.Close()
		if err != nil {
			return fmt.Errorf("mailbox %s: %w", name, err)
		}
		out.Mailboxes = append(out.Mailboxes, protocol.BackupMailbox{Name: name, UID: snap.UID, GID: snap.GID,
			Messages: snap.Messages, Files: snap.Files, Bytes: snap.Bytes, Skipped: snap.Skipped, Warnings: snap.Warnings})
	}
	if d.out != nil {
		// Last: every send before the cut counts, and one between the
		// cut and here counts too, which errs on the side of the limit.
		if err := writeRootFile(filepath.Join(stage, rateLimitLogName), d.out.limiter.WriteLog); err != nil {
			return fmt.Errorf("send log: %w", err)
		}
	}
	return nil
}

// writeRootFile creates path (0600, not there before) with what write
// writes.
func writeRootFile(path string, write func(io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// maxStateFile bounds a registry file or key the snapshot copies.
const maxStateFile = 1 << 20

// copyRootFiles copies the regular files of dir whose names end in suffix
// into to (created 0700), listing dir a batch at a time: the idempotency
// records' directory holds a file for every keyed send of the window,
// hundreds of thousands on a busy host. They are root's own files,
// replaced whole by rename when they change, so each copy is one version
// of its file. A file larger than max, or not a regular file when it is
// opened, is an error, or, when leaveOut is not nil, given to it and left
// out.
func copyRootFiles(dir, to, suffix string, max int64, leaveOut func(path string, err error)) error {
	if err := os.MkdirAll(to, 0o700); err != nil {
		return err
	}
	err := safeio.EachEntry(dir, func(e fs.DirEntry) error {
		n := e.Name()
		if safeio.IsTemp(n) || !strings.HasSuffix(n, suffix) || !e.Type().IsRegular() {
			return nil
		}
		err := copyRootFile(filepath.Join(dir, n), filepath.Join(to, n), max)
		if leaveOut != nil && (errors.Is(err, safeio.ErrTooLarge) || errors.Is(err, safeio.ErrNotRegular)) {
			leaveOut(filepath.Join(dir, n), err)
			return nil
		}
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	})
	if os.IsNotExist(err) {
		return nil
	}
	return err
}

// copyRootFile copies the regular file from (at most max bytes; a FIFO is
// refused, never waited on) to the new file to.
func copyRootFile(from, to string, max int64) error {
	data, err := safeio.ReadRegular(from, max)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o600)
}

// LockState takes the daemon's lock for a tool that changes the state while
// no daemon may run (`mailctl restore`); it fails, saying so, while one
// does. Close the file to release it.
func LockState(cfg *config.Config) (*os.File, error) { return acquireLock(cfg.Paths.Socket) }
