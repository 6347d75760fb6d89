package outbound

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/mailctl/mailctl/internal/safeio"
)

// The sweep removes the idempotency records that answer no key any more:
// those past the window (expired) and those of a deleted mailbox. Every
// send with a key leaves one, so without it the directory grows for as
// long as the daemon runs. A pass reads at most its limit of names and
// the next goes on where it stopped, so a directory of any size costs
// each pass the same; a removal is not synced, as a record a crash brings
// back is expired still and goes again.

// keySweep is where the sweep stands between passes.
type keySweep struct {
	mu  sync.Mutex
	dir *os.File // open until a pass reaches the end of the directory
}

// SweepResult is what one pass of SweepKeys did.
type SweepResult struct {
	// Examined counts the directory's entries the pass read, Removed the
	// records it removed.
	Examined, Removed int
	// More is true when the pass stopped at its limit before the end of
	// the directory: the next pass goes on from there.
	More bool
}

// SweepKeys reads at most limit entries of the records' directory and
// removes the records among them that are expired or whose mailbox was
// deleted (Deleted). A record is read and removed under its hold, as a
// send claims it: a record a send is making or reading is left for a
// later pass, and a send waits for the sweep of its key to end.
func (s *Service) SweepKeys(limit int) (SweepResult, error) {
	s.sweep.mu.Lock()
	defer s.sweep.mu.Unlock()
	var res SweepResult
	if s.sweep.dir == nil {
		d, err := safeio.OpenDir(s.idemDir())
		if errors.Is(err, os.ErrNotExist) {
			return res, nil
		}
		if err != nil {
			return res, err
		}
		s.sweep.dir = d
	}
	now := s.now()
	var first error
	for res.Examined < limit {
		ents, err := s.sweep.dir.ReadDir(min(limit-res.Examined, 256))
		for _, e := range ents {
			res.Examined++
			removed, err := s.sweepOne(e.Name(), now)
			if removed {
				res.Removed++
			}
			if err != nil && first == nil {
				first = err
			}
		}
		if err != nil || len(ents) == 0 {
			s.closeSweep()
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return res, errors.Join(first, err)
		}
	}
	res.More = true
	return res, first
}

// sweepOne removes the record name when it answers no key any more.
func (s *Service) sweepOne(name string, now time.Time) (bool, error) {
	if safeio.IsTemp(name) || !strings.HasSuffix(name, ".json") {
		return false, nil
	}
	path := filepath.Join(s.idemDir(), name)
	release, ok := s.tryHold(path)
	if !ok {
		return false, nil // a send has it
	}
	defer release()
	rec, mtime, err := readIdem(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case errors.Is(err, errNotRecord):
		// Damaged, or not a regular file: it answers no key; dated by
		// the file, it goes when a record of its age would.
		if now.Sub(mtime) < s.keyWindow() {
			return false, nil
		}
	case err != nil:
		return false, err
	case s.Deleted != nil && rec.MailboxID != "" && s.Deleted(rec.Mailbox, rec.MailboxID):
	case !s.expired("", rec, now):
		return false, nil
	}
	if err := removeRecord(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	return true, nil
}

// removeRecord removes a record (a variable so that a test can hold the
// sweep at the removal while a send comes for the key).
var removeRecord = os.Remove

// CloseSweep lets go of the directory a sweep stopped in; the next pass
// starts from the beginning.
func (s *Service) CloseSweep() {
	s.sweep.mu.Lock()
	defer s.sweep.mu.Unlock()
	s.closeSweep()
}

func (s *Service) closeSweep() {
	if s.sweep.dir != nil {
		s.sweep.dir.Close()
		s.sweep.dir = nil
	}
}
