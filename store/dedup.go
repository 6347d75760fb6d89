package store

import (
	"cmp"
	"database/sql"
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/mailctl/mailctl/internal/formats"
)

// Deliveries the store has answered for are remembered in a small database
// of their own beside the index, so that a repeat of one (a sender that
// never saw our 250 and sends again) is recognised after the daemon is
// killed and restarted too. It is separate from the index so that
// remembering a delivery, which the answer to the sender waits for, never
// waits behind the index writer's batches. Commits are grouped: deliveries
// that finish together share one.

// DeliveriesFile is the name of the deliveries database, beside IndexFile.
const DeliveriesFile = "deliveries.db"

// DeliveriesVersion is the layout of the deliveries database this build
// writes, recorded in its user_version. An older one is started again
// empty; a newer one is refused.
const DeliveriesVersion = formats.Deliveries

// dedupKeep bounds the deliveries remembered on disk (besides DedupWindow).
const dedupKeep = 200_000

const deliveriesSchema = `
CREATE TABLE deliveries(
	mailbox  TEXT NOT NULL,
	folder   TEXT NOT NULL,
	key      BLOB NOT NULL,
	identity TEXT NOT NULL,
	id       TEXT NOT NULL,
	at       INTEGER NOT NULL,
	PRIMARY KEY(mailbox, folder, key)
) WITHOUT ROWID;
CREATE INDEX deliveries_at ON deliveries(at);
`

// dedupRec is one delivery to remember.
type dedupRec struct {
	mailbox, folder, identity string
	key                       DeliveryKey
	id                        string
	at                        int64
}

// deliveriesDB is the open deliveries database.
type deliveriesDB struct {
	path string
	db   *sql.DB

	// seen is a Bloom filter of the deliveries the database holds, so that
	// the common case, a delivery never seen, costs no query. Its size is
	// fixed (bloomBits), whatever the number of deliveries.
	bloomMu sync.RWMutex
	seen    []uint64
	seed    maphash.Seed

	mu       sync.Mutex
	pending  []*dedupRec
	waiters  []chan error
	running  bool
	inserted int
	insert   *sql.Stmt // prepared once: preparing costs as much as running it

	// later holds the deliveries remembered in memory only, for callers
	// whose own journal holds each of them until the next flush commits
	// them all at once (rememberLater, Store.Sync).
	laterMu sync.Mutex
	later   map[recentKey]*dedupRec
}

// maxLater bounds the deliveries held for the next flush (about 200 bytes
// each); past it a delivery is committed before its caller goes on, as
// without a journal. The inbound journal checkpoints every second and at
// 1,024 copies written, so only a flush that keeps failing reaches it.
var maxLater = 1 << 13

func openDeliveriesDB(path string) (*deliveriesDB, error) {
	if err := peekDB(deliveriesFormat, path); err != nil {
		return nil, err // not ours to open (see openIndexDB)
	}
	db, err := openSmallDB(path, deliveriesSchema)
	if err != nil && !errors.Is(err, ErrIndexVersion) && !errors.Is(err, formats.ErrDamaged) {
		// Damaged: start again; what it held was a convenience.
		removeDB(path)
		db, err = openSmallDB(path, deliveriesSchema)
	}
	if err != nil {
		return nil, err
	}
	insert, err := db.Prepare("INSERT OR REPLACE INTO deliveries(mailbox, folder, key, identity, id, at) VALUES(?, ?, ?, ?, ?, ?)")
	if err != nil {
		db.Close()
		return nil, err
	}
	x := &deliveriesDB{path: path, db: db, seen: make([]uint64, bloomBits/64), seed: maphash.MakeSeed(), insert: insert}
	rows, err := db.Query("SELECT mailbox, folder, key FROM deliveries")
	if err != nil {
		db.Close()
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var mailbox, folder string
		var key []byte
		if rows.Scan(&mailbox, &folder, &key) == nil && len(key) == len(DeliveryKey{}) {
			x.add(mailbox, folder, DeliveryKey(key))
		}
	}
	return x, rows.Err()
}

// bloomBits is the size of the Bloom filter of deliveries (512 KiB): with
// dedupKeep deliveries in it, about 3 lookups in 1,000 of deliveries never
// seen reach the database.
const bloomBits = 1 << 22

