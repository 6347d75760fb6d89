package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Deliver stores a new message in a folder and returns its id. It assigns
// m.ID, m.Mailbox and m.Attachments (with sanitized, unique names), sets
// m.ReceivedAt to now if zero and m.SizeBytes to len(raw) if zero, then
// writes the attachments, the raw message (<id>.eml) and finally <id>.md, the
// commit point, each durably and owned by the mailbox owner. When it returns
// nil, everything is on disk. A message whose Message-ID is already in the
// folder is not stored again: dup is true and id is the existing one.
func (s *Store) Deliver(mailbox, folder string, m *Message, body string, raw []byte, atts []AttachmentData) (id string, dup bool, err error) {
	mb, err := s.openMailbox(mailbox)
	if err != nil {
		return "", false, err
	}
	defer mb.close()
	d, err := mb.folder(folder, true)
	if err != nil {
		return "", false, err
	}
	defer d.Close()
	if m.ReceivedAt.IsZero() {
		m.ReceivedAt = time.Now().UTC()
	}
	if m.SizeBytes == 0 {
		m.SizeBytes = int64(len(raw))
	}

	fi := s.index(mailbox, folder)
	fi.mu.Lock()
	if !fi.loaded {
		if err := fi.sync(d, mb.uid); err != nil {
			fi.mu.Unlock()
			return "", false, err
		}
	}
	if m.MessageID != "" {
		// A copy of the same message still being written by another call may
		// yet fail; wait for its outcome rather than answer "duplicate" for a
		// message that might never land.
		for wait := 0; ; wait++ {
			old, ok := fi.findMessageID(m.MessageID)
			if !ok {
				break
			}
			if _, pending := fi.reserved[old]; pending && wait < 6000 {
				fi.mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				fi.mu.Lock()
				continue
			}
			if st, err := d.Lstat(old + ".md"); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
				fi.mu.Unlock()
				return old, true, nil
			}
			fi.remove(old) // removed behind the index's back, or its delivery failed
			break
		}
	}
	id, err = fi.allocate(d, NewID(m.ReceivedAt, m.Subject), m.MessageID)
	fi.mu.Unlock()
	if err != nil {
		return "", false, err
	}
	newID := id // the named result is cleared on error returns
	defer func() {
		fi.mu.Lock()
		delete(fi.reserved, newID)
		if err == nil {
			fi.entryAfterWrite(d, newID, m, body)
		}
		fi.mu.Unlock()
	}()

	m.ID = id
	m.Mailbox = mailbox
	m.Attachments = nil
	if err = writeMessage(d, mb, &fi.dirSync, id, m, body, raw, atts); err != nil {
		// Leave nothing half-written behind. The id is reserved for this
		// call, so these are its own files (the .md too, if only the final
		// directory fsync failed: the caller reports a failure, so the
		// message must not stay).
		d.Remove(id + ".md")
		d.RemoveAll(id + attSuffix)
		d.Remove(id + ".eml")
		return "", false, fmt.Errorf("deliver to %s/%s: %w", mailbox, folder, err)
	}
	return id, false, nil
}

// allocate reserves a free id based on base: base, base-2, base-3...
// Called with fi.mu held.
func (fi *folderIndex) allocate(d *Dir, base, messageID string) (string, error) {
	for n := 1; n < 10000; n++ {
		id := base
		if n > 1 {
			id = base + "-" + strconv.Itoa(n)
		}
		if _, ok := fi.entries[id]; ok {
			continue
		}
		if _, ok := fi.reserved[id]; ok {
			continue
		}
		if taken(d, id) {
			continue
		}
		fi.reserved[id] = messageID
		return id, nil
	}
	return "", fmt.Errorf("no free id for %s", base)
}

// taken reports whether any file of message id exists in d.
func taken(d *Dir, id string) bool {
	for _, suffix := range []string{".md", ".eml", attSuffix} {
		if _, err := d.Lstat(id + suffix); !errors.Is(err, unix.ENOENT) {
			return true
		}
	}
	return false
}

func writeMessage(d *Dir, mb *mailbox, dirSync *groupSync, id string, m *Message, body string, raw []byte, atts []AttachmentData) error {
	if len(atts) > 0 {
		ad, err := d.MkdirOwned(id+attSuffix, DirMode, mb.uid, mb.gid)
		if err != nil {
			return err
		}
		defer ad.Close()
		used := map[string]bool{}
		for _, a := range atts {
			name := uniqueName(SanitizeFilename(a.Filename), used)
			if err := ad.writeFile(name, a.Data, FileMode, mb.uid, mb.gid, false); err != nil {
				return err
			}
			m.Attachments = append(m.Attachments, Attachment{
				Filename:    name,
				ContentType: a.ContentType,
				Size:        int64(len(a.Data)),
				Path:        id + attSuffix + "/" + name,
			})
		}
		if err := ad.Sync(); err != nil {
			return err
		}
	}
	// The .eml and then the .md (the commit point) are each fsynced and
	// renamed into place; one directory fsync, shared with concurrent
	// deliveries to this folder, then makes both names durable.
	if raw != nil {
		if err := d.writeFile(id+".eml", raw, FileMode, mb.uid, mb.gid, false); err != nil {
			return err
		}
	}
	if err := d.writeFile(id+".md", Render(m, body), FileMode, mb.uid, mb.gid, false); err != nil {
		return err
	}
	return dirSync.sync(d)
}

// uniqueName returns name, or name with "-2", "-3"... before its extension
// if already used.
func uniqueName(name string, used map[string]bool) string {
	out := name
	ext := filepath.Ext(name)
	stem := strings.TrimSuffix(name, ext)
	for n := 2; used[out]; n++ {
		suffix := "-" + strconv.Itoa(n)
		out = truncateUTF8(stem, maxFilenameLen-len(ext)-len(suffix)) + suffix + ext
	}
	used[out] = true
	return out
}
