package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/mailctl/mailctl/internal/safeio"
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
var Folders = []string{"inbox", "sent", "archive", "trash", "drafts", "junk"}

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
	idx     *indexDB
	dedup   *deliveriesDB

	recent   recentDeliveries // for DeliverOnce
	deferred deferredSet      // for CreateDeferred
	now      func() time.Time // tests move the clock
}

// Open opens the store rooted at root, creating it (mode 0711) if missing,
// with its index in a new temporary directory removed at Close. What an
// interrupted process left behind is removed by Sweep.
func Open(root string) (*Store, error) { return OpenIndexed(root, "") }

// OpenIndexed is Open with the index database at indexPath (IndexFile in a
// directory only root can enter, which it creates; never inside the
// store). The index is kept from one run to the next.
func OpenIndexed(root, indexPath string) (*Store, error) {
	root = filepath.Clean(root)
	// Owners reach their folders through it, whatever the umask.
	if err := safeio.MkdirAll(filepath.Dir(root), 0o755); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	err := unix.Mkdir(root, uint32(RootMode))
	created := err == nil
	if err != nil && !errors.Is(err, unix.EEXIST) {
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
	temp := ""
	if indexPath == "" {
		if temp, err = os.MkdirTemp("", "mailctl-idx-"); err != nil {
			d.Close()
			return nil, fmt.Errorf("open store: %w", err)
		}
		indexPath = filepath.Join(temp, IndexFile)
	}
	// Opening one database may rebuild it: both stamps are read first, so
	// that one refused leaves the other as it was.
	err = peekDB(indexFormat, indexPath)
	if err == nil {
		err = peekDB(deliveriesFormat, deliveriesPath(indexPath))
	}
	var idx *indexDB
	if err == nil {
		idx, err = openIndexDB(indexPath)
	}
	if err != nil {
		d.Close()
		if temp != "" {
			os.RemoveAll(temp)
		}
		return nil, fmt.Errorf("open store: %w", err)
	}
	dedup, err := openDeliveriesDB(deliveriesPath(indexPath))
	if err != nil {
		idx.close()
		d.Close()
		if temp != "" {
			os.RemoveAll(temp)
		}
		return nil, fmt.Errorf("open store: %w", err)
	}
	idx.temp = temp
	return &Store{root: d, rootPath: root, folders: map[string]*folderIndex{}, idx: idx, dedup: dedup, now: time.Now}, nil
}

// Close releases the store's root directory.
func (s *Store) Close() error {
	s.settleMailbox("")
	s.mu.Lock()
	s.folders = map[string]*folderIndex{}
	s.mu.Unlock()
	s.dedup.flush() // as Sync does; a repeat is at worst stored twice
	s.dedup.close()
	s.idx.close()
	return s.root.Close()
}

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
		fi = newFolderIndex(s.idx, mailbox, folder)
		s.folders[k] = fi
	}
	return fi
}

// dropIndexes forgets a mailbox that was deleted: its folders' handles and
// its rows. Called with s.mu held.
func (s *Store) dropIndexes(mailbox string) {
	for k := range s.folders {
		if strings.HasPrefix(k, mailbox+"/") {
			delete(s.folders, k)
		}
	}
	s.idx.forgetMailbox(mailbox)
}

// Reindex throws the whole index away: every folder is read again from its
// files when it is next used (or by IndexAll).
func (s *Store) Reindex() error {
	if err := s.idx.rebuild(); err != nil {
		return err
	}
	s.mu.Lock()
	s.folders = map[string]*folderIndex{}
	s.mu.Unlock()
	return nil
}

// IndexAll brings the index of every folder of every mailbox up to date
// with the files, one folder at a time, and returns how many messages the
// index then holds. It stops early when ctx ends.
func (s *Store) IndexAll(ctx context.Context) (messages int, err error) {
	names, err := s.Mailboxes()
	if err != nil {
		return 0, err
	}
	for _, name := range names {
		for _, f := range Folders {
			if ctx.Err() != nil {
				return messages, ctx.Err()
			}
			// Marked before its lock is taken: a listing then waits for
			// the mark, a while, rather than for the lock, however long.
			fi := s.index(name, f)
			built, mine := fi.claim()
			for !mine {
				if ch := fi.building.Load(); ch != nil {
					<-*ch // a listing's sync of the folder
				}
				built, mine = fi.claim()
			}
			err := s.inFolder(name, f, nil, func(of openedFolder) error {
				of.fi.inAll = true
				err := of.fi.sync(of.d, of.mb)
				of.fi.inAll = false
				if err != nil {
					return err
				}
				db, _ := s.idx.handle()
				var n int
				err = db.QueryRow("SELECT count(*) FROM messages WHERE fid = ?", of.fi.row.fid).Scan(&n)
				messages += n
				return err
			})
			fi.release(built)
			// A folder or mailbox that is a mount (ErrOtherMount) is not
			// the store's: the others are indexed all the same.
			if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrOtherMount) {
				return messages, fmt.Errorf("index %s/%s: %w", name, f, err)
			}
		}
	}
	return messages, nil
}

