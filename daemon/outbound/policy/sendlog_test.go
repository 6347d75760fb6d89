package policy

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/protocol"
)

func TestRateLimitSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelimit.log")
	clk := testclock.New()
	p := config.SendPolicy{PerMinute: 2, PerDay: 3}
	r, err := OpenRateLimiter(path, clk.Now, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := r.Allow("bot", 0, p, 1); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		clk.Advance(10 * time.Second)
	}
	// No Close: a killed daemon never closes its files.
	r2, err := OpenRateLimiter(path, clk.Now, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	err = r2.Allow("bot", 0, p, 1)
	if protocol.CodeOf(err) != protocol.CodeRateLimited {
		t.Fatalf("after a restart the minute's two sends were forgotten: %v", err)
	}
	// The first send was 20s ago: the window frees in 40s, as before the restart.
	if got := err.(*protocol.Error).RetryAfterMS; got != 40_000 {
		t.Fatalf("retry after %dms, want 40000", got)
	}
	if err := r2.Allow("other", 0, p, 1); err != nil {
		t.Fatalf("limits are per mailbox: %v", err)
	}
	clk.Advance(time.Minute)
	if err := r2.Allow("bot", 0, p, 1); err != nil {
		t.Fatal(err)
	}
	if err := r2.Allow("bot", 0, p, 1); protocol.CodeOf(err) != protocol.CodeRateLimited {
		t.Fatalf("the day's fourth send across a restart: %v", err)
	}
	// A day later everything before has left every window, and the file
	// is rewritten without it at the next start.
	clk.Advance(25 * time.Hour)
	r2.Close()
	r3, err := OpenRateLimiter(path, clk.Now, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r3.Close()
	if data, _ := os.ReadFile(path); string(data) != logMagic {
		t.Fatalf("sends older than a day kept: %q", data)
	}
	if err := r3.Allow("bot", 0, p, 1); err != nil {
		t.Fatal(err)
	}
}

func TestSendLogSkipsDamageAndStaysBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelimit.log")
	clk := testclock.New()
	good := LogEntry{clk.Now().Add(-time.Second), 0, "bot"}.Line()
	os.WriteFile(path, []byte(logMagic+"garbage\n12 0 \"unterminated\n"+good+"99999999999999999999999 0 \"x\"\n1 0 \"\"\n"+good[:10]), 0o600)
	r, err := OpenRateLimiter(path, clk.Now, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Allow("bot", 0, config.SendPolicy{PerMinute: 1}, 1); protocol.CodeOf(err) != protocol.CodeRateLimited {
		t.Fatalf("the one good line was not counted: %v", err)
	}
	// Sends over two days with no limit: the file holds about the last day.
	for range 3000 {
		if err := r.Allow("bot", 0, config.SendPolicy{}, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
	}
	data, _ := os.ReadFile(path)
	if n := bytes.Count(data, []byte("\n")); n > 2*24*60+1024 {
		t.Fatalf("the send log holds %d lines for at most %d live sends", n, 24*60)
	}
}

// recordLogger collects what a limiter logs.
type recordLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *recordLogger) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, strings.TrimSpace(string(p)))
		return len(p), nil
	}), nil))
}

