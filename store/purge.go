package store

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// PurgeFolder is the only folder whose messages can be removed for good:
// everything else moves to it first, so a purge never takes a message its
// owner has not already thrown away.
const PurgeFolder = "trash"

// ErrNotTrash is returned when a purge names a folder other than PurgeFolder.
var ErrNotTrash = errors.New("only messages in trash can be purged")

// MaxPurge bounds how many messages one purge removes.
const MaxPurge = 10_000

// Purge removes messages of folder (which must be trash) for good: the
// Markdown file, the raw .eml and the attachments directory of each. It
// returns the ids it removed and the ids that are not in the folder.
func (s *Store) Purge(mailbox, folder string, ids []string) (purged, notFoundIDs []string, err error) {
	return s.purge(mailbox, folder, func(*folderIndex) []string { return ids })
}

// PurgeBefore removes for good every message of folder (which must be
// trash) received before t, at most MaxPurge of them (the oldest first), and
// returns their ids.
func (s *Store) PurgeBefore(mailbox, folder string, t time.Time) (purged []string, err error) {
	// Those not found were removed by the owner meanwhile.
	purged, _, err = s.purge(mailbox, folder, func(fi *folderIndex) []string {
		var ids []string
		db, _ := fi.x.handle()
		rows, err := db.Query("SELECT id FROM messages WHERE fid = ? AND sort_key < ? ORDER BY sort_key, id LIMIT ?", fi.row.fid, UnixNano(t), MaxPurge)
		if err != nil {
			return nil
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if rows.Scan(&id) == nil {
				ids = append(ids, id)
			}
		}
		return ids
	})
	return purged, err
}

// purge removes the messages that pick chooses (with the folder's index
// synced and locked) and returns those it removed and those it did not
// find; one it could not remove is in a *BatchError, and the purge goes on.
func (s *Store) purge(mailbox, folder string, pick func(*folderIndex) []string) (purged, notFoundIDs []string, err error) {
	if folder != PurgeFolder {
		return nil, nil, fmt.Errorf("purge %s: %w", folder, ErrNotTrash)
	}
	var failed []Failure
	err = s.inFolder(mailbox, folder, nil, func(f openedFolder) error {
		if err := f.fi.sync(f.d, f.mb); err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, id := range pick(f.fi) {
			if seen[id] {
				continue
			}
			seen[id] = true
			switch err := purgeOne(f.d, f.mb, id); {
			case err == nil:
				purged = append(purged, id)
				f.fi.remove(id)
			case errors.Is(err, ErrNotFound):
				notFoundIDs = append(notFoundIDs, id)
			default:
				// Its Markdown file may be gone already: the index no
				// longer shows it either way, and the purge goes on.
				failed = append(failed, Failure{ID: id, Err: err})
				f.fi.remove(id)
			}
		}
		if len(purged)+len(failed) > 0 {
			return f.d.Sync()
		}
		return nil
	})
	if err == nil && len(failed) > 0 {
		err = &BatchError{Failed: failed}
	}
	return purged, notFoundIDs, err
}

// messageFile checks that id names a message of d: its Markdown file is a
// regular file of the mailbox owner, as readMessage requires. Anything else
// the owner planted under that name (a symlink, a FIFO, a directory, a hard
// link to a file of root's or another user's) is not a message: it is not
// found, and is left for its owner to remove.
func messageFile(d *Dir, id string, uid int) error {
	st, err := d.Lstat(id + ".md")
	if err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
		err = ErrNotRegular
	}
	if err == nil {
		err = checkOwner(&st, uid)
	}
	if err != nil {
		return notFound("message "+id, err)
	}
	return nil
}

// purgeOne removes one message. The Markdown file goes first: it is the
// commit point, so a crash after it leaves only uncommitted files, which the
// store already cleans up as orphans.
func purgeOne(d *Dir, mb *mailbox, id string) error {
	if ValidID(id) != nil {
		return fmt.Errorf("message %q: %w", id, ErrNotFound)
	}
	if err := messageFile(d, id, mb.uid); err != nil {
		return err
	}
	if err := d.Remove(id + ".md"); err != nil {
		return notFound("message "+id, err)
	}
	if err := d.RemoveAll(id + ".eml"); err != nil {
		return fmt.Errorf("purge %s: %w", id, err)
	}
	if err := d.RemoveAll(id + attSuffix); err != nil {
		return fmt.Errorf("purge %s: %w", id, err)
	}
	return nil
}
