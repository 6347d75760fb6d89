package queue

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/mailctl/mailctl/internal/formats"
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
	path := filepath.Join(dir, journalName)
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("opening the queue journal: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return 0, err
	}
	head := make([]byte, len(journalMagic))
	if n, _ := f.ReadAt(head, 0); n == len(head) && string(head) == journalMagic {
		return formats.QueueJournal, nil
	}
	return 0, checkHeader(f, st.Size(), path)
}
