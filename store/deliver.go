package store

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Deliver stores a new message in a folder and returns its id. It assigns
// m.ID, m.Mailbox and m.Attachments (with sanitized, unique names), sets
// m.ReceivedAt to now if zero and m.SizeBytes to len(raw) if zero, then
// writes the attachments, the raw message (<id>.eml) and finally <id>.md, the
// commit point, each durably and owned by the mailbox owner. When it returns
// nil, everything is on disk. Every call stores a message, whatever its
// Message-ID: a Message-ID is chosen by the sender, so anyone can reuse
// another message's. DeliverOnce de-duplicates repeats of one delivery.
func (s *Store) Deliver(mailbox, folder string, m *Message, body string, raw []byte, atts []AttachmentData) (id string, dup bool, err error) {
	id, err = s.deliver(mailbox, folder, m, body, rawOf(raw), atts, nil)
	return id, false, err
}

// DeliveryKey identifies one delivery of a message: a hash of the bytes the
// sender handed in (below the trace headers the receiving server adds) and
// of what the receiver concluded about them (authentication, trust). Two
// deliveries with the same key are provably the same delivery, repeated: a
// sender retrying because it never saw our reply, or one message addressed
// to two aliases of a mailbox.
type DeliveryKey [sha256.Size]byte

// DedupWindow is how long a delivery is recognised again after it arrived
// (see deliveriesDB for the bound on how many are). Past it a repeat is
// stored a second time: a duplicate, never a loss.
const DedupWindow = time.Hour

// DeliverOnce is Deliver for a delivery identified by key. When the same key
// was stored in the same folder within DedupWindow (by this process or, as
// the store remembers deliveries on disk, an earlier one) and that message
// is still there, nothing is written: dup is true and id is the earlier
// message's. A repeat arriving while the first copy is still being written
// waits for its outcome, and is stored itself if that write failed.
func (s *Store) DeliverOnce(key DeliveryKey, mailbox, folder string, m *Message, body string, raw []byte, atts []AttachmentData) (id string, dup bool, err error) {
	return s.DeliverOnceFrom(key, mailbox, folder, m, body, rawOf(raw), atts)
}

// DeliverOnceFrom is DeliverOnce with the raw message streamed from raw, for
// a message too large to hold in memory (its large attachments are Spills).
// Spills among atts are spent when it returns a new message, and left to the
// caller to discard otherwise.
func (s *Store) DeliverOnceFrom(key DeliveryKey, mailbox, folder string, m *Message, body string, raw RawSource, atts []AttachmentData) (id string, dup bool, err error) {
	return s.deliverOnce(key, mailbox, folder, m, body, raw, atts, nil)
}

// DeliverOnceJournaled is DeliverOnceFrom for a caller that makes the
// delivery durable in a journal of its own: once the message's id is chosen
// (and m's defaults filled in), journal(id, mailbox) records the message
// under that id, for the mailbox of that identity (MailboxIdentity: the
// one the store has open and writes to), and makes the record durable; then the files are written without an
// fsync, and the caller's checkpoint (Sync) makes them durable before it
// forgets the record. When journal fails, nothing is written; when the
// write fails after it, the caller must forget the record. The delivery is
// remembered (for DeliverOnce's repeats) in memory until that Sync commits
// it: a caller that restarts with the record still in its journal
// remembers it again (RememberDelivery), written or not.
func (s *Store) DeliverOnceJournaled(key DeliveryKey, mailbox, folder string, m *Message, body string, raw RawSource, atts []AttachmentData, journal func(id, mailbox string) error) (id string, dup bool, err error) {
	return s.deliverOnce(key, mailbox, folder, m, body, raw, atts, journal)
}

func (s *Store) deliverOnce(key DeliveryKey, mailbox, folder string, m *Message, body string, raw RawSource, atts []AttachmentData, journal func(id, mailbox string) error) (id string, dup bool, err error) {
	k := recentKey{mailbox: mailbox, folder: folder, key: key}
	for {
		prev, mine := s.recent.claim(k, s.now())
		if mine != nil {
			// A repeat of a delivery an earlier run of the daemon stored.
			if prevID, ok := s.deliveredBefore(k); ok {
				s.recent.finish(mine, prevID, nil)
				return prevID, true, nil
			}
			if testHookBeforeWrite != nil {
				err = testHookBeforeWrite(mailbox, folder)
			}
			if err == nil {
				id, err = s.deliver(mailbox, folder, m, body, raw, atts, journal)
			}
			if err == nil {
				// Remembered on disk before the sender is answered, or,
				// for a caller with a journal of its own, by the Sync
				// before that journal lets the delivery go. Failing that,
				// a repeat after a restart is stored again: a duplicate,
				// never a loss.
				s.rememberDelivery(k, id, journal != nil)
			}
			s.recent.finish(mine, id, err)
			return id, false, err
		}
		<-prev.done
		if prev.err == nil && s.Has(mailbox, folder, prev.id) {
			return prev.id, true, nil
		}
		// The earlier write failed, or its message has been removed since:
		// this delivery is stored after all.
		s.recent.forget(k, prev)
	}
}

