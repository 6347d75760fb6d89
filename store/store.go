package store

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Sentinel errors; test with errors.Is.
var (
	ErrNotFound      = errors.New("not found")
	ErrNotEmpty      = errors.New("mailbox is not empty")
	ErrOwnerMismatch = errors.New("mailbox exists with another owner")
	ErrExists        = errors.New("already exists")
)

// Folders are the folders every mailbox has.
var Folders = []string{"inbox", "sent", "archive", "trash", "drafts"}

// Modes of what the store writes in a mailbox, owned by the mailbox owner.
const (
	DirMode  os.FileMode = 0o700
	FileMode os.FileMode = 0o600
	RootMode os.FileMode = 0o711
)

// attSuffix names the directory holding a message's attachments.
const attSuffix = ".attachments"

// Store is the set of mailboxes under one root directory. It is safe for use
// by many goroutines.
type Store struct {
	root     *Dir
	rootPath string

	mu      sync.Mutex // guards folders; serializes Create and Delete
	folders map[string]*folderIndex
}

// Open opens the store rooted at root, creating it (mode 0711) if missing.
// Mailbox folders left behind by an interrupted Delete are removed.
func Open(root string) (*Store, error) {
	root = filepath.Clean(root)
	if err := os.MkdirAll(filepath.Dir(root), 0o755); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	created := false
	if err := unix.Mkdir(root, uint32(RootMode)); err == nil {
		created = true
	} else if !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("open store: %w", &os.PathError{Op: "mkdir", Path: root, Err: err})
	}
	d, err := OpenDir(root)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if created {
		if err := unix.Fchmod(d.fd, uint32(RootMode)); err != nil { // past the umask
			d.Close()
			return nil, fmt.Errorf("open store: %w", err)
		}
	}
	s := &Store{root: d, rootPath: root, folders: map[string]*folderIndex{}}
	if names, err := d.Names(); err == nil {
		for _, n := range names {
			if strings.HasPrefix(n, TempPrefix) {
				d.RemoveAll(n) // a rename-then-remove Delete that did not finish
			}
		}
	}
	return s, nil
}

// Close releases the store's root directory.
func (s *Store) Close() error { return s.root.Close() }

// Root returns the store's root directory.
func (s *Store) Root() string { return s.rootPath }

// Path returns the directory of a mailbox (for showing to its owner; the store
// itself never opens paths).
func (s *Store) Path(mailbox string) string { return filepath.Join(s.rootPath, mailbox) }

func (s *Store) index(mailbox, folder string) *folderIndex {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := mailbox + "/" + folder
	fi := s.folders[k]
	if fi == nil {
		fi = newFolderIndex()
		s.folders[k] = fi
	}
	return fi
}

func (s *Store) dropIndexes(mailbox string) {
	for k := range s.folders {
		if strings.HasPrefix(k, mailbox+"/") {
			delete(s.folders, k)
		}
	}
}

// notFound maps a missing (or symlinked, or foreign) entry to ErrNotFound.
func notFound(what string, err error) error {
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) ||
		errors.Is(err, ErrNotRegular) || errors.Is(err, errForeign) {
		return fmt.Errorf("%s: %w (%w)", what, ErrNotFound, err)
	}
	return err
}

// mailbox is an open mailbox directory and its owner.
type mailbox struct {
	dir      *Dir
	uid, gid int
}

func (s *Store) openMailbox(name string) (*mailbox, error) {
	if err := ValidMailboxName(name); err != nil {
		return nil, err
	}
	d, err := s.root.OpenDir(name)
	if err != nil {
		return nil, notFound("mailbox "+name, err)
	}
	st, err := d.Stat()
	if err != nil {
		d.Close()
		return nil, err
	}
	return &mailbox{dir: d, uid: int(st.Uid), gid: int(st.Gid)}, nil
}

