package hooks

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/protocol"
)

// DefaultRunLogMax is how many runs a RunLog keeps when OpenRunLog gets max <= 0.
const DefaultRunLogMax = 1000

// maxRunLine bounds one JSON line when loading; longer lines are skipped as
// corrupt. A run with a 2 KiB stderr tail encodes to far less.
const maxRunLine = 1 << 20

// RunLog keeps the most recent hook runs in memory and in a JSON-lines file
// readable by root only (mode 0600). Runs are appended with fsync; when the
// file holds twice the bound it is rewritten with the runs kept through a
// temporary file, fsync, rename and a directory fsync, so a crash leaves the
// old or the new file, never a mix. It is safe for concurrent use.
type RunLog struct {
	mu    sync.Mutex
	path  string
	max   int
	runs  []protocol.HookRun // oldest first, at most max
	held  map[string]int     // runs kept per mailbox (runKey)
	lines int                // lines in the file, including skipped ones
	dirty bool               // the file may end in a partial line: rewrite before appending
	f     *os.File           // append handle
}

// OpenRunLog loads the run log at path, creating it (and its directory, mode
// 0700) when missing, and keeps at most max runs (DefaultRunLogMax if max <= 0).
// Unreadable lines are skipped; leftover temporary files are removed.
func OpenRunLog(path string, max int) (*RunLog, error) {
	if max <= 0 {
		max = DefaultRunLogMax
	}
	l := &RunLog{path: path, max: max}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("hook run log: %w", err)
	}
	safeio.CleanTemps(dir, filepath.Base(path), time.Now()) // leftovers of a crash: the log has one writer
	skipped, err := l.load()
	if err != nil {
		return nil, err
	}
	if skipped > 0 || l.lines > l.max {
		if err := l.rewrite(); err != nil {
			return nil, err
		}
	}
	if err := l.openAppend(); err != nil {
		return nil, err
	}
	return l, nil
}

// load reads the file and returns how many lines it could not keep as they
// are (corrupt, too long, or missing the final newline).
func (l *RunLog) load() (int, error) {
	f, _, err := safeio.OpenRegular(l.path, math.MaxInt64)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("hook run log %s: %w", l.path, err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	skipped := 0
	for {
		line, tooLong, err := readLine(br)
		if len(line) > 0 || tooLong {
			l.lines++
			var run protocol.HookRun
			if tooLong || json.Unmarshal(line, &run) != nil {
				skipped++
			} else {
				l.push(run)
			}
			if err == io.EOF {
				// No final newline: the next append would be glued to this
				// line, so have the file rewritten.
				skipped++
			}
		}
		if err == io.EOF {
			return skipped, nil
		}
		if err != nil {
			return 0, fmt.Errorf("hook run log %s: %w", l.path, err)
		}
	}
}

// readLine returns the next line without its newline; a line longer than
// maxRunLine is consumed and reported as tooLong without being kept.
func readLine(br *bufio.Reader) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			line = append(line, chunk...)
			if len(line) > maxRunLine {
				tooLong, line = true, nil
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), tooLong, err
	}
}

// push keeps run. A full log lets go of the oldest run of the mailbox
// that holds the most runs (the oldest such run of all, on a tie): the log
// is shared by every mailbox on the host, and a user whose hooks run, or
// are dropped, over and over must not push the runs of other users' hooks
// out of it, nor with them the last run hook_list shows.
func (l *RunLog) push(run protocol.HookRun) {
	if l.held == nil {
		l.held = map[string]int{}
	}
	l.runs = append(l.runs, run)
	l.held[runKey(run)]++
	if len(l.runs) <= l.max {
		return
	}
	most := 0
	for _, n := range l.held {
		most = max(most, n)
	}
	for i, r := range l.runs {
		if k := runKey(r); l.held[k] == most {
			l.runs = append(l.runs[:i], l.runs[i+1:]...)
			if l.held[k]--; l.held[k] == 0 {
				delete(l.held, k)
			}
			return
		}
	}
}

// runKey is the mailbox a run counts against: its identity, or its name
// for a run recorded before runs had one.
func runKey(r protocol.HookRun) string {
	if r.MailboxID != "" {
		return "id:" + r.MailboxID
	}
	return "name:" + r.Mailbox
}

// kept returns the runs kept, oldest first.
func (l *RunLog) kept() []protocol.HookRun { return l.runs }

func (l *RunLog) openAppend() error {
	// By name, after each compaction's rename too: a symbolic link or a
	// FIFO put there is refused, never followed nor waited on (with the
	// log's lock, which every run's record takes, held).
	f, err := safeio.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("hook run log %s: %w", l.path, err)
	}
	// The file may predate us with looser permissions; runs name hooks and
	// message ids of every mailbox, so only the daemon's user may read them.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("hook run log %s: %w", l.path, err)
	}
	l.f = f
	return nil
}

// rewrite replaces the file with the kept runs, atomically.
func (l *RunLog) rewrite() error {
	runs := l.kept()
	var buf bytes.Buffer
	for _, r := range runs {
		b, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("hook run log: %w", err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	if err := safeio.WriteFile(l.path, buf.Bytes()); err != nil {
		return fmt.Errorf("hook run log %s: %w", l.path, err)
	}
	l.lines = len(runs)
	l.dirty = false
	return nil
}

// Append records run in memory and on disk. The run stays visible in memory
// even when the disk write fails; the error says why it was not persisted.
func (l *RunLog) Append(run protocol.HookRun) error {
	b, err := json.Marshal(run)
	if err != nil {
		return fmt.Errorf("hook run log: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.push(run)
	if l.f == nil {
		return fmt.Errorf("hook run log %s: closed", l.path)
	}
	if l.dirty || l.lines+1 >= 2*l.max {
		return l.compact()
	}
	if _, err = l.f.Write(append(b, '\n')); err == nil {
		err = l.f.Sync()
	}
	if err != nil {
		l.dirty = true
		return fmt.Errorf("hook run log %s: %w", l.path, err)
	}
	l.lines++
	return nil
}

// compact rewrites the file with the kept runs and reopens the append handle.
func (l *RunLog) compact() error {
	if err := l.rewrite(); err != nil {
		l.dirty = true
		return err
	}
	old := l.f
	if err := l.openAppend(); err != nil {
		l.dirty = true
		return err
	}
	old.Close()
	return nil
}

// List returns up to limit runs (all when limit <= 0) that filter accepts
// (all when filter is nil), newest first.
func (l *RunLog) List(filter func(protocol.HookRun) bool, limit int) []protocol.HookRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	runs := l.kept()
	var out []protocol.HookRun
	for i := len(runs) - 1; i >= 0; i-- {
		if filter != nil && !filter(runs[i]) {
			continue
		}
		out = append(out, runs[i])
		if len(out) == limit { // never, when limit <= 0
			break
		}
	}
	return out
}

// LastOf returns a copy of the newest run of the hook with identity id, or
// nil: a hook created later under the same name has none of its runs.
func (l *RunLog) LastOf(id string) *protocol.HookRun {
	return newest(l.List(func(r protocol.HookRun) bool { return r.HookID == id }, 1))
}

// newest is the first of runs (List's newest), or nil when there is none.
func newest(runs []protocol.HookRun) *protocol.HookRun {
	if len(runs) == 0 {
		return nil
	}
	return &runs[0]
}

// Close releases the file. Later Appends keep runs in memory only and
// return an error.
func (l *RunLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