// bits are the filter's three positions for a delivery.
func (x *deliveriesDB) bits(mailbox, folder string, key DeliveryKey) [3]uint64 {
	var h maphash.Hash
	h.SetSeed(x.seed)
	h.WriteString(mailbox)
	h.WriteByte(0)
	h.WriteString(folder)
	h.WriteByte(0)
	h.Write(key[:])
	a := h.Sum64()
	b := a>>32 | a<<32 ^ 0x9e3779b97f4a7c15
	return [3]uint64{a % bloomBits, b % bloomBits, (a + 2*b) % bloomBits}
}

func (x *deliveriesDB) add(mailbox, folder string, key DeliveryKey) {
	x.bloomMu.Lock()
	for _, b := range x.bits(mailbox, folder, key) {
		x.seen[b/64] |= 1 << (b % 64)
	}
	x.bloomMu.Unlock()
}

// mayHave reports whether the database may hold the delivery.
func (x *deliveriesDB) mayHave(mailbox, folder string, key DeliveryKey) bool {
	x.bloomMu.RLock()
	defer x.bloomMu.RUnlock()
	for _, b := range x.bits(mailbox, folder, key) {
		if x.seen[b/64]&(1<<(b%64)) == 0 {
			return false
		}
	}
	return true
}

// openSmallDB opens a database of this store's with the given schema.
func openSmallDB(path, schema string) (*sql.DB, error) {
	dsn := "file:" + path + "?_txlock=immediate&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)" +
		"&_pragma=busy_timeout(10000)&_pragma=cache_size(-1024)&_pragma=mmap_size(0)"
	if err := rootOnlyDB(path); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(2)
	if err := ensureSchema(db, path, schema); err != nil {
		db.Close()
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

func ensureSchema(db *sql.DB, path, schema string) error {
	var version, app int64
	if err := db.QueryRow("PRAGMA user_version").Scan(&version); err != nil {
		return err
	}
	if err := db.QueryRow("PRAGMA application_id").Scan(&app); err != nil {
		return err
	}
	if err := deliveriesFormat.check(path, app, version); err != nil {
		return err
	}
	switch {
	case version == DeliveriesVersion && app == indexAppID:
		return nil
	case version != 0 || app != 0:
		return fmt.Errorf("%s: not a database of this version", path)
	}
	return createStamped(db, schema, DeliveriesVersion)
}

func (x *deliveriesDB) close() {
	x.insert.Close()
	x.db.Close()
}

// remember records rs durably (against a crash of the process) before it
// returns: one commit, shared with the concurrent callers.
func (x *deliveriesDB) remember(rs ...*dedupRec) error {
	for _, r := range rs {
		x.add(r.mailbox, r.folder, r.key)
	}
	done := make(chan error, 1)
	x.mu.Lock()
	x.pending = append(x.pending, rs...)
	x.waiters = append(x.waiters, done)
	if x.running {
		x.mu.Unlock()
		return <-done
	}
	x.running = true
	for len(x.pending) > 0 {
		batch, waiters := x.pending, x.waiters
		x.pending, x.waiters = nil, nil
		x.mu.Unlock()
		err := x.commit(batch)
		for _, w := range waiters {
			w <- err
		}
		x.mu.Lock()
	}
	x.running = false
	x.mu.Unlock()
	return <-done
}

// rememberLater records r in memory, for the next flush to commit: the
// caller's journal holds the delivery until then (see Store.Sync). It
// reports false, having recorded nothing, when too many wait already.
func (x *deliveriesDB) rememberLater(r *dedupRec) bool {
	k := recentKey{mailbox: r.mailbox, folder: r.folder, key: r.key}
	x.laterMu.Lock()
	defer x.laterMu.Unlock()
	if len(x.later) >= maxLater {
		return false
	}
	if x.later == nil {
		x.later = map[recentKey]*dedupRec{}
	}
	x.add(r.mailbox, r.folder, r.key)
	x.later[k] = r
	return true
}

// flush commits what rememberLater holds, in one transaction. What it
// commits leaves memory; on an error everything stays for the next flush.
func (x *deliveriesDB) flush() error {
	x.laterMu.Lock()
	batch := make([]*dedupRec, 0, len(x.later))
	for _, r := range x.later {
		batch = append(batch, r)
	}
	x.laterMu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	// Oldest first, as they arrived: commit prunes by the first one's time.
	slices.SortFunc(batch, func(a, b *dedupRec) int { return cmp.Compare(a.at, b.at) })
	if err := x.remember(batch...); err != nil {
		return err
	}
	x.laterMu.Lock()
	for _, r := range batch {
		k := recentKey{mailbox: r.mailbox, folder: r.folder, key: r.key}
		if x.later[k] == r {
			delete(x.later, k)
		}
	}
	x.laterMu.Unlock()
	return nil
}

// heldLater returns the delivery rememberLater holds for k, if any.
func (x *deliveriesDB) heldLater(k recentKey) (*dedupRec, bool) {
	x.laterMu.Lock()
	defer x.laterMu.Unlock()
	r, ok := x.later[k]
	return r, ok
}

// testHookDedupCommit, when set (by tests only), runs in commit before the
// transaction commits, with its batch.
var testHookDedupCommit func(batch []*dedupRec)

func (x *deliveriesDB) commit(batch []*dedupRec) error {
	tx, err := x.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	insert := tx.Stmt(x.insert)
	for _, r := range batch {
		if _, err := insert.Exec(r.mailbox, r.folder, r.key[:], r.identity, r.id, r.at); err != nil {
			return err
		}
	}
	if testHookDedupCommit != nil {
		testHookDedupCommit(batch)
	}
	x.inserted += len(batch)
	if x.inserted >= 1000 {
		// Forget what is past the window, and the oldest past the bound.
		x.inserted = 0
		cut := batch[0].at - int64(DedupWindow)
		if _, err := tx.Exec("DELETE FROM deliveries WHERE at < ?", cut); err != nil {
			return err
		}
		if _, err := tx.Exec("DELETE FROM deliveries WHERE at <= (SELECT at FROM deliveries ORDER BY at DESC LIMIT 1 OFFSET ?)", dedupKeep); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// lookup returns the id a delivery was stored under, if it was within the
// window, for the mailbox of that identity.
func (x *deliveriesDB) lookup(mailbox, folder, identity string, key DeliveryKey, now time.Time) (string, bool) {
	var id, ident string
	var at int64
	var err error
	if r, ok := x.heldLater(recentKey{mailbox: mailbox, folder: folder, key: key}); ok {
		id, ident, at = r.id, r.identity, r.at
	} else {
		err = x.db.QueryRow("SELECT id, identity, at FROM deliveries WHERE mailbox = ? AND folder = ? AND key = ?", mailbox, folder, key[:]).Scan(&id, &ident, &at)
	}
	if err != nil || ident != identity || now.Sub(time.Unix(0, at)) > DedupWindow || ValidID(id) != nil {
		return "", false
	}
	return id, true
}

// deliveriesPath is where the deliveries database of an index lives.
func deliveriesPath(indexPath string) string {
	return filepath.Join(filepath.Dir(indexPath), DeliveriesFile)
}

// identityText names a mailbox's identity for the deliveries database.
func (id mailboxIdentity) String() string {
	return fmt.Sprintf("%d:%d:%d:%d", id.owner, id.dev, id.ino, id.birth)
}

// deliveredBefore returns the message a delivery with this key was stored
// as, when it was remembered (by this process or an earlier one) and that
// message is still in the folder.
func (s *Store) deliveredBefore(k recentKey) (string, bool) {
	if !s.dedup.mayHave(k.mailbox, k.folder, k.key) {
		return "", false
	}
	mb, d, done, err := s.openFolderNow(k.mailbox, k.folder, false)
	if err != nil {
		return "", false
	}
	defer done()
	id, ok := s.dedup.lookup(k.mailbox, k.folder, identityOf(mb).String(), k.key, s.now())
	if !ok {
		return "", false
	}
	if s.deferredHas(k.mailbox, k.folder, id) {
		return id, true
	}
	st, err := d.Lstat(id + ".md")
	return id, err == nil && st.Mode&0o170000 == 0o100000 && checkOwner(&st, mb.uid) == nil
}

// rememberDelivery records that the delivery k was stored as id, durably
// before it returns: the caller answers the sender next. With later set the
// caller's own journal holds the delivery until the next Sync, which
// commits it with every other one remembered so (see Sync).
func (s *Store) rememberDelivery(k recentKey, id string, later bool) error {
	mb, err := s.openMailbox(k.mailbox)
	if err != nil {
		return err
	}
	ident := identityOf(mb).String()
	mb.close()
	r := &dedupRec{mailbox: k.mailbox, folder: k.folder, identity: ident, key: k.key, id: id, at: s.now().UnixNano()}
	if later && s.dedup.rememberLater(r) {
		return nil
	}
	return s.dedup.remember(r)
}
