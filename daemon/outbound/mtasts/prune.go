package mtasts

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mailctl/mailctl/internal/safeio"
)

// MemoryIdle is how long a policy stays in memory after its last use; the
// next use after a prune reads it from its file again.
const MemoryIdle = time.Hour

// MaxAgeLimit is the longest max_age a policy may have (RFC 8461 §3.2):
// a file that does not parse and was last written longer ago than this
// holds no policy anyone can still rely on.
const MaxAgeLimit = 31557600 * time.Second

// PruneResult counts what a Prune did.
type PruneResult struct {
	Dropped  int // policies dropped from memory
	Removed  int // files removed from Dir
	Examined int // files read
	Busy     int // files left because their domain was being fetched
}

// Prune keeps the cache from growing for as long as the daemon runs. From
// memory it drops the expired policies and those unused for MemoryIdle
// whose file holds them (a policy kept in memory only stays until it
// expires). From Dir it removes the files of expired policies, the files
// that do not parse and were last written more than MaxAgeLimit ago, and
// the leftovers of interrupted writes. An unexpired policy's file stays:
// it is the policy in force when its refetch fails (RFC 8461 §5.1). Each
// file is judged and removed under its domain's fetch lock, so a fetch
// replacing it is never undone; a domain being fetched is skipped, not
// waited for. The directory is read safeio.DirBatch names at a time.
func (s *Source) Prune() (PruneResult, error) {
	now := s.now()
	var res PruneResult
	s.mu.Lock()
	for d, e := range s.mem {
		if !now.Before(e.Expires) || (e.stored && now.Sub(e.used) >= MemoryIdle) {
			delete(s.mem, d)
			res.Dropped++
		}
	}
	s.mu.Unlock()
	if s.Dir == "" {
		return res, nil
	}
	var first error
	err := safeio.EachEntry(s.Dir, func(de fs.DirEntry) error {
		name := de.Name()
		if de.IsDir() {
			return nil
		}
		domain, temp := fileDomain(name)
		if domain == "" {
			return nil // not the cache's
		}
		removed, err := s.pruneFile(filepath.Join(s.Dir, name), domain, temp, now, &res)
		if removed {
			res.Removed++
		}
		if err != nil && first == nil {
			first = err
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		err = nil // nothing fetched yet
	}
	if res.Removed > 0 {
		if serr := safeio.SyncDir(s.Dir); err == nil {
			err = serr
		}
	}
	if err == nil {
		err = first
	}
	return res, err
}

// fileDomain is the domain whose policy file (or temporary file of an
// interrupted write) name is, "" for a name the cache does not make.
func fileDomain(name string) (domain string, temp bool) {
	if safeio.IsTemp(name) {
		rest := strings.TrimPrefix(name, safeio.TempPrefix)
		i := strings.LastIndex(rest, ".json-")
		if i <= 0 {
			return "", false
		}
		return rest[:i], true
	}
	domain, ok := strings.CutSuffix(name, ".json")
	if !ok || domain == "" {
		return "", false
	}
	return domain, false
}

// pruneFile judges one file of domain under domain's fetch lock and
// removes it when it holds nothing in force. A domain being fetched is
// left for the next prune: the fetch replaces its file, or leaves it to
// be judged then.
func (s *Source) pruneFile(path, domain string, temp bool, now time.Time, res *PruneResult) (bool, error) {
	unlock := s.tryLockDomain(domain)
	if unlock == nil {
		res.Busy++
		return false, nil
	}
	defer unlock()
	if temp {
		// No write of domain runs while its lock is held: this one
		// was interrupted.
		return remove(path)
	}
	res.Examined++
	e, err := readEntry(path, domain)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err == nil {
		if now.Before(e.Expires) {
			return false, nil
		}
		if s.pruneRead != nil {
			s.pruneRead(domain)
		}
		return remove(path)
	}
	fi, lerr := os.Lstat(path)
	if lerr != nil || now.Sub(fi.ModTime()) <= MaxAgeLimit {
		return false, nil
	}
	return remove(path)
}

func remove(path string) (bool, error) {
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}
