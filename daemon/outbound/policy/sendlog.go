package policy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/internal/safeio"
)

// sendLog keeps the sends a RateLimiter counted in an append-only file, so
// the limits hold across restarts. Its first line is logMagic, whose number
// is formats.RateLimitLog; then one line per send, "<unix nanoseconds>
// <owner uid> <quoted mailbox>". Version 1 had no first line and no uid
// ("<unix nanoseconds> <quoted mailbox>"): its sends are counted for the
// name's owner when the file is opened, and dropped if the name has none.
// Each line is a single write(2) without fsync: it reaches the kernel
// before the send is answered, so it survives the daemon being killed; only
// a power loss can forget the last seconds of sends, which errs on the side
// of letting mail through once. The file is rewritten with the last day's
// sends when it opens and whenever it holds many more lines than that.
type sendLog struct {
	path  string
	f     *os.File
	lines int // send lines, the first line left out
	log   *slog.Logger
}

const logPrefix = "mailctl ratelimit log "

var logMagic = logPrefix + strconv.Itoa(formats.RateLimitLog) + "\n"

// maxLogLine bounds a line the limiter reads: past it, the sends after
// are not read (the rewrite at open then drops them).
const maxLogLine = 1 << 20

// LogHeader is the first line of the send log this build writes,
// newline included.
func LogHeader() string { return logMagic }

// LogEntry is one send as the send log keeps it, on a line of its own:
// "<unix nanoseconds> <owner uid> <quoted mailbox>".
type LogEntry struct {
	At      time.Time // between the years 1678 and 2262, as UnixNano
	UID     uint32
	Mailbox string
}

// ParseLogEntry reads a line of the current format, its newline left out.
// It reports false for a line that does not parse, which the limiter skips.
func ParseLogEntry(line string) (LogEntry, bool) {
	ns, rest, _ := strings.Cut(line, " ")
	us, q, _ := strings.Cut(rest, " ") // a missing field: q is "", which does not unquote
	n, err := strconv.ParseInt(ns, 10, 64)
	uid, uerr := strconv.ParseUint(us, 10, 32)
	mailbox, qerr := strconv.Unquote(q)
	if err != nil || uerr != nil || qerr != nil || mailbox == "" {
		return LogEntry{}, false
	}
	return LogEntry{time.Unix(0, n), uint32(uid), mailbox}, true
}

// parseV1Line reads a line of format 1, which has no owner.
func parseV1Line(line string) (LogEntry, bool) {
	ns, q, _ := strings.Cut(line, " ") // no space: q is "", which does not unquote
	n, err := strconv.ParseInt(ns, 10, 64)
	mailbox, qerr := strconv.Unquote(q)
	if err != nil || qerr != nil || mailbox == "" {
		return LogEntry{}, false
	}
	return LogEntry{At: time.Unix(0, n), Mailbox: mailbox}, true
}

// Line is the entry's line in the send log, newline included.
func (e LogEntry) Line() string {
	return strconv.FormatInt(e.At.UnixNano(), 10) + " " + strconv.FormatUint(uint64(e.UID), 10) + " " + strconv.Quote(e.Mailbox) + "\n"
}

// logVersion is the version of the send log whose content starts with
// head, and the error that refuses one a later release wrote (or whose
// first line is the log's with a version that is not a number); what and
// path name the log in that error.
func logVersion(head []byte, what, path string) (int, error) {
	if bytes.HasPrefix(head, []byte(logMagic)) {
		return formats.RateLimitLog, nil
	}
	if err := formats.CheckFirstLine(bytes.NewReader(head), int64(len(head)), logPrefix, formats.RateLimitLog, what, path); err != nil {
		return 0, err
	}
	return 1, nil
}

// ErrLogLineTooLong is what LogReader.Next returns for a line longer than
// the reader takes.
var ErrLogLineTooLong = errors.New("a line of the send log is longer than the reader takes")

// LogReader reads a send log of any version the limiter reads.
type LogReader struct {
	// Version is the log's format: formats.RateLimitLog, or 1 for a log
	// without a first line (an empty one included).
	Version int
	br      *bufio.Reader
}