// RememberDelivery records that the delivery key to the folder was stored
// as message id, as DeliverOnce does once it has written a message: for a
// caller that wrote the message again from a journal of its own after a
// crash (ReplaceUnsynced), so that a repeat of the delivery (the sender
// retrying, having never seen the answer) is recognised and not stored a
// second time. It is durable against a crash of the process when it returns.
func (s *Store) RememberDelivery(key DeliveryKey, mailbox, folder, id string) error {
	if err := ValidID(id); err != nil {
		return err
	}
	return s.rememberDelivery(recentKey{mailbox: mailbox, folder: folder, key: key}, id, false)
}

// testHookBeforeWrite, when set (by tests only), runs before DeliverOnce
// writes a delivery it claimed; an error fails that write. It lets a test
// hold a write in flight and release it when it chooses.
var testHookBeforeWrite func(mailbox, folder string) error

// Has reports whether the folder holds message id.
func (s *Store) Has(mailbox, folder, id string) bool {
	if s.deferredHas(mailbox, folder, id) {
		return true
	}
	_, d, done, err := s.openFolderNow(mailbox, folder, false)
	if err != nil {
		return false
	}
	defer done()
	st, err := d.Lstat(id + ".md")
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
}

func (s *Store) deliver(mailbox, folder string, m *Message, body string, raw RawSource, atts []AttachmentData, journal func(id, mailbox string) error) (id string, err error) {
	// A new message needs no deferred one written first: its id is chosen
	// past them (allocate).
	mb, d, done, err := s.openFolderNow(mailbox, folder, true)
	if err != nil {
		return "", err
	}
	defer done()
	fi, newID, err := s.reserve(mailbox, folder, d, mb, m, raw)
	if err != nil {
		return "", err
	}
	defer func() {
		fi.mu.Lock()
		delete(fi.reserved, newID)
		if err == nil {
			fi.entryAfterCreate(mb, d, newID, m, body)
		}
		fi.mu.Unlock()
	}()

	dirSync := &fi.dirSync
	if journal != nil {
		if err = journal(newID, identityOf(mb).String()); err != nil {
			return "", err
		}
		dirSync = nil // durable in the journal: no fsync
	}
	if err = writeWhole(d, mb, dirSync, newID, mailbox, m, body, raw, atts); err != nil {
		return "", fmt.Errorf("deliver to %s/%s: %w", mailbox, folder, err)
	}
	return newID, nil
}

// fillDefaults sets the arrival time and size of a message being stored
// when its caller left them out.
func fillDefaults(m *Message, raw RawSource) {
	if m.ReceivedAt.IsZero() {
		m.ReceivedAt = time.Now().UTC()
	}
	if m.SizeBytes == 0 && raw != nil {
		m.SizeBytes = raw.Size()
	}
}

// reserve fills in m's defaults and reserves a free id for m.
func (s *Store) reserve(mailbox, folder string, d *Dir, mb *mailbox, m *Message, raw RawSource) (*folderIndex, string, error) {
	fillDefaults(m, raw)
	fi := s.index(mailbox, folder)
	fi.mu.Lock()
	defer fi.mu.Unlock()
	// The folder's index need not be read first: a free id is one no
	// file has (allocate asks the folder).
	deferred := func(id string) bool { return s.deferredHas(mailbox, folder, id) }
	id, err := fi.allocate(d, NewID(m.ReceivedAt, m.Subject), m.MessageID, deferred)
	return fi, id, err
}

// writeWhole writes message id (reserved by its caller) or leaves nothing
// of it behind: the id is the caller's, so these are its own files (the .md
// too, if only the final directory fsync failed: the caller reports a
// failure, so the message must not stay).
func writeWhole(d *Dir, mb *mailbox, dirSync *groupSync, id, mailbox string, m *Message, body string, raw RawSource, atts []AttachmentData) error {
	m.ID = id
	m.Mailbox = mailbox
	m.Attachments = nil
	if err := writeMessage(d, mb, dirSync, id, m, body, raw, atts); err != nil {
		d.Remove(id + ".md")
		d.RemoveAll(id + attSuffix)
		d.Remove(id + ".eml")
		return err
	}
	return nil
}

