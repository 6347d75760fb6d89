package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/mailctl/mailctl/internal/formats"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// The index is a SQLite database (modernc.org/sqlite: pure Go, so the binary
// stays static) in a directory only root can enter, never inside a mailbox:
// its owner cannot read, write or replace it. It is derived data. The
// message files stay the truth: a folder whose directory changed since its
// last complete scan is scanned again (only files whose stamp changed are
// read), the rows a listing returns are checked against their files, and a
// database that is damaged, deleted or of an older layout is rebuilt from the
// files. A database of a newer layout is refused, naming both versions.
//
// Memory: SQLite keeps at most indexCacheKiB of pages per connection and maps
// nothing (mmap_size 0); the store keeps a few fields per folder. Nothing
// grows with the number of messages.

// IndexVersion is the layout of the index database this build writes,
// recorded in its user_version. An older one is rebuilt; a newer one is
// refused.
const IndexVersion = formats.Index

// indexAppID marks the file as a mailctl index (SQLite's application_id).
const indexAppID = 0x6d63746c // "mctl"

// IndexFile is the name of the index database in its directory.
const IndexFile = "index.db"

// indexCacheKiB is SQLite's page cache per connection, and indexConns the
// connections: together the bound of what the engine keeps in memory.
const (
	indexCacheKiB = 4096
	indexConns    = 3
)

// IndexConns is how many queries of the index run at once; more wait for
// one of its connections.
const IndexConns = indexConns

// ErrIndexVersion is returned when the index database was written by a newer
// mailctl; the error is a *formats.NewerError.
var ErrIndexVersion = formats.ErrNewer

const schema = `
CREATE TABLE mailboxes(
	mid   INTEGER PRIMARY KEY,
	name  TEXT NOT NULL UNIQUE,
	owner INTEGER NOT NULL,
	dev   INTEGER NOT NULL,
	ino   INTEGER NOT NULL,
	birth INTEGER NOT NULL
);
CREATE TABLE folders(
	fid       INTEGER PRIMARY KEY,
	mid       INTEGER NOT NULL,
	name      TEXT NOT NULL,
	dir_ino   INTEGER NOT NULL DEFAULT 0,
	dir_size  INTEGER NOT NULL DEFAULT 0,
	dir_mtime INTEGER NOT NULL DEFAULT 0,
	dir_ctime INTEGER NOT NULL DEFAULT 0,
	racy      INTEGER NOT NULL DEFAULT 1,
	scanned   INTEGER NOT NULL DEFAULT 0,
	UNIQUE(mid, name)
);
CREATE TABLE messages(
	rid         INTEGER PRIMARY KEY,
	fid         INTEGER NOT NULL,
	mid         INTEGER NOT NULL,
	id          TEXT NOT NULL,
	sort_key    INTEGER NOT NULL,
	ino         INTEGER NOT NULL,
	size        INTEGER NOT NULL,
	mtime       INTEGER NOT NULL,
	ctime       INTEGER NOT NULL,
	racy        INTEGER NOT NULL,
	read        INTEGER NOT NULL,
	starred     INTEGER NOT NULL,
	trusted_ok  INTEGER NOT NULL,
	message_id  TEXT NOT NULL,
	thread_id   TEXT NOT NULL,
	sender      TEXT NOT NULL,
	recipients  TEXT NOT NULL,
	subject     TEXT NOT NULL,
	date        TEXT NOT NULL,
	received    TEXT NOT NULL,
	trusted     TEXT NOT NULL,
	attachments INTEGER NOT NULL,
	snippet     TEXT NOT NULL,
	status      TEXT NOT NULL,
	labels      TEXT NOT NULL,
	labels_fold TEXT NOT NULL,
	from_fold   TEXT NOT NULL,
	subj_fold   TEXT NOT NULL,
	text_hash   INTEGER NOT NULL,
	UNIQUE(fid, id)
);
CREATE INDEX messages_order ON messages(fid, sort_key DESC, id DESC);
CREATE INDEX messages_mailbox ON messages(mid, sort_key DESC, id DESC);
CREATE INDEX messages_unread ON messages(fid, read);
CREATE INDEX messages_msgid ON messages(fid, message_id);
CREATE VIRTUAL TABLE fts USING fts5(subject, sender, recipients, cc, body, attachments, scope,
	content='', contentless_delete=1, tokenize="unicode61 remove_diacritics 2 tokenchars '§'");
`

