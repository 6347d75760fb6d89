package policy

import (
	"bytes"
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
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/protocol"
)

func TestRateLimitSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelimit.log")
	clk := testclock.New()
	p := config.SendPolicy{PerMinute: 2, PerDay: 3}
	r, err := OpenRateLimiter(path, clk.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := r.Allow("bot", p, 1); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		clk.Advance(10 * time.Second)
	}
	// No Close: a killed daemon never closes its files.
	r2, err := OpenRateLimiter(path, clk.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	err = r2.Allow("bot", p, 1)
	if protocol.CodeOf(err) != protocol.CodeRateLimited {
		t.Fatalf("after a restart the minute's two sends were forgotten: %v", err)
	}
	// The first send was 20s ago: the window frees in 40s, as before the restart.
	if got := err.(*protocol.Error).RetryAfterMS; got != 40_000 {
		t.Fatalf("retry after %dms, want 40000", got)
	}
	if err := r2.Allow("other", p, 1); err != nil {
		t.Fatalf("limits are per mailbox: %v", err)
	}
	clk.Advance(time.Minute)
	if err := r2.Allow("bot", p, 1); err != nil {
		t.Fatal(err)
	}
	if err := r2.Allow("bot", p, 1); protocol.CodeOf(err) != protocol.CodeRateLimited {
		t.Fatalf("the day's fourth send across a restart: %v", err)
	}
	// A day later everything before has left every window, and the file
	// is rewritten without it at the next start.
	clk.Advance(25 * time.Hour)
	r2.Close()
	r3, err := OpenRateLimiter(path, clk.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r3.Close()
	if data, _ := os.ReadFile(path); len(data) != 0 {
		t.Fatalf("sends older than a day kept: %q", data)
	}
	if err := r3.Allow("bot", p, 1); err != nil {
		t.Fatal(err)
	}
}

func TestSendLogSkipsDamageAndStaysBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelimit.log")
	clk := testclock.New()
	good := sendLine("bot", clk.Now().Add(-time.Second))
	os.WriteFile(path, []byte("garbage\n12 \"unterminated\n"+good+"99999999999999999999999 \"x\"\n1 \"\"\n"+good[:10]), 0o600)
	r, err := OpenRateLimiter(path, clk.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Allow("bot", config.SendPolicy{PerMinute: 1}, 1); protocol.CodeOf(err) != protocol.CodeRateLimited {
		t.Fatalf("the one good line was not counted: %v", err)
	}
	// Sends over two days with no limit: the file holds about the last day.
	for range 3000 {
		if err := r.Allow("bot", config.SendPolicy{}, 1); err != nil {
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
// parses, its mailbox unquotes and is not empty. A bad time with a good
// mailbox, or a good time with an empty mailbox, would otherwise count a
// send (one in 2262, which no window ever lets go of) or keep a line the next
// rewrite carries on. The warning says how many lines were skipped.
func TestSendLogRejectsEachKindOfBadLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelimit.log")
	clk := testclock.New()
	recent := strconv.FormatInt(clk.Now().Add(-time.Second).UnixNano(), 10)
	good := sendLine("bot", clk.Now().Add(-time.Second))
	bad := []string{
		"99999999999999999999999 \"bot\"", // out of range: ParseInt returns the largest int64
		"12x \"bot\"",
		recent + " \"\"",
		recent + " \"bot",
		recent + " bot",
		"garbage",
	}
	os.WriteFile(path, []byte(strings.Join(bad, "\n")+"\n"+good+recent), 0o600) // the last line is cut
	var logged recordLogger
	r, err := OpenRateLimiter(path, clk.Now, logged.logger())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if data, _ := os.ReadFile(path); string(data) != good {
		t.Errorf("the rewritten send log holds %q, want only %q", data, good)
	}
	want := "lines=" + strconv.Itoa(len(bad)+1)
	if got := logged.all(); len(got) != 1 || !strings.Contains(got[0], "send log lines skipped") || !strings.Contains(got[0], want) {
		t.Errorf("logged %q, want one warning with %s", got, want)
	}
	p := config.SendPolicy{PerMinute: 2}
	if got := r.Usage("bot", p)[0]; got.Used != 1 {
		t.Errorf("bot's sends after loading: %+v, want the one good line", got)
	}

	// A clean file logs nothing.
	r.Close()
	logged = recordLogger{}
	r2, err := OpenRateLimiter(path, clk.Now, logged.logger())
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if err := r2.Allow("bot", p, 1); err != nil {
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
	os.WriteFile(path, []byte(sendLine("bot", clk.Now().Add(-14*time.Hour))+sendLine("bot", clk.Now().Add(-time.Hour))), 0o600)
	var logged recordLogger
	r, err := OpenRateLimiter(path, clk.Now, logged.logger())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	lines := func() int {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Count(data, []byte("\n"))
	}
	const bound = 2*2 + 1024
	for range bound - 2 {
		if err := r.Allow("bot", config.SendPolicy{}, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(13 * time.Hour)
	}
	if n := lines(); n != bound {
		t.Fatalf("the file holds %d lines, want all %d (not compacted before its bound)", n, bound)
	}
	if err := r.Allow("bot", config.SendPolicy{}, 1); err != nil {
		t.Fatal(err)
	}
	if n := lines(); n != 2 {
		t.Fatalf("after the send past the bound the file holds %d lines, want the 2 live sends", n)
	}
	// The appends go on after the rewrite, to the new file.
	clk.Advance(time.Minute)
	if err := r.Allow("bot", config.SendPolicy{}, 1); err != nil {
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
	r, err := OpenRateLimiter(path, clk.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 * 1030 { // three rewrites, one send live at a time
		if err := r.Allow("bot", config.SendPolicy{}, 1); err != nil {
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