// recentKey is one delivery to one folder.
type recentKey struct {
	mailbox, folder string
	key             DeliveryKey
}

// recentDelivery is a delivery being written. done is closed once id and
// err are set.
type recentDelivery struct {
	key  recentKey
	done chan struct{}
	id   string
	err  error
}

// recentDeliveries holds the deliveries being written, so that a repeat
// arriving meanwhile waits for the outcome. Once written, a delivery is
// remembered on disk (rememberDelivery) and leaves memory: what is held is
// bounded by the deliveries in flight.
type recentDeliveries struct {
	mu    sync.Mutex
	byKey map[recentKey]*recentDelivery
}

// claim returns the delivery of k in flight, or, when there is none,
// records a new one for the caller to write and finish.
func (r *recentDeliveries) claim(k recentKey, _ time.Time) (prev, mine *recentDelivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.byKey[k]; e != nil {
		return e, nil
	}
	if r.byKey == nil {
		r.byKey = map[recentKey]*recentDelivery{}
	}
	e := &recentDelivery{key: k, done: make(chan struct{})}
	r.byKey[k] = e
	return nil, e
}

// finish records the outcome of a claimed delivery, forgets it and wakes
// its waiters.
func (r *recentDeliveries) finish(e *recentDelivery, id string, err error) {
	r.mu.Lock()
	e.id, e.err = id, err
	if r.byKey[e.key] == e {
		delete(r.byKey, e.key)
	}
	r.mu.Unlock()
	close(e.done)
}

// forget drops e if it is still what k remembers.
func (r *recentDeliveries) forget(k recentKey, e *recentDelivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byKey[k] == e {
		delete(r.byKey, k)
	}
}

// maxIDTries bounds the ids allocate tries for one message.
const maxIDTries = 10000

// maxIDHints bounds how many id bases a folder remembers the next suffix
// of; past it the hints start again (ids are still checked one by one).
const maxIDHints = 64

