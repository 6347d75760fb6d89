package backup

// The send rate limiter's log (daemon/outbound/policy, sendlog.go), as an
// archive carries it: the first line "mailctl ratelimit log <version>",
// then one line per send, "<unix nanoseconds> <owner uid> <quoted
// mailbox>". A restore gives each send its owner's uid on this host and
// leaves out what the daemon would no longer count.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mailctl/mailctl/internal/formats"
)

const rateLogPrefix = "mailctl ratelimit log "

// rateLogWindow is the longest window the limiter counts sends in: a send
// older than that counts for nothing, and the daemon drops it.
const rateLogWindow = 24 * time.Hour

// maxRateLogLine bounds one line: a mailbox name is short, and the numbers
// are a few digits.
const maxRateLogLine = 4096

type rateSend struct {
	at      int64 // unix nanoseconds
	uid     uint32
	mailbox string
}

func parseRateLine(line string) (rateSend, bool) {
	ns, rest, _ := strings.Cut(line, " ")
	us, q, _ := strings.Cut(rest, " ")
	n, err := strconv.ParseInt(ns, 10, 64)
	uid, uerr := strconv.ParseUint(us, 10, 32)
	mailbox, qerr := strconv.Unquote(q)
	if err != nil || uerr != nil || qerr != nil || mailbox == "" {
		return rateSend{}, false
	}
	return rateSend{n, uint32(uid), mailbox}, true
}

func (s rateSend) line() string {
	return strconv.FormatInt(s.at, 10) + " " + strconv.FormatUint(uint64(s.uid), 10) + " " + strconv.Quote(s.mailbox) + "\n"
}

// readRateLog calls fn for each send of the log in r, after checking that
// its first line is the format this build writes: a later release's log is
// refused, naming both versions, and so is one without the line (the
// daemon writes the current format whenever it opens its log, and a
// backup takes the log from a running daemon).
func readRateLog(r io.Reader, fn func(rateSend) error) error {
	br := bufio.NewReaderSize(r, maxRateLogLine)
	head, _ := br.Peek(64)
	magic := rateLogPrefix + strconv.Itoa(formats.RateLimitLog) + "\n"
	if !bytes.HasPrefix(head, []byte(magic)) {
		if err := formats.CheckFirstLine(bytes.NewReader(head), int64(len(head)), rateLogPrefix, formats.RateLimitLog, "the archive's send log", nameRateLog); err != nil {
			return err
		}
		return fmt.Errorf("the archive's send log does not start with %q: not a send log this mailctl writes", strings.TrimSuffix(magic, "\n"))
	}
	br.Discard(len(magic))
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return fmt.Errorf("the archive's send log has a line longer than %d bytes", maxRateLogLine)
		}
		if len(line) > 0 {
			// A line that does not parse is skipped, as the daemon skips it.
			if s, ok := parseRateLine(strings.TrimSuffix(string(line), "\n")); ok {
				if ferr := fn(s); ferr != nil {
					return ferr
				}
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// rewriteRateLog copies the send log in r to w with each send's uid
// mapped for this host by uid (false: the owner is not a user here, and
// the send is left out) and the sends made before since left out. It
// returns how many sends it kept and how many it left out for their owner.
func rewriteRateLog(r io.Reader, w io.Writer, since time.Time, uid func(mailbox string, old uint32) (uint32, bool)) (kept, unowned int, err error) {
	bw := bufio.NewWriter(w)
	bw.WriteString(rateLogPrefix + strconv.Itoa(formats.RateLimitLog) + "\n")
	cutoff := since.UnixNano()
	err = readRateLog(r, func(s rateSend) error {
		if s.at <= cutoff {
			return nil // aged out, as it would have in the daemon
		}
		to, ok := uid(s.mailbox, s.uid)
		if !ok {
			unowned++
			return nil
		}
		s.uid = to
		kept++
		_, err := bw.WriteString(s.line())
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	return kept, unowned, bw.Flush()
}

// rateLogUIDs are the owner uids the send log at path names, sorted.
func rateLogUIDs(path string) ([]uint32, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	seen := map[uint32]bool{}
	if err := readRateLog(io.LimitReader(f, MaxRateLog), func(s rateSend) error {
		seen[s.uid] = true
		return nil
	}); err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(seen)), nil
}
