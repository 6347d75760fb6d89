package intake

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/mailctl/mailctl/internal/crashpoint"
	"github.com/mailctl/mailctl/internal/safeio"
)

// Spool is a message too large to hold in memory, written to a file of its
// own as it arrives (an smtpin.Spool). The file goes once the server closed
// the spool and every copy recorded from it is written and synced.
type Spool struct {
	j    *Journal
	name string
	f    *os.File
	size int64
	refs int // the server until it closes the spool, and each copy recorded

	syncMu sync.Mutex
	synced bool
}

// NewSpool starts a spool file.
func (j *Journal) NewSpool() (*Spool, error) {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil, errors.New("the inbound journal is closed")
	}
	name := strconv.FormatUint(j.nextSpool, 10)
	j.nextSpool++
	j.mu.Unlock()
	f, err := os.OpenFile(filepath.Join(j.dir, spoolDir, name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	sp := &Spool{j: j, name: name, f: f, refs: 1}
	j.mu.Lock()
	j.spools[name] = sp
	j.mu.Unlock()
	return sp, nil
}

// Write appends p.
func (sp *Spool) Write(p []byte) (int, error) {
	crashpoint.Hit("intake-spooling")
	n, err := sp.f.Write(p)
	sp.size += int64(n)
	return n, err
}

// ReadAt reads the message back.
func (sp *Spool) ReadAt(p []byte, off int64) (int, error) { return sp.f.ReadAt(p, off) }

// Close says the server is done with the spool; its file stays while a
// copy recorded from it is not yet written and synced.
func (sp *Spool) Close() error {
	sp.j.mu.Lock()
	defer sp.j.mu.Unlock()
	sp.unrefLocked()
	return nil
}

// unrefLocked drops one holder, and the file with the last. Call with j.mu
// held.
func (sp *Spool) unrefLocked() {
	if sp.refs--; sp.refs > 0 {
		return
	}
	sp.f.Close()
	os.Remove(filepath.Join(sp.j.dir, spoolDir, sp.name))
	delete(sp.j.spools, sp.name)
}

// sync makes the spool's bytes and its name durable, once: a record naming
// it may follow.
func (sp *Spool) sync() error {
	sp.syncMu.Lock()
	defer sp.syncMu.Unlock()
	if sp.synced {
		return nil
	}
	if err := sp.f.Sync(); err != nil {
		return err
	}
	if err := safeio.SyncDir(filepath.Join(sp.j.dir, spoolDir)); err != nil {
		return err
	}
	sp.synced = true
	return nil
}
