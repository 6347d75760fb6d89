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
// the spool and every copy recorded from it is written and synced: emptied
// and kept under a free name for a later spool (up to maxFreeSpools), since
// on some file systems creating a file costs more the more were deleted
// lately.
//
// A spool's name is new for every message, so that a record naming it can
// never read another message's bytes.
type Spool struct {
	j    *Journal
	name string
	f    *os.File
	size int64
	refs int // the server until it closes the spool, and each copy recorded

	syncMu sync.Mutex
	synced bool
}

// maxFreeSpools bounds the emptied spool files kept for reuse.
const maxFreeSpools = 8

// freePrefix names an emptied spool file kept for reuse.
const freePrefix = "free."

// NewSpool starts a spool file: an emptied one renamed, or a new one.
func (j *Journal) NewSpool() (*Spool, error) {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil, errors.New("the inbound journal is closed")
	}
	name := strconv.FormatUint(j.nextSpool, 10)
	j.nextSpool++
	var free string
	if n := len(j.freeSpools); n > 0 {
		free, j.freeSpools = j.freeSpools[n-1], j.freeSpools[:n-1]
	}
	j.mu.Unlock()
	path := filepath.Join(j.dir, spoolDir, name)
	var f *os.File
	var err error
	// Opened by name: a symbolic link or a FIFO in the spool directory is
	// refused, never followed (and emptied) nor waited on.
	if free != "" && os.Rename(filepath.Join(j.dir, spoolDir, free), path) == nil {
		f, err = safeio.OpenFile(path, os.O_RDWR, 0)
		if err == nil {
			if err = f.Truncate(0); err != nil {
				f.Close()
			}
		}
	} else {
		f, err = safeio.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	}
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
	j := sp.j
	delete(j.spools, sp.name)
	path := filepath.Join(j.dir, spoolDir, sp.name)
	if len(j.freeSpools) < maxFreeSpools && sp.f.Truncate(0) == nil {
		free := freePrefix + sp.name
		if os.Rename(path, filepath.Join(j.dir, spoolDir, free)) == nil {
			sp.f.Close()
			j.freeSpools = append(j.freeSpools, free)
			return
		}
	}
	sp.f.Close()
	os.Remove(path)
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
