package queue

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/internal/wal"
)

// Inspection is what Inspect finds in a queue directory.
type Inspection struct {
	// Items counts the items not yet settled; ByState splits them by
	// Item.State (an attempt under way is not visible from outside).
	// Neither counts the Dropping ones.
	Items   int
	ByState map[string]int
	// Dropping counts the items not yet settled that are marked to be
	// dropped (Item.Dropping: their mailbox was deleted while an attempt
	// was delivering them): dropped when that attempt ends, or at the
	// daemon's next start. They are not mail waiting to go out.
	Dropping int
	// Oldest is when the oldest of Items was queued (zero: none).
	Oldest time.Time
	// Damaged says what is wrong when a record cannot be right (bad length
	// or checksum) or the file is not a journal; the daemon sets that part
	// aside in corrupt/ at its next start. Empty: no damage.
	Damaged string
	// Skipped counts whole records the replay does not understand (the
	// daemon skips them too).
	Skipped int
	// Partial is true when the last record is incomplete: an append under
	// way as the journal was read, or one a crash cut short (the daemon
	// cuts it at its next start). Neither is damage.
	Partial bool
	// SetAside counts the files in corrupt/: parts of a journal the daemon
	// could not read and kept for inspection.
	SetAside int
	// Version is the journal's format (its first line); 0 when there is
	// no journal yet or it is not one.
	Version int
}

// Inspect reads the queue journal in dir as a reader: without the
// daemon's lock, while the daemon may be appending to it. It sees the
// records whole at the moment it opens the file; a record being appended
// then reads as Partial, and a compaction renames a new file over the one
// it reads, which stays whole. A missing journal is an empty queue.
func Inspect(dir string) (*Inspection, error) {
	in := &Inspection{ByState: map[string]int{}}
	if ents, err := os.ReadDir(filepath.Join(dir, "corrupt")); err == nil {
		in.SetAside = len(ents)
	}
	f, size, err := openJournalToRead(dir)
	switch {
	case os.IsNotExist(err):
		return in, nil
	case errors.Is(err, errNotRegular):
		in.Damaged = err.Error()
		return in, nil
	case err != nil:
		return nil, fmt.Errorf("opening the queue journal: %w", err)
	}
	defer f.Close()
	if size == 0 {
		return in, nil // created, its header not yet written
	}
	r := bufio.NewReaderSize(io.NewSectionReader(f, 0, size), 1<<16)
	head := make([]byte, len(journalMagic))
	if n, err := io.ReadFull(r, head); err != nil || string(head) != journalMagic {
		if int64(n) == size && string(head[:n]) == journalMagic[:n] {
			in.Partial = true // the header is being written
			return in, nil
		}
		if err := checkHeader(f, size, filepath.Join(dir, journalName)); err != nil {
			return nil, err
		}
		in.Damaged = fmt.Sprintf("the file does not start with %q: not a queue journal this version knows", journalMagic[:len(journalMagic)-1])
		return in, nil
	}
	in.Version = formats.QueueJournal
	// A journal of its own: replaying fills in only this one's maps.
	j := newJournal()
	items := map[string]replayed{}
	off, stop := wal.Scan(r, len(journalMagic), size, maxRecord, func(p []byte, at wal.Loc) error {
		if err := j.apply(items, p, at); err != nil {
			in.Skipped++
		}
		return nil
	})
	switch stop {
	case wal.StopPartial:
		in.Partial = true
	case wal.StopDamaged:
		in.Damaged = fmt.Sprintf("the record at byte %d fails its checks; it and the %d bytes after it are set aside at the next start", off, size-off)
	}
	for _, x := range items {
		if x.it.Settled() {
			continue
		}
		if x.it.Dropping {
			in.Dropping++
			continue
		}
		in.Items++
		in.ByState[x.it.State()]++
		if in.Oldest.IsZero() || x.it.Created.Before(in.Oldest) {
			in.Oldest = x.it.Created
		}
	}
	return in, nil
}
