package queue

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
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
	buf := make([]byte, min(size, 64))
	n, _ := f.ReadAt(buf, 0)
	line, _, whole := bytes.Cut(buf[:n], []byte("\n"))
	v, ok := bytes.CutPrefix(line, []byte(journalPrefix))
	if !ok || !whole {
		return nil
	}
	version, err := strconv.Atoi(string(v))
	switch {
	case err != nil || version < 1 || string(v) != strconv.Itoa(version):
		return &formats.DamagedError{What: "the queue journal", Path: path, Problem: fmt.Sprintf("its first line is %q, not %q and a version", line, journalPrefix)}
	case version > formats.QueueJournal:
		return &formats.NewerError{What: "the queue journal", Path: path, Found: version, Reads: formats.QueueJournal}
	}
	return nil
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