func (l *recordLogger) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestSendLogRejectsEachKindOfBadLine: a line is kept only when its time
// and its owner's uid parse, its mailbox unquotes and is not empty. A bad time with a good
// mailbox, or a good time with an empty mailbox, would otherwise count a
// send (one in 2262, which no window ever lets go of) or keep a line the next
// rewrite carries on. The warning says how many lines were skipped.
func TestSendLogRejectsEachKindOfBadLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelimit.log")
	clk := testclock.New()
	recent := strconv.FormatInt(clk.Now().Add(-time.Second).UnixNano(), 10)
	good := LogEntry{clk.Now().Add(-time.Second), 0, "bot"}.Line()
	bad := []string{
		"99999999999999999999999 0 \"bot\"", // out of range: ParseInt returns the largest int64
		"12x 0 \"bot\"",
		recent + " 0 \"\"",
		recent + " 0 \"bot",
		recent + " 0 bot",
		recent + " \"bot\"", // format 1's line, with no uid
		recent + " -1 \"bot\"",
		recent + " 4294967296 \"bot\"",
		recent + " 1x \"bot\"",
		"garbage",
	}
	os.WriteFile(path, []byte(logMagic+strings.Join(bad, "\n")+"\n"+good+recent), 0o600) // the last line is cut
	var logged recordLogger
	r, err := OpenRateLimiter(path, clk.Now, nil, logged.logger())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if data, _ := os.ReadFile(path); string(data) != logMagic+good {
		t.Errorf("the rewritten send log holds %q, want only %q", data, logMagic+good)
	}
	want := "lines=" + strconv.Itoa(len(bad)+1)
	if got := logged.all(); len(got) != 1 || !strings.Contains(got[0], "send log lines skipped") || !strings.Contains(got[0], want) {
		t.Errorf("logged %q, want one warning with %s", got, want)
	}
	p := config.SendPolicy{PerMinute: 2}
	if got := r.Usage("bot", 0, p)[0]; got.Used != 1 {
		t.Errorf("bot's sends after loading: %+v, want the one good line", got)
	}

	// A clean file logs nothing.
	r.Close()
	logged = recordLogger{}
	r2, err := OpenRateLimiter(path, clk.Now, nil, logged.logger())
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if err := r2.Allow("bot", 0, p, 1); err != nil {
		t.Fatal(err)
	}
	if got := logged.all(); len(got) != 0 {
		t.Errorf("a clean send log and a send logged %q", got)
	}
}

// TestSendLogCompactsAtItsBound: the file is rewritten exactly when
// appending would take it past twice the live sends plus 1024 lines, and not
// before; the lines already in the file when it opens count. Sends 13 hours
// apart keep two live at a time, so the bound is 1028.
func TestSendLogCompactsAtItsBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelimit.log")
	clk := testclock.New()
	os.WriteFile(path, []byte(logMagic+LogEntry{clk.Now().Add(-14 * time.Hour), 0, "bot"}.Line()+LogEntry{clk.Now().Add(-time.Hour), 0, "bot"}.Line()), 0o600)
	var logged recordLogger
	r, err := OpenRateLimiter(path, clk.Now, nil, logged.logger())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	lines := func() int {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Count(data, []byte("\n")) - 1 // the first line is no send
	}
	const bound = 2*2 + 1024
	for range bound - 2 {
		if err := r.Allow("bot", 0, config.SendPolicy{}, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(13 * time.Hour)
	}
	if n := lines(); n != bound {
		t.Fatalf("the file holds %d lines, want all %d (not compacted before its bound)", n, bound)
	}
	if err := r.Allow("bot", 0, config.SendPolicy{}, 1); err != nil {
		t.Fatal(err)
	}
	if n := lines(); n != 2 {
		t.Fatalf("after the send past the bound the file holds %d lines, want the 2 live sends", n)
	}
	// The appends go on after the rewrite, to the new file.
	clk.Advance(time.Minute)
	if err := r.Allow("bot", 0, config.SendPolicy{}, 1); err != nil {
		t.Fatal(err)
	}
	if n := lines(); n != 3 {
		t.Fatalf("after one more send the file holds %d lines, want 3", n)
	}
	if got := logged.all(); len(got) != 0 {
		t.Errorf("appends and a rewrite that worked logged %q", got)
	}
}

// openHandles counts this process's descriptors open on path, including
// on earlier files of that name since replaced (shown as "path (deleted)").
func openHandles(t *testing.T, path string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err == nil && (target == path || target == path+" (deleted)") {
			n++
		}
	}
	return n
}