// indexDB is the open index database.
type indexDB struct {
	path string
	temp string // a directory the store made for it, removed at close

	mu  sync.RWMutex // held for writing while the database is replaced
	db  *sql.DB
	gen atomic.Uint64 // changes each time the database is replaced

	wmu sync.Mutex // one write transaction at a time
	w   *indexWriter

	repairMu sync.Mutex // one repair of a damaged database at a time

	changes *changeLog // versions of folders' rows, and totals kept
}

// openIndexDB opens (creating, or rebuilding when damaged or old) the index
// database at path, whose directory is made root-only.
func openIndexDB(path string) (*indexDB, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open index: %w", err)
	}
	if err := checkIndexDir(dir); err != nil {
		return nil, err
	}
	x := &indexDB{path: path, changes: newChangeLog()}
	x.gen.Store(1)
	// Opening sets the journal mode, which writes to the file: a
	// database that is not ours to open is refused before.
	if err := peekDB(indexFormat, path); err != nil {
		return nil, err
	}
	db, err := openSQL(path)
	if errors.Is(err, ErrIndexVersion) || errors.Is(err, formats.ErrDamaged) {
		return nil, err // a later release's, or another program's: kept
	}
	if err != nil {
		// Damaged or not a database: it is rebuilt from the files.
		removeDB(path)
		if db, err = openSQL(path); err != nil {
			return nil, fmt.Errorf("open index %s: %w", path, err)
		}
	}
	x.db = db
	x.w = newIndexWriter(x)
	return x, nil
}

// checkIndexDir makes the index's directory root-only and refuses one that
// is a symlink or that someone else owns.
func checkIndexDir(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("open index: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("open index: %s must be a directory owned by uid %d", dir, os.Geteuid())
	}
	if st.Mode&0o077 != 0 {
		if err := unix.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("open index: %w", err)
		}
	}
	return nil
}

// openSQL opens the database at path, creates its schema when it is new
// and checks its version.
func openSQL(path string) (*sql.DB, error) {
	// The pragmas apply to every connection the pool opens. WAL lets
	// listings read while the writer commits; synchronous=NORMAL never
	// fsyncs a commit (a crash of the daemon loses nothing; a power loss
	// at most the last commits, which the files restore).
	dsn := "file:" + path + "?_txlock=immediate" +
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(10000)" +
		fmt.Sprintf("&_pragma=cache_size(-%d)", indexCacheKiB) +
		"&_pragma=mmap_size(0)&_pragma=temp_store(FILE)&_pragma=secure_delete(OFF)"
	if err := rootOnlyDB(path); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(indexConns)
	db.SetMaxIdleConns(indexConns)
	if err := initSchema(db, path); err != nil {
		db.Close()
		return nil, err
	}
	// The file is root's alone, whatever the umask.
	if err := os.Chmod(path, 0o600); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// rootOnlyDB makes the database at path, and its write-ahead log and
// shared memory when they exist, root's alone before SQLite opens it:
// SQLite creates the -wal and -shm files with the database file's mode, so
// a database it created itself (with the umask's 0644) would have them
// readable by anyone who can reach the directory. An empty file is a new
// database to SQLite.
func rootOnlyDB(path string) error {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
		if suffix == "" {
			flags |= unix.O_CREAT
		}
		fd, err := unix.Open(path+suffix, flags, 0o600)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err == nil {
			err = unix.Fchmod(fd, 0o600)
			unix.Close(fd)
		}
		if err != nil {
			return fmt.Errorf("open %s: %w", path+suffix, err)
		}
	}
	return nil
}