// folder opens a folder of the mailbox. With create, a missing standard
// folder is recreated. A folder not owned by the mailbox owner is refused:
// it can only be something moved in from elsewhere.
func (mb *mailbox) folder(name string, create bool) (*Dir, error) {
	if err := ValidFolder(name); err != nil {
		return nil, err
	}
	d, err := mb.dir.OpenDir(name)
	if errors.Is(err, unix.ENOENT) && create {
		d, err = mb.dir.MkdirOwned(name, DirMode, mb.uid, mb.gid)
	}
	if err != nil {
		return nil, notFound("folder "+name, err)
	}
	st, err := d.Stat()
	if err == nil && int(st.Uid) != mb.uid {
		err = notFound("folder "+name, &os.PathError{Op: "open", Path: d.path, Err: errForeign})
	}
	if err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

func (mb *mailbox) close() { mb.dir.Close() }

// Create creates the mailbox directory (mode 0700, owned by uid:gid) and its
// standard folders. It is idempotent: an existing mailbox of the same owner
// is repaired (missing folders, modes) and created is false. An existing
// mailbox of another owner gives ErrOwnerMismatch.
func (s *Store) Create(name string, uid, gid int) (created bool, err error) {
	if err := ValidMailboxName(name); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	err = unix.Mkdirat(s.root.fd, name, 0o700)
	switch {
	case err == nil:
		created = true
	case errors.Is(err, unix.EEXIST):
	default:
		return false, fmt.Errorf("create mailbox %s: %w", name, err)
	}
	d, err := s.root.OpenDir(name)
	if err != nil {
		return false, fmt.Errorf("create mailbox %s: %w", name, err)
	}
	defer d.Close()
	st, err := d.Stat()
	if err != nil {
		return false, err
	}
	if !created && int(st.Uid) != uid {
		return false, fmt.Errorf("create mailbox %s: %w", name, ErrOwnerMismatch)
	}
	if err := d.setOwnerMode(DirMode, uid, gid); err != nil {
		return created, fmt.Errorf("create mailbox %s: %w", name, err)
	}
	for _, f := range Folders {
		sub, err := d.MkdirOwned(f, DirMode, uid, gid)
		if err != nil {
			return created, fmt.Errorf("create mailbox %s: %w", name, err)
		}
		sub.Close()
	}
	if err := d.Sync(); err != nil {
		return created, err
	}
	if created {
		return created, s.root.Sync()
	}
	return created, nil
}

// Owner returns the owner of the mailbox, read from its directory.
func (s *Store) Owner(name string) (uid, gid int, err error) {
	mb, err := s.openMailbox(name)
	if err != nil {
		return -1, -1, err
	}
	mb.close()
	return mb.uid, mb.gid, nil
}

// Exists reports whether the mailbox exists (as a real directory).
func (s *Store) Exists(name string) bool {
	mb, err := s.openMailbox(name)
	if err != nil {
		return false
	}
	mb.close()
	return true
}

// Mailboxes lists the names of the mailboxes on disk.
func (s *Store) Mailboxes() ([]string, error) {
	names, err := s.root.Names()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if ValidMailboxName(n) != nil {
			continue
		}
		if st, err := s.root.Lstat(n); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			out = append(out, n)
		}
	}
	return out, nil
}

// Delete removes the mailbox and everything in it. Unless force, a mailbox
// holding any message in any folder is refused with ErrNotEmpty. The mailbox
// is first renamed away (one atomic step), then removed without following
// any symlink the owner may have planted.
func (s *Store) Delete(name string, force bool) error {
	mb, err := s.openMailbox(name)
	if err != nil {
		return err
	}
	defer mb.close()
	if !force {
		n, err := countMessages(mb.dir)
		if err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("delete mailbox %s: %w (%d messages; force to delete anyway)", name, ErrNotEmpty, n)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := TempPrefix + "del-" + hex.EncodeToString(rnd[:])
	if err := s.root.Rename(name, s.root, tmp, true); err != nil {
		return fmt.Errorf("delete mailbox %s: %w", name, err)
	}
	s.dropIndexes(name)
	if err := s.root.Sync(); err != nil {
		return err
	}
	if err := s.root.RemoveAll(tmp); err != nil {
		return fmt.Errorf("delete mailbox %s: %w", name, err)
	}
	return nil
}

// countMessages counts the message files in every folder of a mailbox.
func countMessages(d *Dir) (int, error) {
	names, err := d.Names()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, f := range names {
		if st, err := d.Lstat(f); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		sub, err := d.OpenDir(f)
		if err != nil {
			continue
		}
		files, err := sub.Names()
		sub.Close()
		if err != nil {
			return 0, err
		}
		for _, file := range files {
			if _, ok := mdID(file); ok {
				n++
			}
		}
	}
	return n, nil
}

// Counts are a mailbox's message counts: Total and Unread in the inbox, Sent
// in the sent folder.
type Counts struct{ Total, Unread, Sent int }

// Counts returns the message counts of a mailbox, from the index.
func (s *Store) Counts(name string) (Counts, error) {
	mb, err := s.openMailbox(name)
	if err != nil {
		return Counts{}, err
	}
	defer mb.close()
	var c Counts
	for _, f := range []string{"inbox", "sent"} {
		d, err := mb.folder(f, false)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return Counts{}, err
		}
		fi := s.index(name, f)
		fi.mu.Lock()
		err = fi.sync(d, mb.uid)
		if err == nil {
			if f == "inbox" {
				c.Total = len(fi.entries)
				for _, e := range fi.entries {
					if !e.sum.Read {
						c.Unread++
					}
				}
			} else {
				c.Sent = len(fi.entries)
			}
		}
		fi.mu.Unlock()
		d.Close()
		if err != nil {
			return Counts{}, err
		}
	}
	return c, nil
}

