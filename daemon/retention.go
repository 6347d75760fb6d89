package daemon

import (
	"cmp"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// Retention: messages past their folder's retention ([storage.retention])
// move to trash, and messages that have been in trash past trash's
// retention are removed for good. Nothing leaves a mailbox without passing
// through trash, so the store's rule that only trash is purged holds, and a
// message kept too short a time can be taken back from trash.

// maxPrunePerFolder bounds what one run does to one folder; the next run
// goes on where it stopped.
const maxPrunePerFolder = store.MaxPurge

// changedAt is when a file's inode last changed (its ctime): a move into
// trash is a rename, which sets it, so it says when a message came to
// trash (or later, never earlier). The path is inside the owner's mailbox:
// it is read from the store's directory down as the store reads it, never
// following a link out nor crossing into a mount (store.ErrOtherMount).
func changedAt(mailboxDir, rel string) (time.Time, error) {
	d, err := store.OpenDir(filepath.Dir(mailboxDir))
	if err != nil {
		return time.Time{}, err
	}
	defer func() { d.Close() }()
	names := append([]string{filepath.Base(mailboxDir)}, strings.Split(filepath.Dir(rel), "/")...)
	for _, n := range names {
		if n == "." {
			continue
		}
		sub, err := d.OpenDir(n)
		if err != nil {
			return time.Time{}, err
		}
		d.Close()
		d = sub
	}
	st, err := d.Lstat(filepath.Base(rel))
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(st.Ctim.Sec, st.Ctim.Nsec), nil
}

// prune applies the retention to every mailbox (or only one), or with
// dryRun counts what it would do.
func (d *Daemon) prune(only string, dryRun bool) (protocol.PruneResult, error) {
	cfg := d.cfg()
	now := d.now()
	res := protocol.PruneResult{DryRun: dryRun, Rows: []protocol.PruneRow{}}
	var folders []string
	for f, keep := range cfg.Storage.Retention {
		if keep.Duration > 0 {
			folders = append(folders, f)
		}
	}
	// Trash last: what a run moves there waits for trash's own retention.
	slices.SortFunc(folders, func(a, b string) int {
		switch {
		case a == protocol.FolderTrash:
			return 1
		case b == protocol.FolderTrash:
			return -1
		}
		return cmp.Compare(a, b)
	})
	var firstErr error
	for _, m := range d.allMailboxes() {
		if only != "" && m.Name != only {
			continue
		}
		for _, folder := range folders {
			keep := cfg.Storage.Retention[folder].Duration
			row := protocol.PruneRow{Mailbox: m.Name, Folder: folder, Action: "move_to_trash", OlderThanDays: keep.Hours() / 24}
			if folder == protocol.FolderTrash {
				row.Action = "purge"
			}
			n, err := d.pruneFolder(m.Name, folder, now.Add(-keep), dryRun)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				d.log.Error("retention", "mailbox", m.Name, "folder", folder, "err", err)
				if firstErr == nil {
					firstErr = err
				}
			}
			if n == 0 {
				continue
			}
			row.Count = n
			res.Rows = append(res.Rows, row)
			if row.Action == "purge" {
				res.Purged += n
			} else {
				res.Moved += n
			}
			if !dryRun {
				d.log.Info("retention applied", "mailbox", m.Name, "folder", folder, "action", row.Action, "messages", n)
			}
		}
	}
	return res, firstErr
}

// pruneFolder moves to trash the messages of folder received before cutoff
// or, for trash, removes those that came to trash before it.
func (d *Daemon) pruneFolder(mailbox, folder string, cutoff time.Time, dryRun bool) (int, error) {
	// Candidates: received before the cutoff (a message cannot have come
	// to trash before it was received).
	var ids []string
	q := store.Query{Until: &cutoff, Limit: store.MaxLimit}
	for len(ids) < maxPrunePerFolder {
		p, err := d.store.List(mailbox, folder, q)
		if err != nil {
			return 0, err
		}
		for _, it := range p.Items {
			ids = append(ids, it.ID)
		}
		if !p.HasMore || p.NextCursor == "" {
			break
		}
		q.Cursor = p.NextCursor
	}
	if len(ids) > maxPrunePerFolder {
		ids = ids[:maxPrunePerFolder]
	}
	if folder == protocol.FolderTrash {
		dir := d.store.Path(mailbox)
		var due []string
		for _, id := range ids {
			at, err := d.changedAt(dir, filepath.Join(protocol.FolderTrash, id+".md"))
			if err == nil && at.Before(cutoff) {
				due = append(due, id)
			}
		}
		if dryRun || len(due) == 0 {
			return len(due), nil
		}
		purged, _, err := d.store.Purge(mailbox, folder, due)
		return len(purged), err
	}
	if dryRun {
		return len(ids), nil
	}
	moved := 0
	for _, id := range ids {
		switch err := d.store.Move(mailbox, id, folder, protocol.FolderTrash); {
		case err == nil:
			moved++
		case errors.Is(err, store.ErrNotFound):
			// Moved or removed by its owner meanwhile.
		default:
			return moved, err
		}
	}
	return moved, nil
}

// pruneService runs the retention every storage.prune_every.
type pruneService struct {
	d      *Daemon
	cancel context.CancelFunc
	done   chan struct{}
}

func (p *pruneService) Start(context.Context) error {
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan struct{})
	go func() {
		defer close(p.done)
		for {
			// Read each time: a reload may change it.
			t := time.NewTimer(p.d.cfg().Storage.PruneEvery.Duration)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if _, err := p.d.prune("", false); err != nil {
				p.d.log.Error("retention run stopped early; the next run goes on", "err", err)
			}
		}
	}()
	return nil
}

func (p *pruneService) Stop(ctx context.Context) error {
	p.cancel()
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
