package store

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// MaxDraftAttachmentBytes bounds what ReadAttachments reads of one message.
const MaxDraftAttachmentBytes = 64 << 20

// Rewrite replaces a message's frontmatter with what fn makes of it, and
// its body with the one fn returns (nil keeps the body, which is then
// copied from the old file without being read into memory), atomically.
// When atts is not nil, the message's attachments are replaced by atts (an
// empty, non-nil slice removes them). It is how a draft is edited; m.ID and
// m.Mailbox stay what the file name and mailbox say.
func (s *Store) Rewrite(mailbox, folder, id string, fn func(m *Message) (body *string, err error), atts []AttachmentData) error {
	return s.Charged(nil).Rewrite(mailbox, folder, id, fn, atts)
}

// Rewrite is Store.Rewrite with the reading of the old file charged.
func (c Charged) Rewrite(mailbox, folder, id string, fn func(m *Message) (body *string, err error), atts []AttachmentData) error {
	if err := ValidID(id); err != nil {
		return err
	}
	return c.s.inFolder(mailbox, folder, nil, func(f openedFolder) error {
		d, mb := f.d, f.mb
		mf, err := d.openMessage(id, mb.uid, c.take)
		if err != nil {
			return err
		}
		defer mf.Close()
		m := mf.m
		body, err := fn(m)
		if err != nil {
			return err
		}
		m.ID, m.Mailbox = id, mailbox
		if atts != nil {
			// The new attachments are written under a temporary name (one
			// the start-up sweep removes if a crash leaves it) and swapped
			// in, so a failure leaves the old ones in place.
			tmpDir := TempPrefix + "att-" + id
			if err := d.RemoveAll(tmpDir); err != nil {
				return err
			}
			m.Attachments = nil
			if len(atts) > 0 {
				if err := writeAttachments(d, mb, id, tmpDir, m, atts, syncFile); err != nil {
					d.RemoveAll(tmpDir)
					return err
				}
			}
			if err := d.RemoveAll(id + attSuffix); err != nil {
				return err
			}
			if len(atts) > 0 {
				if err := d.Rename(tmpDir, d, id+attSuffix, true); err != nil {
					return err
				}
			}
		}
		head, rest := []byte(nil), mf.rest()
		snippet := mf.bodyHead()
		if body != nil {
			head, rest, snippet = []byte(*body), nil, *body
		}
		if err := d.writeFileFrom(id+".md", append(Render(m, ""), head...), rest, MaxMessageFile, FileMode, mb.uid, mb.gid, syncAll); err != nil {
			return fmt.Errorf("rewrite message %s: %w", id, err)
		}
		f.fi.entryAfterWrite(mb, d, id, m, snippet)
		return nil
	})
}

// writeAttachments writes atts into a new directory dir, recording them in
// m as they will be named once dir is id+attSuffix. Unless mode is
// syncNone, the files and then the directory are fsynced.
func writeAttachments(d *Dir, mb *mailbox, id, dir string, m *Message, atts []AttachmentData, mode syncMode) error {
	ad, err := d.MkdirOwned(dir, DirMode, mb.uid, mb.gid)
	if err != nil {
		return err
	}
	defer ad.Close()
	used := map[string]bool{}
	for _, a := range atts {
		name := uniqueName(SanitizeFilename(a.Filename), used)
		var err error
		if a.File != nil {
			err = a.File.place(d, ad, name, mb.uid, mb.gid, mode)
		} else {
			err = ad.writeFile(name, a.Data, FileMode, mb.uid, mb.gid, mode)
		}
		if err != nil {
			return err
		}
		m.Attachments = append(m.Attachments, Attachment{Filename: name, ContentType: a.ContentType,
			Size: a.size(), Path: id + attSuffix + "/" + name})
	}
	if mode == syncNone {
		return nil
	}
	return ad.Sync()
}

// ReadAttachments reads the attachments a message's frontmatter lists, from
// its own attachment folder only (a hand-edited path elsewhere is refused),
// at most MaxDraftAttachmentBytes in all, as fstat says before any is read,
// and at most MaxDraftAttachments of them.
func (s *Store) ReadAttachments(mailbox, folder, id string, m *Message) ([]AttachmentData, error) {
	if len(m.Attachments) == 0 {
		return nil, nil
	}
	mb, d, done, err := s.openFolder(mailbox, folder, nil)
	if err != nil {
		return nil, err
	}
	defer done()
	atts, err := openAttachments(d, mb.uid, id, m, MaxDraftAttachmentBytes, MaxDraftAttachments)
	if err != nil {
		return nil, err
	}
	defer atts.close()
	return atts.read()
}

// RemoveMessage deletes a message for good: its attachments, raw copy and
// Markdown file. It is how a draft is discarded or leaves once sent.
func (s *Store) RemoveMessage(mailbox, folder, id string) error {
	if err := ValidID(id); err != nil {
		return err
	}
	return s.inFolder(mailbox, folder, is(id), func(f openedFolder) error { return removeMessage(f, id) })
}

func removeMessage(f openedFolder, id string) error {
	d, fi := f.d, f.fi
	if err := messageFile(d, id, f.mb.uid); err != nil {
		return err
	}
	// The .md goes first: without it the message is gone, and the
	// leftover files are orphans the sweep removes.
	if err := d.Remove(id + ".md"); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	d.Remove(id + ".eml")
	d.RemoveAll(id + attSuffix)
	fi.remove(id)
	return d.Sync()
}

// RemoveMessageIfVersion removes a message as RemoveMessage does, only if
// its Markdown file is still at version (from Version). It reports whether
// it removed it: a message edited since that version is left alone.
func (s *Store) RemoveMessageIfVersion(mailbox, folder, id, version string) (bool, error) {
	if err := ValidID(id); err != nil {
		return false, err
	}
	removed := false
	err := s.inFolder(mailbox, folder, is(id), func(f openedFolder) error {
		now, err := versionOf(f.d, id)
		if err != nil {
			return err
		}
		if now != version {
			return nil
		}
		removed = true
		return removeMessage(f, id)
	})
	return removed, err
}

// Version names the version of a message's Markdown file now: its inode,
// size, modification and change times. Any rewrite or edit changes it.
func (s *Store) Version(mailbox, folder, id string) (string, error) {
	if err := ValidID(id); err != nil {
		return "", err
	}
	_, d, done, err := s.openFolder(mailbox, folder, nil)
	if err != nil {
		return "", err
	}
	defer done()
	return versionOf(d, id)
}

func versionOf(d *Dir, id string) (string, error) {
	st, err := d.Lstat(id + ".md")
	if err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
		err = ErrNotRegular
	}
	if err != nil {
		return "", notFound("message "+id, err)
	}
	v := stampOf(&st)
	return fmt.Sprintf("%x-%x-%x-%x", v.ino, v.size, v.mtime, v.ctime), nil
}
