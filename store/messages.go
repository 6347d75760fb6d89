package store

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Get reads a message: its frontmatter and body.
func (s *Store) Get(mailbox, folder, id string) (*Message, string, error) {
	if err := ValidID(id); err != nil {
		return nil, "", err
	}
	mb, d, done, err := s.openFolder(mailbox, folder, is(id))
	if err != nil {
		return nil, "", err
	}
	defer done()
	return readMessage(d, id, mb.uid)
}

// GetUpTo is Get for a message file of at most max bytes (and at most
// MaxMessageFile): a larger one is an error wrapping ErrTooLarge, found on
// the descriptor before anything is read. The daemon reads its own copies
// (a sent copy) with the bound of what it wrote there, since the owner may
// have put a larger file in their place.
func (s *Store) GetUpTo(mailbox, folder, id string, max int64) (*Message, string, error) {
	if err := ValidID(id); err != nil {
		return nil, "", err
	}
	mb, d, done, err := s.openFolder(mailbox, folder, is(id))
	if err != nil {
		return nil, "", err
	}
	defer done()
	return readMessageUpTo(d, id, mb.uid, min(max, MaxMessageFile))
}

func readMessage(d *Dir, id string, uid int) (*Message, string, error) {
	return readMessageUpTo(d, id, uid, MaxMessageFile)
}

func readMessageUpTo(d *Dir, id string, uid int, max int64) (*Message, string, error) {
	data, err := d.readOwned(id+".md", max, uid)
	if err != nil {
		return nil, "", notFound("message "+id, err)
	}
	// Files the daemon wrote take the fast decoder; anything else (a hand
	// edit outside its subset) the full one, with the same result.
	m, body, err := parseForIndex(data)
	if err != nil {
		return nil, "", fmt.Errorf("message %s: %w", id, err)
	}
	m.ID = id // the file name is the id, whatever a hand edit says
	return m, body, nil
}

// Raw reads the raw message (<id>.eml) of at most max bytes.
func (s *Store) Raw(mailbox, folder, id string, max int64) ([]byte, error) {
	if err := ValidID(id); err != nil {
		return nil, err
	}
	mb, d, done, err := s.openFolder(mailbox, folder, is(id))
	if err != nil {
		return nil, err
	}
	defer done()
	data, err := d.readOwned(id+".eml", max, mb.uid)
	if err != nil {
		return nil, notFound("raw message "+id, err)
	}
	return data, nil
}

// Update rewrites the frontmatter of a message with fn, atomically: the file
// is replaced, never written in place. fn's error aborts the update.
func (s *Store) Update(mailbox, folder, id string, fn func(*Message) error) error {
	return s.updateOne(mailbox, folder, id, fn, syncAll)
}

// UpdateUnsynced is Update without fsyncs: readers see the old or the new
// file, never a partial one, and the change survives a crash of the
// daemon, but a power loss can undo it until the next Sync (or the kernel's
// writeback). It is for changes the caller can redo from its own durable
// record, such as a sent copy's delivery status from the queue's journal.
func (s *Store) UpdateUnsynced(mailbox, folder, id string, fn func(*Message) error) error {
	return s.UpdateUnsyncedIn("", mailbox, folder, id, fn)
}

// UpdateUnsyncedIn is UpdateUnsynced in the mailbox of identity in
// (MailboxIdentity) only, as CreateUnsyncedIn is: a message of that id in
// another mailbox made since under the name is left as it is (ErrNotFound).
func (s *Store) UpdateUnsyncedIn(in, mailbox, folder, id string, fn func(*Message) error) error {
	if applied, err := s.settleSomeIn(in, mailbox, folder, is(id), id, fn); applied {
		return err
	}
	return s.updateOneIn(in, mailbox, folder, id, fn, syncNone)
}

func (s *Store) updateOne(mailbox, folder, id string, fn func(*Message) error, mode syncMode) error {
	return s.updateOneIn("", mailbox, folder, id, fn, mode)
}

func (s *Store) updateOneIn(in, mailbox, folder, id string, fn func(*Message) error, mode syncMode) error {
	res, err := s.Charged(nil).updateIn(in, mailbox, folder, []string{id}, func(_ string, m *Message) (bool, error) {
		return true, fn(m)
	}, mode)
	if err != nil {
		return err
	}
	return res[id].err
}

// Sync makes every write to the store so far durable, data and names:
// syncfs(2) on the store's filesystem. One call covers any number of
// UpdateUnsynced changes. A message CreateDeferred still holds is not
// written yet, and stays so: its creator keeps its own record of it.
// First it commits, in one transaction, the deliveries DeliverOnceJournaled
// remembered since the last Sync, so that the syncfs covers them too when
// the state directory is on the store's file system. Should that commit
// fail they stay in memory for the next Sync: a journal that then lets
// them go costs, at worst, a repeat stored twice after a restart.
func (s *Store) Sync() error {
	s.dedup.flush()
	if err := unix.Syncfs(s.root.fd); err != nil {
		return &os.PathError{Op: "syncfs", Path: s.rootPath, Err: err}
	}
	return nil
}

// SetRead marks messages read (with read_at = now) or unread. It returns the
// ids whose flag changed and the ids that are not in the folder; a message
// that could not be changed is in a *BatchError, and the others are done.
func (s *Store) SetRead(mailbox, folder string, ids []string, read bool, now time.Time) (changed, notFoundIDs []string, err error) {
	return s.Charged(nil).SetRead(mailbox, folder, ids, read, now)
}

