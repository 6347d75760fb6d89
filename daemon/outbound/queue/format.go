package queue

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/internal/safeio"
)

// The journal's first line is its format stamp: journalMagic, whose number
// is formats.QueueJournal. A later release that changes the records writes
// a higher number there, so this one refuses its journal instead of taking
// it for damage and setting it aside.
const journalPrefix = "mailctl queue journal "

// checkHeader looks at the first line of a journal that does not start
// with journalMagic. It is nil when the file is no mailctl journal at all,
// or a header cut short (both are set aside as before), a
// formats.NewerError when a later release wrote it, and a
// formats.DamagedError when the line is a journal's but its version is not
// a number. The two errors stop the queue from opening, changing nothing.
func checkHeader(f io.ReaderAt, size int64, path string) error {
	return formats.CheckFirstLine(f, size, journalPrefix, formats.QueueJournal, "the queue journal", path)
}

// JournalVersion reads only the first line of the journal in dir: its
// format version, 0 when there is no journal or it is no journal (Open sets
// such a file aside), or the error Open would refuse it with. The daemon
// asks before it changes anything else at start.
func JournalVersion(dir string) (int, error) {
	f, size, err := openJournalToRead(dir)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNotRegular) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("opening the queue journal: %w", err)
	}
	defer f.Close()
	head := make([]byte, len(journalMagic))
	if n, _ := f.ReadAt(head, 0); n == len(head) && string(head) == journalMagic {
		return formats.QueueJournal, nil
	}
	return 0, checkHeader(f, size, f.Name())
}

// errNotRegular is a journal that is a FIFO, a device, a socket or a
// directory: no journal, which Open sets aside.
var errNotRegular = errors.New("the journal is not a regular file")

// openJournalToRead opens the journal in dir for reading from outside the queue
// (safeio.OpenRegular: a FIFO is not waited on). One that is not a regular
// file is errNotRegular; a link where it is kept is an error of its own,
// as it is to Open.
func openJournalToRead(dir string) (*os.File, int64, error) {
	f, st, err := safeio.OpenRegular(filepath.Join(dir, journalName), math.MaxInt64)
	switch {
	case errors.Is(err, safeio.ErrSymlink):
		return nil, 0, err
	case errors.Is(err, safeio.ErrNotRegular):
		return nil, 0, errNotRegular
	case err != nil:
		return nil, 0, err
	}
	return f, st.Size(), nil
}