func initSchema(db *sql.DB, path string) error {
	var version, app int64
	if err := db.QueryRow("PRAGMA user_version").Scan(&version); err != nil {
		return err
	}
	if err := db.QueryRow("PRAGMA application_id").Scan(&app); err != nil {
		return err
	}
	if err := indexFormat.check(path, app, version); err != nil {
		return err
	}
	switch {
	case version == IndexVersion && app == indexAppID:
		var ok string
		// A cheap check that the file is whole enough to use.
		if err := db.QueryRow("SELECT name FROM sqlite_master WHERE name = 'messages'").Scan(&ok); err != nil {
			return fmt.Errorf("index %s: %w", path, err)
		}
		return nil
	case version != 0 || app != 0:
		return fmt.Errorf("index %s: version %d of an older layout", path, version)
	}
	var n int
	if err := db.QueryRow("SELECT count(*) FROM sqlite_master").Scan(&n); err != nil {
		return err
	}
	if n != 0 {
		return fmt.Errorf("index %s: not a mailctl index", path)
	}
	return createStamped(db, schema, IndexVersion)
}

// removeDB removes a database file and its journal files.
func removeDB(path string) {
	for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
		os.Remove(path + suffix)
	}
}

// close stops the writer (after it has written what it holds) and closes the
// database.
func (x *indexDB) close() {
	x.w.stop()
	x.mu.Lock()
	x.db.Close()
	x.mu.Unlock()
	if x.temp != "" {
		os.RemoveAll(x.temp)
	}
}

// isDamage reports whether err says the database file is damaged.
func isDamage(err error) bool {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code() & 0xff {
	case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_FORMAT:
		return true
	}
	return false
}

// rebuild throws the database away and starts an empty one: every folder is
// scanned again on its next use. It is how damage is repaired and what
// reindex does.
func (x *indexDB) rebuild() error {
	x.w.flushQuiet()
	x.wmu.Lock()
	defer x.wmu.Unlock()
	x.mu.Lock()
	defer x.mu.Unlock()
	x.db.Close()
	removeDB(x.path)
	db, err := openSQL(x.path)
	if err != nil {
		// Keep a closed handle: every use fails until a rebuild succeeds.
		x.db, _ = sql.Open("sqlite", "file::memory:")
		x.db.Close()
		x.gen.Add(1)
		x.changes.reset()
		return fmt.Errorf("rebuild index %s: %w", x.path, err)
	}
	x.db = db
	x.gen.Add(1)
	x.changes.reset()
	return nil
}

// damaged passes err on, first rebuilding the database of generation gen
// when err says it is damaged (unless another caller did already).
func (x *indexDB) damaged(gen uint64, err error) error {
	if isDamage(err) {
		x.repairMu.Lock()
		if x.gen.Load() == gen {
			x.rebuild()
		}
		x.repairMu.Unlock()
	}
	return err
}

// damagedAsync is damaged for the writer, which cannot wait for a rebuild
// (a rebuild waits for the writer).
func (x *indexDB) damagedAsync(gen uint64, err error) {
	if isDamage(err) {
		go x.damaged(gen, err)
	}
}

// handle returns the database and its generation.
func (x *indexDB) handle() (*sql.DB, uint64) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.db, x.gen.Load()
}

// write runs fn in one write transaction on the database of generation gen;
// errStaleGen when the database was replaced since.
func (x *indexDB) write(gen uint64, fn func(tx *sql.Tx) error) error {
	x.wmu.Lock()
	defer x.wmu.Unlock()
	db, g := x.handle()
	if g != gen {
		return errStaleGen
	}
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		return err
	}
	// Whatever the outcome, the folders fn touched get a new version.
	defer x.changes.publish()
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// errStaleGen means the database was replaced while an operation was on its
// way: what it wanted to write is read again from the files.
var errStaleGen = errors.New("index database was rebuilt")

// mailboxIdentity is what tells a mailbox apart from an earlier one of the
// same name: its owner and its directory (device, inode, birth time).
type mailboxIdentity struct {
	owner, dev, ino, birth int64
}

func identityOf(mb *mailbox) mailboxIdentity {
	st, _ := mb.dir.Stat()
	id := mailboxIdentity{owner: int64(mb.uid), dev: int64(st.Dev), ino: int64(st.Ino)}
	var sx unix.Statx_t
	if unix.Statx(mb.dir.fd, "", unix.AT_EMPTY_PATH, unix.STATX_BTIME, &sx) == nil && sx.Mask&unix.STATX_BTIME != 0 {
		id.birth = sx.Btime.Sec*1e9 + int64(sx.Btime.Nsec)
	}
	return id
}

// folderRow is what the database records of a folder.
type folderRow struct {
	fid, mid int64
	stamp    fileStamp
	racy     bool
	scanned  bool
}

