package policy

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mailctl/mailctl/internal/safeio"
)

// sendLog keeps the sends a RateLimiter counted in an append-only file, one
// line per send ("<unix nanoseconds> <quoted mailbox>"), so the limits hold
// across restarts. Each line is a single write(2) without fsync: it reaches
// the kernel before the send is answered, so it survives the daemon being
// killed; only a power loss can forget the last seconds of sends, which errs
// on the side of letting mail through once. The file is rewritten with the
// last day's sends when it opens and whenever it holds many more lines than
// that.
type sendLog struct {
	path  string
	f     *os.File
	lines int
	log   *slog.Logger
}

// OpenRateLimiter returns a limiter whose sends are kept in the file at
// path (created 0600 if missing). Lines that do not parse are skipped.
func OpenRateLimiter(path string, clock func() time.Time, logger *slog.Logger) (*RateLimiter, error) {
	r := NewRateLimiter(clock)
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("reading the send log: %w", err)
	}
	cutoff := r.clock().Add(-24 * time.Hour)
	bad := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		mailbox, t, ok := parseSendLine(sc.Text())
		if !ok {
			bad++
			continue
		}
		if t.After(cutoff) {
			r.sent[mailbox] = append(r.sent[mailbox], t)
		}
	}
	if bad > 0 {
		logger.Warn("send log lines skipped", "path", path, "lines", bad)
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

func parseSendLine(line string) (string, time.Time, bool) {
	ns, q, _ := strings.Cut(line, " ") // no space: q is "", which does not unquote
	n, err := strconv.ParseInt(ns, 10, 64)
	mailbox, qerr := strconv.Unquote(q)
	if err != nil || qerr != nil || mailbox == "" {
		return "", time.Time{}, false
	}
	return mailbox, time.Unix(0, n), true
}

func sendLine(mailbox string, t time.Time) string {
	return strconv.FormatInt(t.UnixNano(), 10) + " " + strconv.Quote(mailbox) + "\n"
}

// rewrite replaces the file with the sends in sent and reopens it for
// appending. Call with the limiter's lock held.
func (l *sendLog) rewrite(sent map[string][]time.Time) error {
	var b strings.Builder
	n := 0
	for _, m := range slices.Sorted(maps.Keys(sent)) {
		for _, t := range sent[m] {
			b.WriteString(sendLine(m, t))
			n++
		}
	}
	if err := safeio.WriteFile(l.path, []byte(b.String())); err != nil {
		return fmt.Errorf("writing the send log: %w", err)
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("opening the send log: %w", err)
	}
	if l.f != nil {
		l.f.Close()
	}
	l.f, l.lines = f, n
	return nil
}

// record appends n sends of mailbox at t; sent is the limiter's state after
// them, used when the file is due for a rewrite. Call with the limiter's
// lock held. A failed write is logged: the limit still holds in memory.
func (l *sendLog) record(mailbox string, t time.Time, n int, sent map[string][]time.Time) {
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
	line := strings.Repeat(sendLine(mailbox, t), n)
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