// List returns one page of the messages of a folder, newest first.
func (s *Store) List(mailbox, folder string, q Query) (Page, error) {
	mb, err := s.openMailbox(mailbox)
	if err != nil {
		return Page{}, err
	}
	defer mb.close()
	d, err := mb.folder(folder, false)
	if err != nil {
		return Page{}, err
	}
	defer d.Close()
	fi := s.index(mailbox, folder)
	fi.mu.Lock()
	defer fi.mu.Unlock()
	return fi.list(d, mb.uid, folder, q)
}

// FindByMessageID returns the id of the message of the folder with the given
// Message-ID.
func (s *Store) FindByMessageID(mailbox, folder, messageID string) (id string, ok bool) {
	if messageID == "" {
		return "", false
	}
	mb, err := s.openMailbox(mailbox)
	if err != nil {
		return "", false
	}
	defer mb.close()
	d, err := mb.folder(folder, false)
	if err != nil {
		return "", false
	}
	defer d.Close()
	fi := s.index(mailbox, folder)
	fi.mu.Lock()
	defer fi.mu.Unlock()
	if fi.sync(d, mb.uid) != nil {
		return "", false
	}
	return fi.findMessageID(messageID)
}

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
		if old, ok := fi.findMessageID(m.MessageID); ok {
			_, pending := fi.reserved[old]
			if st, err := d.Lstat(old + ".md"); pending || err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
				fi.mu.Unlock()
				return old, true, nil
			}
			fi.remove(old) // removed behind the index's back
		}
	}
	id, err = fi.allocate(d, NewID(m.ReceivedAt, m.Subject), m.MessageID)
	fi.mu.Unlock()
	if err != nil {
		return "", false, err
	}
	defer func() {
		fi.mu.Lock()
		delete(fi.reserved, id)
		if err == nil {
			fi.entryAfterWrite(d, id, m, body)
		}
		fi.mu.Unlock()
	}()

	m.ID = id
	m.Mailbox = mailbox
	m.Attachments = nil
	if err = writeMessage(d, mb, id, m, body, raw, atts); err != nil {
		// Leave nothing half-written behind (the .md, written last, is
		// not there).
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

func writeMessage(d *Dir, mb *mailbox, id string, m *Message, body string, raw []byte, atts []AttachmentData) error {
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
	if raw != nil {
		if err := d.WriteFile(id+".eml", raw, FileMode, mb.uid, mb.gid); err != nil {
			return err
		}
	}
	return d.WriteFile(id+".md", Render(m, body), FileMode, mb.uid, mb.gid)
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

// Get reads a message: its frontmatter and body.
func (s *Store) Get(mailbox, folder, id string) (*Message, string, error) {
	if err := ValidID(id); err != nil {
		return nil, "", err
	}
	mb, err := s.openMailbox(mailbox)
	if err != nil {
		return nil, "", err
	}
	defer mb.close()
	d, err := mb.folder(folder, false)
	if err != nil {
		return nil, "", err
	}
	defer d.Close()
	return readMessage(d, id, mb.uid)
}

func readMessage(d *Dir, id string, uid int) (*Message, string, error) {
	data, st, err := d.readFile(id+".md", MaxMessageFile)
	if err == nil {
		err = checkOwner(&st, uid)
	}
	if err != nil {
		return nil, "", notFound("message "+id, err)
	}
	m, body, err := Parse(data)
	if err != nil {
		return nil, "", fmt.Errorf("message %s: %w", id, err)
	}
	return m, body, nil
}

// Raw reads the raw message (<id>.eml) of at most max bytes.
func (s *Store) Raw(mailbox, folder, id string, max int64) ([]byte, error) {
	if err := ValidID(id); err != nil {
		return nil, err
	}
	mb, err := s.openMailbox(mailbox)
	if err != nil {
		return nil, err
	}
	defer mb.close()
	d, err := mb.folder(folder, false)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	data, st, err := d.readFile(id+".eml", max)
	if err == nil {
		err = checkOwner(&st, mb.uid)
	}
	if err != nil {
		return nil, notFound("raw message "+id, err)
	}
	return data, nil
}

// Update rewrites the frontmatter of a message with fn, atomically: the file
// is replaced, never written in place. fn's error aborts the update.
func (s *Store) Update(mailbox, folder, id string, fn func(*Message) error) error {
	res, err := s.update(mailbox, folder, []string{id}, func(_ string, m *Message) (bool, error) {
		return true, fn(m)
	})
	if err != nil {
		return err
	}
	return res[id].err
}

// SetRead marks messages read (with read_at = now) or unread. It returns the
// ids whose flag changed and the ids that are not in the folder.
func (s *Store) SetRead(mailbox, folder string, ids []string, read bool, now time.Time) (changed, notFoundIDs []string, err error) {
	res, err := s.update(mailbox, folder, ids, func(id string, m *Message) (bool, error) {
		if m.Read == read {
			return false, nil
		}
		m.Read = read
		if read {
			t := now.UTC()
			m.ReadAt = &t
		} else {
			m.ReadAt = nil
		}
		return true, nil
	})
	if err != nil {
		return nil, nil, err
	}
	for _, id := range ids {
		switch r := res[id]; {
		case errors.Is(r.err, ErrNotFound), r.err != nil && ValidID(id) != nil:
			notFoundIDs = append(notFoundIDs, id)
		case r.err != nil:
			return changed, notFoundIDs, r.err
		case r.changed:
			changed = append(changed, id)
		}
	}
	return changed, notFoundIDs, nil
}

type updateResult struct {
	changed bool
	err     error
}

// update applies fn to each message and replaces the files fn changed. Errors
// about one message are returned per id.
func (s *Store) update(mailbox, folder string, ids []string, fn func(string, *Message) (bool, error)) (map[string]updateResult, error) {
	mb, err := s.openMailbox(mailbox)
	if err != nil {
		return nil, err
	}
	defer mb.close()
	d, err := mb.folder(folder, false)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	fi := s.index(mailbox, folder)
	fi.mu.Lock()
	defer fi.mu.Unlock()
	res := make(map[string]updateResult, len(ids))
	for _, id := range ids {
		r := updateResult{}
		r.changed, r.err = updateOne(d, mb, fi, id, fn)
		res[id] = r
	}
	return res, nil
}

func updateOne(d *Dir, mb *mailbox, fi *folderIndex, id string, fn func(string, *Message) (bool, error)) (bool, error) {
	if err := ValidID(id); err != nil {
		return false, err
	}
	m, body, err := readMessage(d, id, mb.uid)
	if err != nil {
		return false, err
	}
	changed, err := fn(id, m)
	if err != nil || !changed {
		return false, err
	}
	if err := d.WriteFile(id+".md", Render(m, body), FileMode, mb.uid, mb.gid); err != nil {
		return false, fmt.Errorf("update message %s: %w", id, err)
	}
	if fi.loaded {
		fi.entryAfterWrite(d, id, m, body)
	}
	return true, nil
}

// Move moves a message (its .md, .eml and attachments) from one folder of
// the mailbox to another, keeping its id. ErrExists if the id is taken there.
func (s *Store) Move(mailbox, id, from, to string) error {
	if err := ValidID(id); err != nil {
		return err
	}
	if from == to {
		return fmt.Errorf("move %s: source and destination are both %q", id, from)
	}
	mb, err := s.openMailbox(mailbox)
	if err != nil {
		return err
	}
	defer mb.close()
	src, err := mb.folder(from, false)
	if err != nil {
		return err
	}
	defer src.Close()
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

	m, body, err := readMessage(src, id, mb.uid)
	if err != nil {
		return err
	}
	if taken(dst, id) {
		return fmt.Errorf("move %s to %s: %w", id, to, ErrExists)
	}
	var moved []string
	undo := func() {
		for _, n := range moved {
			dst.Rename(n, src, n, true)
		}
	}
	for _, suffix := range []string{attSuffix, ".eml", ".md"} {
		n := id + suffix
		if suffix != ".md" {
			if _, err := src.Lstat(n); errors.Is(err, unix.ENOENT) {
				continue
			}
		}
		if err := src.Rename(n, dst, n, true); err != nil {
			undo()
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
	if fdst.loaded {
		fdst.entryAfterWrite(dst, id, m, body)
	}
	return nil
}