// TestSendLogKeepsOneHandle: every rewrite replaces the append handle and
// closes the one before, and Close closes the last; closing again, or
// closing a limiter that has no file, is a no-op.
func TestSendLogKeepsOneHandle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelimit.log")
	clk := testclock.New()
	r, err := OpenRateLimiter(path, clk.Now, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 * 1030 { // three rewrites, one send live at a time
		if err := r.Allow("bot", 0, config.SendPolicy{}, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(25 * time.Hour)
	}
	if n := openHandles(t, path); n != 1 {
		t.Errorf("%d descriptors open on the send log after three rewrites, want 1", n)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if n := openHandles(t, path); n != 0 {
		t.Errorf("%d descriptors open on the send log after Close, want 0", n)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := NewRateLimiter(clk.Now).Close(); err != nil {
		t.Errorf("Close of an in-memory limiter: %v", err)
	}
}

// TestRateLimitsCountPerOwner: the sends of a mailbox name count per owner's
// uid, in memory and across a restart. A new owner of the name starts at
// zero; its owner, creating it again, does not.
func TestRateLimitsCountPerOwner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelimit.log")
	clk := testclock.New()
	p := config.SendPolicy{PerMinute: 1}
	r, err := OpenRateLimiter(path, clk.Now, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Allow("bot", 1001, p, 1); err != nil {
		t.Fatal(err)
	}
	r.Close()
	r2, err := OpenRateLimiter(path, clk.Now, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if err := r2.Allow("bot", 1001, p, 1); protocol.CodeOf(err) != protocol.CodeRateLimited {
		t.Errorf("the owner's second send after a restart: %v, want rate_limited", err)
	}
	if got := r2.Usage("bot", 1002, p)[0]; got.Used != 0 {
		t.Errorf("another owner of the name: %+v, want no sends", got)
	}
	if err := r2.Allow("bot", 1002, p, 1); err != nil {
		t.Errorf("another owner's first send: %v", err)
	}
	want := logMagic + LogEntry{clk.Now(), 1001, "bot"}.Line() + LogEntry{clk.Now(), 1002, "bot"}.Line()
	if data, _ := os.ReadFile(path); string(data) != want {
		t.Errorf("the send log holds %q, want %q", data, want)
	}
}

// TestSendLogFormat1CountsForTheCurrentOwner: a send log from before owners
// were recorded (no first line, no uids) is read: each send counts for the
// uid that owns the name when the file opens, so no one gains sends by the
// upgrade, and sends of a name no one owns are dropped. The file is
// rewritten in the current format.
func TestSendLogFormat1CountsForTheCurrentOwner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelimit.log")
	clk := testclock.New()
	at := clk.Now().Add(-time.Second)
	v1 := func(mailbox string) string {
		return strconv.FormatInt(at.UnixNano(), 10) + " " + strconv.Quote(mailbox) + "\n"
	}
	ns := strconv.FormatInt(at.UnixNano(), 10)
	// Lines that do not parse are skipped: no number, no quotes, no name.
	bad := "garbage\n" + `x "bot"` + "\n" + ns + " bot\n" + ns + ` ""` + "\n"
	os.WriteFile(path, []byte(v1("bot")+v1("bot")+v1("gone")+bad), 0o600)
	owner := func(mailbox string) (uint32, bool) { return 1001, mailbox == "bot" }
	if v, err := LogVersion(path); v != 1 || err != nil {
		t.Errorf("LogVersion of a file without a first line: %d, %v; want 1", v, err)
	}
	var logged recordLogger
	r, err := OpenRateLimiter(path, clk.Now, owner, logged.logger())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p := config.SendPolicy{PerMinute: 2}
	if got := r.Usage("bot", 1001, p)[0]; got.Used != 2 {
		t.Errorf("the current owner of bot: %+v, want its 2 sends", got)
	}
	if got := r.Usage("bot", 1002, p)[0]; got.Used != 0 {
		t.Errorf("another uid: %+v, want no sends", got)
	}
	if got := r.Usage("gone", 1001, p)[0]; got.Used != 0 {
		t.Errorf("a name no one owned: %+v, want its sends dropped", got)
	}
	want := logMagic + strings.Repeat(LogEntry{at, 1001, "bot"}.Line(), 2)
	if data, _ := os.ReadFile(path); string(data) != want {
		t.Errorf("the rewritten send log holds %q, want %q", data, want)
	}
	if v, err := LogVersion(path); v != formats.RateLimitLog || err != nil {
		t.Errorf("LogVersion after the rewrite: %d, %v", v, err)
	}
	got := strings.Join(logged.all(), "\n")
	if !strings.Contains(got, "lines=4") || !strings.Contains(got, "dropped_no_owner=1") {
		t.Errorf("logged %q, want the skipped line and the dropped send", got)
	}
}

// TestSendLogNewerIsRefused: a send log a later release wrote, or whose
// first line is the log's with no version, stops the limiter from opening
// and is left as it was; LogVersion, which the daemon asks at start, says
// the same. No file is version 0.
func TestSendLogNewerIsRefused(t *testing.T) {
	dir := t.TempDir()
	clk := testclock.New()
	if v, err := LogVersion(filepath.Join(dir, "none")); v != 0 || err != nil {
		t.Errorf("LogVersion of no file: %d, %v", v, err)
	}
	for _, c := range []struct {
		head string
		want error
	}{{logPrefix + strconv.Itoa(formats.RateLimitLog+1) + "\n", formats.ErrNewer}, {logPrefix + "x\n", formats.ErrDamaged}} {
		path := filepath.Join(dir, "ratelimit.log")
		content := c.head + "1 2 \"bot\"\n"
		os.WriteFile(path, []byte(content), 0o600)
		if _, err := OpenRateLimiter(path, clk.Now, nil, nil); !errors.Is(err, c.want) {
			t.Errorf("%q: OpenRateLimiter: %v, want %v", c.head, err, c.want)
		}
		if _, err := LogVersion(path); !errors.Is(err, c.want) {
			t.Errorf("%q: LogVersion: %v, want %v", c.head, err, c.want)
		}
		if data, _ := os.ReadFile(path); string(data) != content {
			t.Errorf("%q: the refused file was changed: %q", c.head, data)
		}
	}
}

// A limiter that starts with no send log (a new host) says nothing of
// formats: there was nothing to read.
func TestSendLogNewFileLogsNoFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelimit.log")
	var logged recordLogger
	r, err := OpenRateLimiter(path, testclock.New().Now, nil, logged.logger())
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if got := strings.Join(logged.all(), "\n"); strings.Contains(got, "format 1") {
		t.Errorf("a new send log logged %q", got)
	}
	if data, _ := os.ReadFile(path); string(data) != logMagic {
		t.Errorf("a new send log holds %q, want its first line only", data)
	}
}

// TestRateLimitAfterTheClockSteps steps the wall clock under the limiter,
// as an NTP step or a clock set a year ahead and corrected would: sends
// recorded at a time now in the future count as made now. They still
// count (no limit is bypassed by the step), and they leave each window
// a window's length later, not when the clock reaches their time again: a
// per-minute limit does not hold the mailbox for an hour, a day's sends
// made in a wrong year do not hold it for a year. Both across a restart
// (the times read back from the log) and in one process.
func TestRateLimitAfterTheClockSteps(t *testing.T) {
	for _, tc := range []struct {
		name    string
		p       config.SendPolicy
		sends   int
		ahead   time.Duration // how far the clock was ahead while the sends were made
		window  time.Duration
		restart bool
	}{
		{"an hour back, across a restart", config.SendPolicy{PerMinute: 2, PerDay: 100}, 2, time.Hour, time.Minute, true},
		{"an hour back, in one process", config.SendPolicy{PerMinute: 2, PerDay: 100}, 2, time.Hour, time.Minute, false},
		{"a year ahead and back, across a restart", config.SendPolicy{PerDay: 3}, 3, 365 * 24 * time.Hour, 24 * time.Hour, true},
		{"a year ahead and back, in one process", config.SendPolicy{PerDay: 3}, 3, 365 * 24 * time.Hour, 24 * time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ratelimit.log")
			clk := testclock.New()
			clk.Advance(tc.ahead)
			r, err := OpenRateLimiter(path, clk.Now, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.sends {
				if err := r.Allow("bot", 7, tc.p, 1); err != nil {
					t.Fatalf("send %d: %v", i, err)
				}
			}
			clk.Advance(-tc.ahead) // the step back
			if tc.restart {
				r.Close()
				if r, err = OpenRateLimiter(path, clk.Now, nil, nil); err != nil {
					t.Fatal(err)
				}
			}
			defer r.Close()
			err = r.Allow("bot", 7, tc.p, 1)
			if protocol.CodeOf(err) != protocol.CodeRateLimited {
				t.Fatalf("the send after the step: %v, want rate_limited: the sends before it count", err)
			}
			if got := time.Duration(err.(*protocol.Error).RetryAfterMS) * time.Millisecond; got > tc.window {
				t.Errorf("retry after %s, want at most the window, %s", got, tc.window)
			}
			clk.Advance(tc.window + time.Second)
			if err := r.Allow("bot", 7, tc.p, 1); err != nil {
				t.Errorf("a window after the step: %v, want the send allowed", err)
			}
		})
	}
}

// TestWriteLogIsTheLastDaysSends: what a backup takes of the limiter is
// the send log as the limiter would write it, holding the sends still in
// the day's window and none older, so that a limiter opened on it counts
// what this one counts.
func TestWriteLogIsTheLastDaysSends(t *testing.T) {
	clk := testclock.New()
	r, err := OpenRateLimiter(filepath.Join(t.TempDir(), "ratelimit.log"), clk.Now, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p := config.SendPolicy{PerDay: 10}
	r.Allow("bot", 5, p, 1) // 25 hours old when the log is taken
	clk.Advance(23 * time.Hour)
	r.Allow("bot", 5, p, 2)
	r.Allow("other", 6, p, 1)
	clk.Advance(2 * time.Hour)
	var buf bytes.Buffer
	if err := r.WriteLog(&buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if lines[0]+"\n" != logMagic || len(lines) != 4 {
		t.Fatalf("the log taken:\n%s\nwant its first line and the three sends of the last day", buf.String())
	}
	path := filepath.Join(t.TempDir(), "ratelimit.log")
	os.WriteFile(path, buf.Bytes(), 0o600)
	r2, err := OpenRateLimiter(path, clk.Now, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	for _, c := range []struct {
		mailbox string
		uid     uint32
		want    int
	}{{"bot", 5, 2}, {"other", 6, 1}} {
		if got := r2.Usage(c.mailbox, c.uid, p)[0].Used; got != c.want {
			t.Errorf("%s (uid %d) in a limiter opened on the log taken: %d sends, want %d", c.mailbox, c.uid, got, c.want)
		}
	}
}

// The log a limiter writes is the same bytes whatever order its sends were
// made in (a map holds them): by mailbox, then owner, then time. A backup
// of the same counts is then the same archive.
func TestSendLogIsInOrder(t *testing.T) {
	clk := testclock.New()
	r := NewRateLimiter(clk.Now)
	p := config.SendPolicy{PerDay: 10}
	for _, s := range []struct {
		mailbox string
		uid     uint32
	}{{"b", 1}, {"a", 2}, {"a", 1}, {"b", 1}} {
		r.Allow(s.mailbox, s.uid, p, 1)
		clk.Advance(time.Second)
	}
	var buf bytes.Buffer
	if err := r.WriteLog(&buf); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSuffix(strings.TrimPrefix(buf.String(), logMagic), "\n"), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("line %q", line)
		}
		got = append(got, f[2]+"/"+f[1])
	}
	if want := []string{`"a"/1`, `"a"/2`, `"b"/1`, `"b"/1`}; !slices.Equal(got, want) {
		t.Errorf("the log's sends in the order %v, want %v", got, want)
	}
}

// FuzzLogEntry: an entry's line parses back to the entry, on one line,
// and read from a log by LogReader; a line that parses is written back as
// one that parses to the same send.
func FuzzLogEntry(f *testing.F) {
	f.Add(int64(1_800_000_000_000_000_000), uint32(1001), "bot", `12 0 "bot"`)
	f.Add(int64(-1), uint32(0), "a\nb\"\\\xff", `-5 4294967295 "\u00e9\n"`)
	f.Add(int64(0), uint32(7), " ", `1 2 "x" `)
	f.Add(int64(9), uint32(9), "x", "1 2 `raw`")
	f.Fuzz(func(t *testing.T, ns int64, uid uint32, mailbox, line string) {
		if mailbox != "" {
			e := LogEntry{time.Unix(0, ns), uid, mailbox}
			l := e.Line()
			if strings.Count(l, "\n") != 1 || !strings.HasSuffix(l, "\n") {
				t.Fatalf("%+v is written as %q, not one line", e, l)
			}
			got, ok := ParseLogEntry(strings.TrimSuffix(l, "\n"))
			if !ok || !got.At.Equal(e.At) || got.UID != e.UID || got.Mailbox != e.Mailbox {
				t.Fatalf("%+v is written as %q, which parses to %+v (%v)", e, l, got, ok)
			}
			lr, err := NewLogReader(strings.NewReader(logMagic+l), maxLogLine, logWhat, "log")
			if err != nil {
				t.Fatal(err)
			}
			got, ok, err = lr.Next()
			if err != nil || !ok || !got.At.Equal(e.At) || got.UID != e.UID || got.Mailbox != e.Mailbox {
				t.Fatalf("a log of %q reads %+v, %v, %v", l, got, ok, err)
			}
			if _, _, err := lr.Next(); err != io.EOF {
				t.Fatalf("after the one line of %q: %v, want io.EOF", l, err)
			}
		}
		if e, ok := ParseLogEntry(line); ok {
			got, ok := ParseLogEntry(strings.TrimSuffix(e.Line(), "\n"))
			if !ok || !got.At.Equal(e.At) || got.UID != e.UID || got.Mailbox != e.Mailbox || e.Mailbox == "" {
				t.Fatalf("%q parses to %+v, written back as %q, which parses to %+v (%v)", line, e, e.Line(), got, ok)
			}
		}
	})
}

// TestSendLogReadsLinesEndingInCRLF: a line whose newline follows a
// carriage return counts, as bufio.ScanLines reads it; the rewrite at open
// writes it with a newline alone.
func TestSendLogReadsLinesEndingInCRLF(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelimit.log")
	clk := testclock.New()
	good := LogEntry{clk.Now().Add(-time.Second), 5, "bot"}.Line()
	os.WriteFile(path, []byte(logMagic+strings.TrimSuffix(good, "\n")+"\r\n"+strings.TrimSuffix(good, "\n")+"\r"), 0o600)
	r, err := OpenRateLimiter(path, clk.Now, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := r.Usage("bot", 5, config.SendPolicy{PerMinute: 5})[0].Used; got != 2 {
		t.Errorf("bot's sends: %d, want the 2 lines ending in a carriage return", got)
	}
	if data, _ := os.ReadFile(path); string(data) != logMagic+good+good {
		t.Errorf("the rewritten send log holds %q", data)
	}
}

// TestSendLogStopsAtALineTooLong: a line past maxLogLine ends what is
// read (the sends before it count, those after it do not) and says so.
func TestSendLogStopsAtALineTooLong(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelimit.log")
	clk := testclock.New()
	good := LogEntry{clk.Now().Add(-time.Second), 5, "bot"}.Line()
	os.WriteFile(path, []byte(logMagic+good+strings.Repeat("9", maxLogLine)+"\n"+good), 0o600)
	var logged recordLogger
	r, err := OpenRateLimiter(path, clk.Now, nil, logged.logger())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := r.Usage("bot", 5, config.SendPolicy{PerMinute: 5})[0].Used; got != 1 {
		t.Errorf("bot's sends: %d, want the 1 before the long line", got)
	}
	if got := strings.Join(logged.all(), "\n"); !strings.Contains(got, "send log line too long") {
		t.Errorf("logged %q, want the long line named", got)
	}
}