// NewLogReader reads the first line of the send log in r, refusing a
// later release's log or a damaged first line with the error formats
// gives (what and path name the log in it), and returns a reader of the
// sends after it whose lines may be maxLine bytes long (64 at the least:
// the first line is read within them), newline included.
func NewLogReader(r io.Reader, maxLine int, what, path string) (*LogReader, error) {
	// Wrapped, so that a caller's larger bufio.Reader is not taken as is
	// and the bound holds.
	br := bufio.NewReaderSize(struct{ io.Reader }{r}, maxLine)
	head, _ := br.Peek(64)
	v, err := logVersion(head, what, path)
	if err != nil {
		return nil, err
	}
	if v == formats.RateLimitLog {
		br.Discard(len(logMagic))
	}
	return &LogReader{Version: v, br: br}, nil
}

// Next returns the send on the log's next line and true, or false for a
// line that does not parse (the limiter skips it); a carriage return
// before the newline is left out, as bufio.ScanLines does. In a log of
// version 1 the lines name no owner, and UID is 0. After the last line
// Next returns io.EOF; for a line past the bound, ErrLogLineTooLong.
func (lr *LogReader) Next() (LogEntry, bool, error) {
	line, err := lr.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return LogEntry{}, false, ErrLogLineTooLong
	}
	if err != nil && err != io.EOF {
		return LogEntry{}, false, err
	}
	if len(line) == 0 {
		return LogEntry{}, false, io.EOF
	}
	text := string(bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r")))
	if lr.Version == formats.RateLimitLog {
		e, ok := ParseLogEntry(text)
		return e, ok, nil
	}
	e, ok := parseV1Line(text)
	return e, ok, nil
}

// LogVersion reads the first line of the send log at path: its format
// version (1 when it has none, 0 when there is no file), or the error
// OpenRateLimiter would refuse it with. The daemon asks before it changes
// anything else at start.
func LogVersion(path string) (int, error) {
	f, _, err := safeio.OpenRegular(path, math.MaxInt64)
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("opening the send log: %w", err)
	}
	defer f.Close()
	head := make([]byte, 64)
	n, _ := f.ReadAt(head, 0)
	return logVersion(head[:n], logWhat, path)
}

// logWhat names the limiter's own log in the errors that refuse it.
const logWhat = "the rate-limit log"

// OpenRateLimiter returns a limiter whose sends are kept in the file at
// path (created 0600 if missing). Lines that do not parse are skipped.
// owner finds the uid that owns a mailbox now, for the sends of a version
// 1 file; nil finds none.
func OpenRateLimiter(path string, clock func() time.Time, owner func(mailbox string) (uint32, bool), logger *slog.Logger) (*RateLimiter, error) {
	r := NewRateLimiter(clock)
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// Opened without following a symbolic link or waiting on a FIFO: the
	// daemon's start must not hang on what stands in the log's place.
	var in io.Reader = strings.NewReader("")
	var size int64
	f, fi, err := safeio.OpenRegular(path, math.MaxInt64)
	switch {
	case err == nil:
		defer f.Close()
		in, size = f, fi.Size()
	case !os.IsNotExist(err):
		return nil, fmt.Errorf("reading the send log: %w", err)
	}
	lr, err := NewLogReader(in, maxLogLine, logWhat, path)
	if err != nil {
		return nil, err
	}
	if owner == nil {
		owner = func(string) (uint32, bool) { return 0, false }
	}
	cutoff := r.clock().Add(-24 * time.Hour)
	bad, unowned := 0, 0
	for {
		e, ok, err := lr.Next()
		if err == io.EOF {
			break
		}
		if err != nil && !errors.Is(err, ErrLogLineTooLong) {
			return nil, fmt.Errorf("reading the send log %s: %w", path, err)
		}
		if err != nil {
			// A line past maxLogLine: what came before it counts.
			logger.Warn("send log line too long: the sends after it are not read", "path", path, "max_bytes", maxLogLine)
			break
		}
		key, owned := sender{e.Mailbox, e.UID}, true
		if ok && lr.Version != formats.RateLimitLog {
			// Format 1 named no owner: the send counts for the name's
			// owner now, so that no one gains sends by the upgrade.
			key.uid, owned = owner(key.mailbox)
		}
		if !owned {
			unowned++
			continue
		}
		if !ok {
			bad++
			continue
		}
		if e.At.After(cutoff) {
			r.sent[key] = append(r.sent[key], e.At)
		}
	}
	if bad > 0 {
		logger.Warn("send log lines skipped", "path", path, "lines", bad)
	}
	if lr.Version != formats.RateLimitLog && size > 0 {
		logger.Info("send log of format 1 read: its sends count for each mailbox's current owner", "path", path, "dropped_no_owner", unowned)
	}
	for _, ts := range r.sent {
		slices.SortFunc(ts, time.Time.Compare)
	}
	r.log = &sendLog{path: path, log: logger}
	if err := r.log.rewrite(r.sent); err != nil {
		return nil, err
	}
	return r, nil
}