// SetRead is Store.SetRead with each file's reading charged.
func (c Charged) SetRead(mailbox, folder string, ids []string, read bool, now time.Time) (changed, notFoundIDs []string, err error) {
	res, err := c.update(mailbox, folder, ids, func(id string, m *Message) (bool, error) {
		if m.Read == read {
			return false, nil
		}
		m.Read, m.ReadAt = read, nil
		if read {
			t := now.UTC()
			m.ReadAt = &t
		}
		return true, nil
	}, syncAll)
	if err != nil {
		return nil, nil, err
	}
	return collect(ids, res)
}

type updateResult struct {
	changed bool
	err     error
}

// update applies fn to each message and replaces the files fn changed. Errors
// about one message are returned per id.
func (c Charged) update(mailbox, folder string, ids []string, fn func(string, *Message) (bool, error), mode syncMode) (map[string]updateResult, error) {
	return c.updateIn("", mailbox, folder, ids, fn, mode)
}

// updateIn is update in the mailbox of identity in only (empty: whichever
// has the name).
func (c Charged) updateIn(in, mailbox, folder string, ids []string, fn func(string, *Message) (bool, error), mode syncMode) (map[string]updateResult, error) {
	res := make(map[string]updateResult, len(ids))
	err := c.s.inFolder(mailbox, folder, among(ids), func(f openedFolder) error {
		if in != "" && identityOf(f.mb).String() != in {
			return fmt.Errorf("mailbox %s: %w (another mailbox has the name now)", mailbox, ErrNotFound)
		}
		// Each file is synced as it is replaced; one directory fsync at
		// the end then makes all the new names durable.
		fileMode := mode
		if mode == syncAll {
			fileMode = syncFile
		}
		changed := false
		for _, id := range ids {
			if _, done := res[id]; done {
				continue // listed twice
			}
			r := updateResult{}
			r.changed, r.err = updateOne(f.d, f.mb, f.fi, id, fn, fileMode, c.take)
			res[id] = r
			changed = changed || r.changed
		}
		if changed && mode == syncAll {
			return f.d.Sync()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// updateOne changes one message's frontmatter: it reads the frontmatter
// only, and the new file gets the body copied from the old one, so what it
// holds in memory does not grow with the body.
func updateOne(d *Dir, mb *mailbox, fi *folderIndex, id string, fn func(string, *Message) (bool, error), mode syncMode, take func(int64) (func(), error)) (bool, error) {
	if err := ValidID(id); err != nil {
		return false, err
	}
	mf, err := d.openMessage(id, mb.uid, take)
	if err != nil {
		return false, err
	}
	defer mf.Close()
	m := mf.m
	changed, err := fn(id, m)
	if err != nil || !changed {
		return false, err
	}
	head := mf.bodyHead()
	if err := d.writeFileFrom(id+".md", Render(m, ""), mf.rest(), MaxMessageFile, FileMode, mb.uid, mb.gid, mode); err != nil {
		return false, fmt.Errorf("update message %s: %w", id, err)
	}
	fi.entryAfterWrite(mb, d, id, m, head)
	return true, nil
}

// Move moves a message (its .md, .eml and attachments) from one folder of
// the mailbox to another, keeping its id. ErrExists if the id is taken there.
func (s *Store) Move(mailbox, id, from, to string) error {
	return s.Charged(nil).Move(mailbox, id, from, to)
}

// Move is Store.Move with the reading of the message's frontmatter charged.
func (c Charged) Move(mailbox, id, from, to string) error {
	s := c.s
	if err := ValidID(id); err != nil {
		return err
	}
	if from == to {
		return fmt.Errorf("move %s: source and destination are both %q", id, from)
	}
	_, _ = s.settleSome(mailbox, to, is(id), "", nil)
	mb, src, done, err := s.openFolder(mailbox, from, is(id))
	if err != nil {
		return err
	}
	defer done()
	dst, err := mb.folder(to, true)
	if err != nil {
		return err
	}
	defer dst.Close()

	// Lock both indexes in a fixed order so that two opposite moves cannot
	// deadlock.
	fsrc, fdst := s.index(mailbox, from), s.index(mailbox, to)
	a, b := fsrc, fdst
	if from > to {
		a, b = b, a
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()

	mf, err := src.openMessage(id, mb.uid, c.take)
	if err != nil {
		return err
	}
	defer mf.Close()
	m, body := mf.m, mf.bodyHead()
	if _, pending := fdst.reserved[id]; pending || taken(dst, id) {
		return fmt.Errorf("move %s to %s: %w", id, to, ErrExists)
	}
	var moved []string
	for _, suffix := range []string{attSuffix, ".eml", ".md"} {
		n := id + suffix
		if suffix != ".md" {
			if _, err := src.Lstat(n); errors.Is(err, unix.ENOENT) {
				continue
			}
		}
		if err := src.Rename(n, dst, n, true); err != nil {
			for _, n := range moved {
				dst.Rename(n, src, n, true)
			}
			return fmt.Errorf("move %s to %s: %w", id, to, err)
		}
		moved = append(moved, n)
	}
	if err := dst.Sync(); err != nil {
		return err
	}
	if err := src.Sync(); err != nil {
		return err
	}
	fsrc.remove(id)
	fdst.entryAfterWrite(mb, dst, id, m, body)
	return nil
}