// allocate reserves a free id based on base: base, base-2, base-3...,
// starting after the last one it gave for base, so that many messages
// with one subject in one second cost one look each, not one per earlier
// message. Called with fi.mu held.
func (fi *folderIndex) allocate(d *Dir, base, messageID string, deferred func(id string) bool) (string, error) {
	start := max(fi.nextN[base], 1)
	for n := start; n < start+maxIDTries; n++ {
		id := base
		if n > 1 {
			id = base + "-" + strconv.Itoa(n)
		}
		_, reserved := fi.reserved[id]
		if reserved || taken(d, id) || deferred(id) {
			continue
		}
		fi.reserved[id] = messageID
		if fi.nextN == nil || len(fi.nextN) >= maxIDHints {
			fi.nextN = map[string]int{}
		}
		fi.nextN[base] = n + 1
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

// writeMessage writes the files of message id. With dirSync, each file is
// fsynced and one directory fsync, shared with concurrent deliveries to the
// folder, then covers the names; with none, nothing is fsynced.
func writeMessage(d *Dir, mb *mailbox, dirSync *groupSync, id string, m *Message, body string, raw RawSource, atts []AttachmentData) error {
	mode := syncFile
	if dirSync == nil {
		mode = syncNone
	}
	if len(atts) > 0 {
		if err := writeAttachments(d, mb, id, id+attSuffix, m, atts, mode); err != nil {
			return err
		}
	}
	// The .eml and then the .md (the commit point) are each fsynced and
	// linked into place whole; one directory fsync, shared with concurrent
	// deliveries to this folder, then makes both names durable.
	if raw != nil {
		if err := d.writeNewFileTo(id+".eml", raw, FileMode, mb.uid, mb.gid, mode); err != nil {
			return err
		}
	}
	if err := d.writeNewFileTo(id+".md", renderedOf(m, body), FileMode, mb.uid, mb.gid, mode); err != nil {
		return err
	}
	if dirSync == nil {
		return nil
	}
	return dirSync.sync(d)
}

// uniqueName returns name, or name with "-2", "-3"... before its extension
// if already used.
func uniqueName(name string, used map[string]bool) string {
	out := name
	for n := 2; used[out]; n++ {
		out = NumberedFilename(name, n)
	}
	used[out] = true
	return out
}

// Reserve picks an id for m in the folder, as Deliver would, and holds it
// until release is called: no delivery takes it meanwhile, so the message
// can be written later under that id with CreateUnsynced.
func (s *Store) Reserve(mailbox, folder string, m *Message) (id string, release func(), err error) {
	mb, d, done, err := s.openFolderNow(mailbox, folder, true) // as deliver
	if err != nil {
		return "", nil, err
	}
	defer done()
	fi, id, err := s.reserve(mailbox, folder, d, mb, m, nil)
	if err != nil {
		return "", nil, err
	}
	return id, sync.OnceFunc(func() {
		fi.mu.Lock()
		delete(fi.reserved, id)
		fi.mu.Unlock()
	}), nil
}

// CreateUnsynced writes message id (an id Reserve gave) into the folder,
// or answers ErrExists when the folder already has it. Nothing is fsynced:
// as with UpdateUnsynced, the caller keeps a durable record from which it
// writes the message again after a power loss, until a Sync.
func (s *Store) CreateUnsynced(mailbox, folder, id string, m *Message, body string, raw []byte, atts []AttachmentData) error {
	return s.CreateUnsyncedIn("", mailbox, folder, id, m, body, raw, atts)
}

// CreateUnsyncedIn is CreateUnsynced into the mailbox of identity in
// (MailboxIdentity) only: when the name is now another mailbox's, or
// none's, it writes nothing and answers ErrNotFound. A caller that checked
// a mailbox, then writes what it holds of that mailbox by name, takes the
// identity before the check, so that a mailbox made since under the name
// never gets it. An empty in is whatever mailbox has the name.
func (s *Store) CreateUnsyncedIn(in, mailbox, folder, id string, m *Message, body string, raw []byte, atts []AttachmentData) error {
	if err := ValidID(id); err != nil {
		return err
	}
	if s.deferredHas(mailbox, folder, id) {
		return fmt.Errorf("create %s/%s/%s: %w", mailbox, folder, id, ErrExists)
	}
	return s.createUnsynced(in, mailbox, folder, id, m, body, rawOf(raw), atts)
}

// ReplaceUnsynced writes message id into the folder as createUnsynced does,
// replacing whatever files of that id are there: those of an earlier write
// of the same message that a crash interrupted, or that a power loss may
// have left empty. It is for a caller writing a message again from its own
// journal, which chose the id before the crash; nothing is fsynced.
func (s *Store) ReplaceUnsynced(mailbox, folder, id string, m *Message, body string, raw RawSource, atts []AttachmentData) error {
	if err := ValidID(id); err != nil {
		return err
	}
	if err := s.removeLeftovers(mailbox, folder, id); err != nil {
		return fmt.Errorf("replace %s/%s/%s: %w", mailbox, folder, id, err)
	}
	return s.createUnsynced("", mailbox, folder, id, m, body, raw, atts)
}

// removeLeftovers removes whatever files of message id the folder has.
func (s *Store) removeLeftovers(mailbox, folder, id string) error {
	_, d, done, err := s.openFolderNow(mailbox, folder, true)
	if err != nil {
		return err
	}
	defer done()
	fi := s.index(mailbox, folder)
	fi.mu.Lock()
	defer fi.mu.Unlock()
	for _, f := range []string{id + ".md", id + ".eml"} {
		if err := d.Remove(f); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
	}
	if err := d.RemoveAll(id + attSuffix); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	fi.remove(id)
	return nil
}

// createUnsynced is CreateUnsynced past the checks, without writing the
// folder's deferred messages first (it is how they are written).
func (s *Store) createUnsynced(in, mailbox, folder, id string, m *Message, body string, raw RawSource, atts []AttachmentData) error {
	mb, d, done, err := s.openFolderIn(in, mailbox, folder, true)
	if err != nil {
		return err
	}
	defer done()
	fillDefaults(m, raw)
	fi := s.index(mailbox, folder)
	// Of two writers of one id, the second waits for the first and then
	// answers ErrExists: it finds the message written, never half of it.
	// The files are written outside the folder's lock.
	fi.mu.Lock()
	wait, busy := fi.creating[id]
	if busy || taken(d, id) {
		fi.mu.Unlock()
		if busy {
			<-wait
		}
		return fmt.Errorf("create %s/%s/%s: %w", mailbox, folder, id, ErrExists)
	}
	written := make(chan struct{})
	fi.creating[id] = written
	fi.mu.Unlock()
	defer func() {
		fi.mu.Lock()
		delete(fi.creating, id)
		fi.mu.Unlock()
		close(written)
	}()
	if err := writeWhole(d, mb, nil, id, mailbox, m, body, raw, atts); err != nil {
		return fmt.Errorf("create %s/%s/%s: %w", mailbox, folder, id, err)
	}
	fi.mu.Lock()
	fi.entryAfterCreate(mb, d, id, m, body)
	fi.mu.Unlock()
	return nil
}