// openFolder opens a mailbox and one of its folders; done closes both. Of
// the folder's deferred messages, those want picks are written first (nil:
// all of them; is(id) for a call about message id only).
func (s *Store) openFolder(mailbox, folder string, want func(id string) bool) (mb *mailbox, d *Dir, done func(), err error) {
	_, _ = s.settleSome(mailbox, folder, want, "", nil)
	return s.openFolderNow(mailbox, folder, false)
}

// openFolderNow is openFolder without writing the folder's deferred
// messages first.
func (s *Store) openFolderNow(mailbox, folder string, create bool) (mb *mailbox, d *Dir, done func(), err error) {
	return s.openFolderIn("", mailbox, folder, create)
}

// openFolderIn is openFolderNow of the mailbox of identity in only
// (MailboxIdentity; empty: whichever has the name): the one it opens is
// the one written to.
func (s *Store) openFolderIn(in, mailbox, folder string, create bool) (mb *mailbox, d *Dir, done func(), err error) {
	mb, err = s.openMailbox(mailbox)
	if err != nil {
		return nil, nil, nil, err
	}
	if in != "" && identityOf(mb).String() != in {
		mb.close()
		return nil, nil, nil, fmt.Errorf("mailbox %s: %w (another mailbox has the name now)", mailbox, ErrNotFound)
	}
	d, err = mb.folder(folder, create)
	if err != nil {
		mb.close()
		return nil, nil, nil, err
	}
	return mb, d, func() { d.Close(); mb.close() }, nil
}

// openedFolder is a mailbox's folder, open, with its index locked.
type openedFolder struct {
	mb *mailbox
	d  *Dir
	fi *folderIndex
}