// ensureFolder returns the folder's row, creating it (and the mailbox's) as
// needed. A mailbox whose identity changed (deleted and made again, perhaps
// for another owner) first loses every row of the earlier one.
func (x *indexDB) ensureFolder(gen uint64, mailbox, folder string, id mailboxIdentity) (folderRow, error) {
	var r folderRow
	err := x.write(gen, func(tx *sql.Tx) error {
		var have mailboxIdentity
		err := tx.QueryRow("SELECT mid, owner, dev, ino, birth FROM mailboxes WHERE name = ?", mailbox).
			Scan(&r.mid, &have.owner, &have.dev, &have.ino, &have.birth)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		case have != id:
			if err := dropMailbox(x, tx, r.mid); err != nil {
				return err
			}
			r.mid = 0
		}
		if r.mid == 0 {
			res, err := tx.Exec("INSERT INTO mailboxes(name, owner, dev, ino, birth) VALUES(?, ?, ?, ?, ?)", mailbox, id.owner, id.dev, id.ino, id.birth)
			if err != nil {
				return err
			}
			if r.mid, err = res.LastInsertId(); err != nil {
				return err
			}
		}
		var racy, scanned int
		err = tx.QueryRow("SELECT fid, dir_ino, dir_size, dir_mtime, dir_ctime, racy, scanned FROM folders WHERE mid = ? AND name = ?", r.mid, folder).
			Scan(&r.fid, &r.stamp.ino, &r.stamp.size, &r.stamp.mtime, &r.stamp.ctime, &racy, &scanned)
		if errors.Is(err, sql.ErrNoRows) {
			res, err := tx.Exec("INSERT INTO folders(mid, name) VALUES(?, ?)", r.mid, folder)
			if err != nil {
				return err
			}
			r.fid, err = res.LastInsertId()
			r.racy = true
			return err
		}
		r.racy, r.scanned = racy != 0, scanned != 0
		return err
	})
	return r, err
}

// dropMailbox removes every row of a mailbox.
func dropMailbox(x *indexDB, tx *sql.Tx, mid int64) error {
	x.changes.touchAll()
	for _, q := range []string{
		"DELETE FROM fts WHERE rowid IN (SELECT rid FROM messages WHERE mid = ?)",
		"DELETE FROM messages WHERE mid = ?",
		"DELETE FROM folders WHERE mid = ?",
		"DELETE FROM mailboxes WHERE mid = ?",
	} {
		if _, err := tx.Exec(q, mid); err != nil {
			return err
		}
	}
	return nil
}

// forgetMailbox removes a mailbox's rows (it was deleted).
func (x *indexDB) forgetMailbox(name string) {
	_, gen := x.handle()
	x.w.flushQuiet()
	x.write(gen, func(tx *sql.Tx) error {
		var mid int64
		if err := tx.QueryRow("SELECT mid FROM mailboxes WHERE name = ?", name).Scan(&mid); err != nil {
			return nil
		}
		return dropMailbox(x, tx, mid)
	})
}

// legacyIndexName is the name of the per-folder index file earlier
// versions of the daemon kept inside mailboxes; the daemon removes its own
// leftovers (only regular files of exactly that name, never following a
// link). Nothing reads them.
func legacyIndexName(folder string) string { return ".mailctl-index." + folder }

// removeLegacyIndex removes a mailbox's leftover index files of the
// earlier format.
func removeLegacyIndex(d *Dir, uid int) {
	d.EachName(func(n string) error {
		f, ok := strings.CutPrefix(n, legacyIndexName(""))
		if !ok || ValidFolder(f) != nil {
			return nil
		}
		if st, err := d.Lstat(n); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink == 1 && checkOwner(&st, uid) == nil {
			d.Remove(n)
		}
		return nil
	})
}

// createStamped creates schema in an empty database and stamps it as
// mailctl's at version (application_id and user_version), in one
// transaction.
func createStamped(db *sql.DB, schema string, version int64) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.Exec(schema); err != nil {
		return err
	}
	if _, err := tx.Exec(fmt.Sprintf("PRAGMA application_id = %d; PRAGMA user_version = %d", indexAppID, version)); err != nil {
		return err
	}
	return tx.Commit()
}
