package backup

// The send rate limiter's log (daemon/outbound/policy, sendlog.go), as an
// archive carries it; its lines are read and written by the policy
// package's codec. A restore gives each send its owner's uid on this host
// and leaves out what the daemon would no longer count.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/policy"
	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/internal/safeio"
)

// rateLogWindow is the longest window the limiter counts sends in: a send
// older than that counts for nothing, and the daemon drops it.
const rateLogWindow = 24 * time.Hour

// maxRateLogLine bounds one line: a mailbox name is short, and the numbers
// are a few digits.
const maxRateLogLine = 4096

// readRateLog calls fn for each send of the log in r, after checking that
// its first line is the format this build writes: a later release's log is
// refused, naming both versions, and so is one without the line (the
// daemon writes the current format whenever it opens its log, and a
// backup takes the log from a running daemon).
func readRateLog(r io.Reader, fn func(policy.LogEntry) error) error {
	lr, err := policy.NewLogReader(r, maxRateLogLine, "the archive's send log", nameRateLog)
	if err != nil {
		return err
	}
	if lr.Version != formats.RateLimitLog {
		return fmt.Errorf("the archive's send log does not start with %q: not a send log this mailctl writes", strings.TrimSuffix(policy.LogHeader(), "\n"))
	}
	for {
		s, ok, err := lr.Next()
		if err == io.EOF {
			return nil
		}
		if errors.Is(err, policy.ErrLogLineTooLong) {
			return fmt.Errorf("the archive's send log has a line longer than %d bytes", maxRateLogLine)
		}
		if err != nil {
			return err
		}
		// A line that does not parse is skipped, as the daemon skips it.
		if ok {
			if err := fn(s); err != nil {
				return err
			}
		}
	}
}

// rewriteRateLog copies the send log in r to w with each send's uid
// mapped for this host by uid (false: the owner is not a user here, and
// the send is left out) and the sends made before since left out. It
// returns how many sends it kept and how many it left out for their owner.
func rewriteRateLog(r io.Reader, w io.Writer, since time.Time, uid func(mailbox string, old uint32) (uint32, bool)) (kept, unowned int, err error) {
	bw := bufio.NewWriter(w)
	bw.WriteString(policy.LogHeader())
	err = readRateLog(r, func(s policy.LogEntry) error {
		if !s.At.After(since) {
			return nil // aged out, as it would have in the daemon
		}
		to, ok := uid(s.Mailbox, s.UID)
		if !ok {
			unowned++
			return nil
		}
		s.UID = to
		kept++
		_, err := bw.WriteString(s.Line())
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	return kept, unowned, bw.Flush()
}

// rateLogUIDs are the owner uids the send log at path names, sorted. A
// log larger than an archive holds names none: Write leaves it out.
func rateLogUIDs(path string) ([]uint32, error) {
	f, fi, err := safeio.OpenRegular(path, MaxRateLog)
	if errors.Is(err, safeio.ErrTooLarge) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	seen := map[uint32]bool{}
	if err := readRateLog(io.LimitReader(f, fi.Size()), func(s policy.LogEntry) error {
		seen[s.UID] = true
		return nil
	}); err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(seen)), nil
}