// inFolder runs fn with a mailbox's folder open and its index locked, as
// every read-modify-write of a folder's messages does. Of the folder's
// deferred messages, those want picks are written first (nil: all of them).
func (s *Store) inFolder(name, folder string, want func(id string) bool, fn func(f openedFolder) error) error {
	mb, d, done, err := s.openFolder(name, folder, want)
	if err != nil {
		return err
	}
	defer done()
	fi := s.index(name, folder)
	fi.mu.Lock()
	defer fi.mu.Unlock()
	return fn(openedFolder{mb, d, fi})
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

// OpenMailboxDir opens the directory of mailbox name as the store opens
// it: never through a symlink, and never a mount (ErrOtherMount), for a
// walk of everything in it.
func (s *Store) OpenMailboxDir(name string) (*Dir, error) {
	mb, err := s.openMailbox(name)
	if err != nil {
		return nil, err
	}
	return mb.dir, nil
}

// MailboxIdentity names the mailbox now under name: its owner and its
// directory (device, inode, birth time). A mailbox deleted and made again
// under the same name, perhaps for another owner, has another identity, so
// what was recorded about the first (an inbound journal record, say) can be
// told from what concerns the second.
func (s *Store) MailboxIdentity(name string) (string, error) {
	mb, err := s.openMailbox(name)
	if err != nil {
		return "", err
	}
	defer mb.close()
	return identityOf(mb).String(), nil
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
	created = err == nil
	if err != nil && !errors.Is(err, unix.EEXIST) {
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
	_, _, err := s.Owner(name)
	return err == nil
}

// Mailboxes lists the names of the mailboxes on disk.
func (s *Store) Mailboxes() ([]string, error) {
	var out []string
	err := s.root.EachName(func(n string) error {
		if ValidMailboxName(n) != nil {
			return nil
		}
		if st, err := s.root.Lstat(n); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			out = append(out, n)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Delete removes the mailbox and everything in it: Detach, then Remove.
func (s *Store) Delete(name string, force bool) error {
	x, err := s.Detach(name, force)
	if err != nil {
		return err
	}
	return x.Remove()
}

// Detached is a mailbox taken out of the store by Detach: gone from its
// name, its files not yet removed.
type Detached struct {
	s          *Store
	name, tmp  string
	restorable bool
}

// Detach takes the mailbox out of the store in one atomic step, a rename
// into the store root where its owner cannot reach it by path. From then on
// the name is free and no mail reaches the mailbox. Restore puts it back
// exactly as it was; Remove deletes its files. Unless force, a mailbox
// holding any message in any folder is refused with ErrNotEmpty.
func (s *Store) Detach(name string, force bool) (*Detached, error) {
	s.settleMailbox(name)
	mb, err := s.openMailbox(name)
	if err != nil {
		return nil, err
	}
	defer mb.close()
	if !force {
		n, err := countMessages(mb.dir)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			return nil, fmt.Errorf("delete mailbox %s: %w (%d messages; force to delete anyway)", name, ErrNotEmpty, n)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tmp := tempName("del-")
	if err := s.root.Rename(name, s.root, tmp, true); err != nil {
		return nil, fmt.Errorf("delete mailbox %s: %w", name, err)
	}
	s.dropIndexes(name)
	if err := s.root.Sync(); err != nil {
		// Not known to be durable: put it back rather than leave it half-done.
		s.root.Rename(tmp, s.root, name, true)
		return nil, fmt.Errorf("delete mailbox %s: %w", name, err)
	}
	return &Detached{s: s, name: name, tmp: tmp, restorable: true}, nil
}

// Restore puts a detached mailbox back under its name, as it was. It fails
// once Remove has begun, or when the name has been taken since.
func (x *Detached) Restore() error {
	x.s.mu.Lock()
	defer x.s.mu.Unlock()
	if !x.restorable {
		return fmt.Errorf("restore mailbox %s: its removal has begun", x.name)
	}
	if err := x.s.root.Rename(x.tmp, x.s.root, x.name, true); err != nil {
		return fmt.Errorf("restore mailbox %s: %w", x.name, err)
	}
	x.restorable = false
	x.s.dropIndexes(x.name)
	return x.s.root.Sync()
}

// Remove deletes the files of a detached mailbox without following any
// symlink its owner planted, however deep its folders go. If it fails
// (an I/O error), what is left carries TempPrefix and the next Sweep
// removes it.
func (x *Detached) Remove() error {
	x.s.mu.Lock()
	x.restorable = false
	x.s.mu.Unlock()
	if err := x.s.root.RemoveTree(x.tmp); err != nil {
		return fmt.Errorf("delete mailbox %s: %w", x.name, err)
	}
	return nil
}

// Sweep removes what an interrupted process left in the store, whatever its
// age: temporary entries (TempPrefix) in the store root (mailboxes whose
// deletion did not finish), in every mailbox and in every folder, and raw
// copies and attachments of messages whose .md was never written. Only call
// it while no other process can be writing to the store and before this one
// writes: the daemon does, holding its lock, at start-up. It returns how
// many entries it removed, and the first error met (it goes on past errors).
func (s *Store) Sweep() (removed int, err error) {
	keep := func(n int, e error) {
		removed += n
		if err == nil && e != nil {
			err = e
		}
	}
	everything := time.Unix(1<<62, 0)
	rerr := s.root.EachName(func(n string) error {
		if strings.HasPrefix(n, TempPrefix) {
			if e := s.root.RemoveTree(n); e != nil {
				keep(0, e)
			} else {
				keep(1, nil)
			}
		}
		return nil
	})
	if rerr != nil {
		return removed, rerr
	}
	mailboxes, merr := s.Mailboxes()
	keep(0, merr)
	for _, name := range mailboxes {
		mb, e := s.openMailbox(name)
		if e != nil {
			keep(0, e)
			continue
		}
		keep(removeTemps(mb.dir, everything))
		keep(0, mb.dir.EachName(func(f string) error {
			d, e := mb.folder(f, false)
			if e != nil {
				return nil // not a folder of this owner's: left alone
			}
			keep(removeTemps(d, everything))
			keep(removeOrphans(d, everything))
			d.Close()
			return nil
		}))
		mb.close()
	}
	return removed, err
}

// countMessages counts the message files in every folder of a mailbox.
func countMessages(d *Dir) (int, error) {
	n := 0
	err := d.EachName(func(f string) error {
		// Only a directory opens: O_DIRECTORY refuses anything else.
		sub, err := d.OpenDir(f)
		if err != nil {
			return nil
		}
		defer sub.Close()
		return sub.EachName(func(file string) error {
			if _, ok := mdID(file); ok {
				n++
			}
			return nil
		})
	})
	return n, err
}

// Counts are a mailbox's message counts: Total and Unread in the inbox, Sent
// in the sent folder.
type Counts struct{ Total, Unread, Sent int }

// Counts returns the message counts of a mailbox, from the index.
func (s *Store) Counts(name string) (Counts, error) {
	s.settleMailbox(name)
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
		err = fi.sync(d, mb)
		if err == nil {
			db, _ := s.idx.handle()
			var total, unread int
			err = db.QueryRow("SELECT count(*), coalesce(sum(read = 0), 0) FROM messages WHERE fid = ?", fi.row.fid).Scan(&total, &unread)
			if f == "inbox" {
				c.Total, c.Unread = total, unread
			} else {
				c.Sent = total
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

// FindByMessageID returns the id of the message of the folder with the given
// Message-ID.
func (s *Store) FindByMessageID(mailbox, folder, messageID string) (id string, ok bool) {
	if messageID == "" {
		return "", false
	}
	s.inFolder(mailbox, folder, nil, func(f openedFolder) error {
		for rid, mid := range f.fi.reserved {
			if mid == messageID {
				id, ok = rid, true
				return nil
			}
		}
		if err := f.fi.sync(f.d, f.mb); err != nil {
			return err
		}
		db, _ := s.idx.handle()
		err := db.QueryRow("SELECT id FROM messages WHERE fid = ? AND message_id = ? ORDER BY sort_key DESC, id DESC LIMIT 1",
			f.fi.row.fid, messageID).Scan(&id)
		ok = err == nil
		return nil
	})
	return id, ok
}