// rewrite replaces the file with the sends in sent and reopens it for
// appending. Call with the limiter's lock held.
func (l *sendLog) rewrite(sent map[sender][]time.Time) error {
	text, n := logText(sent)
	if err := safeio.WriteFile(l.path, []byte(text)); err != nil {
		return fmt.Errorf("writing the send log: %w", err)
	}
	return l.reopen(n)
}

// reopen opens the file just written, which holds lines sends, for
// appending in place of the one before. It is opened by name: a symbolic
// link put there since is refused, not followed, and a FIFO refused, not
// waited on (with the limiter's lock, which every send takes, held).
func (l *sendLog) reopen(lines int) error {
	f, err := safeio.OpenFile(l.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("opening the send log: %w", err)
	}
	if l.f != nil {
		l.f.Close()
	}
	l.f, l.lines = f, lines
	return nil
}

// logText is the send log holding the sends in sent, and how many it holds.
func logText(sent map[sender][]time.Time) (string, int) {
	var b strings.Builder
	b.WriteString(logMagic)
	n := 0
	for _, m := range slices.SortedFunc(maps.Keys(sent), sender.compare) {
		for _, t := range sent[m] {
			b.WriteString(LogEntry{t, m.uid, m.mailbox}.Line())
			n++
		}
	}
	return b.String(), n
}

// WriteLog writes the sends the limiter counts, as its file holds them
// (first line included), to w: one version of the log, taken under the
// limiter's lock, for a backup. Sends older than the longest window are
// left out.
func (r *RateLimiter) WriteLog(w io.Writer) error {
	r.mu.Lock()
	cutoff := r.clock().Add(-24 * time.Hour)
	live := make(map[sender][]time.Time, len(r.sent))
	for k, ts := range r.sent {
		live[k] = since(ts, cutoff) // none left: no line
	}
	text, _ := logText(live)
	r.mu.Unlock()
	_, err := io.WriteString(w, text)
	return err
}

// record appends n sends of s at t; sent is the limiter's state after
// them, used when the file is due for a rewrite. Call with the limiter's
// lock held. A failed write is logged: the limit still holds in memory.
func (l *sendLog) record(s sender, t time.Time, n int, sent map[sender][]time.Time) {
	if l.f == nil {
		return // closed
	}
	live := 0
	for _, ts := range sent {
		live += len(ts)
	}
	if l.lines+n > 2*live+1024 {
		if err := l.rewrite(sent); err != nil {
			l.log.Error("cannot compact the send log", "err", err)
		}
		return // the rewrite holds these sends
	}
	line := strings.Repeat(LogEntry{t, s.uid, s.mailbox}.Line(), n)
	if _, err := l.f.WriteString(line); err != nil {
		l.log.Error("cannot record a send in the send log: the rate limit holds until the next restart only", "err", err)
		return
	}
	l.lines += n
}

// Close closes the file.
func (r *RateLimiter) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.log == nil || r.log.f == nil {
		return nil
	}
	err := r.log.f.Close()
	r.log.f = nil
	return err
}
