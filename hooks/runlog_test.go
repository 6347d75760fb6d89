package hooks

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

func fileLines(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
	}
	return n
}

func TestRunLogPersistsAndStaysBounded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	path := filepath.Join(dir, "hook-runs.jsonl")
	l, err := OpenRunLog(path, 10)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := 0; i < 25; i++ {
		hook := "even"
		if i%2 == 1 {
			hook = "odd"
		}
		run := protocol.HookRun{Hook: hook, Mailbox: "agent", Event: "on_receive", MessageID: "m" + strconv.Itoa(i), StartedAt: base.Add(time.Duration(i) * time.Second), ExitCode: i, StderrTail: "line\nwith \"quotes\""}
		if err := l.Append(run); err != nil {
			t.Fatal(err)
		}
		if n := fileLines(t, path); n >= 20 {
			t.Fatalf("file holds %d lines after %d appends, bound 2*10", n, i+1)
		}
	}
	check := func(l *RunLog) {
		t.Helper()
		all := l.List(nil, 0)
		if len(all) != 10 {
			t.Fatalf("List holds %d runs, want 10", len(all))
		}
		for i, r := range all {
			if want := "m" + strconv.Itoa(24-i); r.MessageID != want {
				t.Errorf("List[%d] = %s, want %s (newest first)", i, r.MessageID, want)
			}
		}
		odd := l.List(func(r protocol.HookRun) bool { return r.Hook == "odd" }, 2)
		if len(odd) != 2 || odd[0].MessageID != "m23" || odd[1].MessageID != "m21" {
			t.Errorf("filtered List = %+v", odd)
		}
		if last := l.Last("even"); last == nil || last.MessageID != "m24" || last.ExitCode != 24 || !last.StartedAt.Equal(base.Add(24*time.Second)) || last.StderrTail != "line\nwith \"quotes\"" {
			t.Errorf("Last(even) = %+v", last)
		}
		if l.Last("none") != nil {
			t.Error("Last of an unknown hook is not nil")
		}
	}
	check(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(protocol.HookRun{Hook: "late"}); err == nil {
		t.Error("Append after Close reported success")
	}

	l2, err := OpenRunLog(path, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	check(l2)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("run log mode %v, want 0600", fi.Mode().Perm())
	}
	if di, err := os.Stat(dir); err != nil || di.Mode().Perm() != 0o700 {
		t.Errorf("run log directory mode %v (%v), want 0700", di.Mode().Perm(), err)
	}
}

func TestRunLogSurvivesDamage(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "runs.jsonl")
	good := `{"hook":"a","mailbox":"m","event":"on_receive","message_id":"1","started_at":"2026-01-01T00:00:00Z","duration_ms":5,"exit_code":0,"timed_out":false}`
	content := good + "\nnot json\n" + strings.Repeat("x", maxRunLine+10) + "\n" + `{"hook":"b","exit_code":2}` + "\n" + `{"hook":"c","exit_co`
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, ".tmp-runs.jsonl-123")
	if err := os.WriteFile(stale, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Another writer's file in progress in the same directory stays.
	foreign := filepath.Join(dir, ".tmp-ratelimits.json-456")
	if err := os.WriteFile(foreign, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := OpenRunLog(path, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	runs := l.List(nil, 0)
	if len(runs) != 2 || runs[0].Hook != "b" || runs[1].Hook != "a" {
		t.Fatalf("runs = %+v, want b then a", runs)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Error("stale temporary file not removed")
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("another file's temporary file was removed: %v", err)
	}
	if err := l.Append(protocol.HookRun{Hook: "d"}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600 after open", fi.Mode().Perm())
	}
	l2, err := OpenRunLog(path, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if got := l2.List(nil, 0); len(got) != 3 || got[0].Hook != "d" {
		t.Errorf("after reopen: %+v", got)
	}
}

func TestRunLogConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.jsonl")
	l, err := OpenRunLog(path, 50)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				if err := l.Append(protocol.HookRun{Hook: "g" + strconv.Itoa(g), ExitCode: i}); err != nil {
					t.Error(err)
				}
				l.List(nil, 5)
				l.Last("g0")
			}
		}()
	}
	wg.Wait()
	if n := len(l.List(nil, 0)); n != 50 {
		t.Errorf("holds %d runs, want 50", n)
	}
	l.Close()
	l2, err := OpenRunLog(path, 50)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if n := len(l2.List(nil, 0)); n != 50 {
		t.Errorf("after reopen holds %d runs, want 50", n)
	}
}

func TestRunLogRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "runs.jsonl")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenRunLog(path, 10); err == nil {
		t.Error("OpenRunLog followed a symlink")
	}
}

// TestRunLogRefusesFIFO: a FIFO where the run log is kept is refused, not
// waited on for a writer (the daemon opens the log at start).
func TestRunLogRefusesFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.jsonl")
	testwait.FIFO(t, path)
	err := testwait.Returns(t, "OpenRunLog of a FIFO", func() error {
		_, err := OpenRunLog(path, 10)
		return err
	})
	if !errors.Is(err, safeio.ErrNotRegular) {
		t.Errorf("OpenRunLog of a FIFO: %v, want it refused as not a regular file", err)
	}
}

// TestRunLogReopenRefusesWhatIsNoRegularFile: after a compaction's rename
// the log is opened again by name. A symbolic link put there meanwhile is
// refused, not followed (the file it leads to stays as it was), and a FIFO
// is refused without waiting for a reader, each naming the path.
func TestRunLogReopenRefusesWhatIsNoRegularFile(t *testing.T) {
	other := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(other, []byte("not the run log's"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, what := range []string{"a symbolic link", "a FIFO"} {
		path := filepath.Join(t.TempDir(), "runs.jsonl")
		l, err := OpenRunLog(path, 3)
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(path)
		if what == "a FIFO" {
			testwait.FIFO(t, path)
		} else if err := os.Symlink(other, path); err != nil {
			t.Fatal(err)
		}
		l.mu.Lock()
		old := l.f
		err = testwait.Returns(t, "the run log's reopen on "+what, l.openAppend)
		l.f = old
		l.mu.Unlock()
		if !errors.Is(err, safeio.ErrNotRegular) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want it refused as no regular file, naming %s", what, err, path)
		}
		l.Close()
	}
	if b, _ := os.ReadFile(other); string(b) != "not the run log's" {
		t.Errorf("the file a link in the run log's place leads to now holds %q", b)
	}
}

// TestRunLogKeepsOneHandle: each compaction replaces the append handle and
// closes the one before; Close closes the last.
func TestRunLogKeepsOneHandle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.jsonl")
	l, err := OpenRunLog(path, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 { // a compaction every few appends
		if err := l.Append(protocol.HookRun{Hook: "h", ExitCode: i}); err != nil {
			t.Fatal(err)
		}
	}
	if n := fileLines(t, path); n >= 6 {
		t.Fatalf("the file holds %d lines: it was not compacted", n)
	}
	if n := openHandles(t, path); n != 1 {
		t.Errorf("%d descriptors open on the run log after compactions, want 1", n)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := openHandles(t, path); n != 0 {
		t.Errorf("%d descriptors open on the run log after Close, want 0", n)
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

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func runLines(n int, hook string) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(`{"hook":"` + hook + `","exit_code":` + strconv.Itoa(i) + "}\n")
	}
	return b.String()
}

// TestRunLogRewritesAtOpenOnlyWhenNeeded: a clean file within its bound is
// appended to as it is; one with a line it could not keep, a last line
// without a newline (the next append would be glued to it) or more runs than
// the bound is rewritten first. Blank lines are not runs.
func TestRunLogRewritesAtOpenOnlyWhenNeeded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
		rewrite bool
		runs    int
	}{
		{"clean, at the bound", runLines(5, "a"), false, 5},
		{"clean with blank lines", "\n" + runLines(2, "a") + "\n\n" + runLines(3, "b"), false, 5},
		{"one run over the bound", runLines(6, "a"), true, 5},
		{"a line that is not a run", runLines(2, "a") + "not json\n", true, 2},
		{"last line without a newline", strings.TrimSuffix(runLines(3, "a"), "\n"), true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "runs.jsonl")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			before := inode(t, path)
			l, err := OpenRunLog(path, 5)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if rewritten := inode(t, path) != before; rewritten != tc.rewrite {
				t.Errorf("rewritten at open: %v, want %v", rewritten, tc.rewrite)
			}
			if err := l.Append(protocol.HookRun{Hook: "new"}); err != nil {
				t.Fatal(err)
			}
			l2, err := OpenRunLog(path, 10)
			if err != nil {
				t.Fatal(err)
			}
			defer l2.Close()
			got := l2.List(nil, 0)
			if len(got) != min(tc.runs, 5)+1 || got[0].Hook != "new" {
				t.Errorf("after an append and a reopen: %d runs, newest %+v; want %d, newest the appended one", len(got), got[0], min(tc.runs, 5)+1)
			}
		})
	}
}

// TestRunLogLineBound: a line of exactly maxRunLine bytes, its newline
// included, is read; one byte more and it is skipped as corrupt.
func TestRunLogLineBound(t *testing.T) {
	line := func(n int) string { // a run encoded in exactly n bytes, newline included
		prefix, suffix := `{"hook":"long","stderr_tail":"`, "\"}\n"
		return prefix + strings.Repeat("x", n-len(prefix)-len(suffix)) + suffix
	}
	for _, tc := range []struct {
		n    int
		kept bool
	}{{maxRunLine, true}, {maxRunLine + 1, false}} {
		path := filepath.Join(t.TempDir(), "runs.jsonl")
		if err := os.WriteFile(path, []byte(line(tc.n)+runLines(1, "short")), 0o600); err != nil {
			t.Fatal(err)
		}
		l, err := OpenRunLog(path, 10)
		if err != nil {
			t.Fatal(err)
		}
		got := l.List(nil, 0)
		l.Close()
		if kept := len(got) == 2 && got[1].Hook == "long"; kept != tc.kept || got[0].Hook != "short" {
			t.Errorf("a %d-byte line: %d runs read, long one kept %v, want %v", tc.n, len(got), kept, tc.kept)
		}
	}
}

// TestRunLogCompactsAtItsBound: the file is rewritten when an append would
// make it hold twice the bound, counting the lines it held when opened, and
// not before.
func TestRunLogCompactsAtItsBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.jsonl")
	if err := os.WriteFile(path, []byte(runLines(4, "old")), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := OpenRunLog(path, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := 5; i <= 9; i++ { // lines 5 to 9 are appended
		if err := l.Append(protocol.HookRun{Hook: "new"}); err != nil {
			t.Fatal(err)
		}
		if n := fileLines(t, path); n != i {
			t.Fatalf("after appending line %d the file holds %d lines", i, n)
		}
	}
	if err := l.Append(protocol.HookRun{Hook: "new"}); err != nil { // the tenth: compacted
		t.Fatal(err)
	}
	if n := fileLines(t, path); n != 5 {
		t.Fatalf("at twice the bound the file holds %d lines, want the newest 5", n)
	}
	// Appends go on to the new file, without rewriting it.
	compacted := inode(t, path)
	if err := l.Append(protocol.HookRun{Hook: "new"}); err != nil {
		t.Fatal(err)
	}
	if n := fileLines(t, path); n != 6 || inode(t, path) != compacted {
		t.Fatalf("the append after compaction: %d lines, rewritten %v; want 6 lines appended", n, inode(t, path) != compacted)
	}
}

// TestRunLogDefaultBound: a bound of zero or less means DefaultRunLogMax.
func TestRunLogDefaultBound(t *testing.T) {
	for _, max := range []int{0, -1} {
		l, err := OpenRunLog(filepath.Join(t.TempDir(), "runs.jsonl"), max)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := l.Append(protocol.HookRun{Hook: "h"}); err != nil {
				t.Fatal(err)
			}
		}
		if got := len(l.List(nil, 0)); got != 3 || l.max != DefaultRunLogMax {
			t.Errorf("max %d: keeps %d of 3 runs, bound %d; want all, bound %d", max, got, l.max, DefaultRunLogMax)
		}
		l.Close()
	}
}

// TestRunLogOneMailboxCannotPushOutAnothers: the log is shared by every
// mailbox on the host, so a user whose hook runs (or is dropped) over and
// over must not push the runs of other users' hooks out of it, and with
// them the last run hook_list shows. A full log lets go of the oldest run
// of the mailbox that holds the most, also when it is read again. The two
// mailboxes have one name (the quiet one was deleted, and another user made
// one under its name): they are two mailboxes all the same.
func TestRunLogOneMailboxCannotPushOutAnothers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.jsonl")
	l, err := OpenRunLog(path, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	quiet := func(r protocol.HookRun) bool { return r.MailboxID == "m-quiet" }
	for i := range 3 {
		l.Append(protocol.HookRun{Hook: "quiet", HookID: "h-quiet", Mailbox: "shared", MailboxID: "m-quiet", MessageID: "q" + strconv.Itoa(i)})
	}
	for i := range 50 {
		l.Append(protocol.HookRun{Hook: "flood", HookID: "h-flood", Mailbox: "shared", MailboxID: "m-flood", MessageID: "f" + strconv.Itoa(i)})
	}
	check := func(l *RunLog, when string) {
		t.Helper()
		all := l.List(nil, 0)
		if len(all) != 10 {
			t.Errorf("%s: the log keeps %d runs, want its bound, 10", when, len(all))
		}
		if got := l.List(quiet, 0); len(got) != 3 {
			t.Errorf("%s: the quiet mailbox has %d of its 3 runs left after another's flood", when, len(got))
		}
		if last := l.LastOf("h-quiet"); last == nil || last.MessageID != "q2" {
			t.Errorf("%s: the quiet hook's last run is %+v, want the one of q2", when, last)
		}
		if last := l.LastOf("h-flood"); last == nil || last.MessageID != "f49" {
			t.Errorf("%s: the flooding hook's last run is %+v, want the one of f49", when, last)
		}
	}
	check(l, "in memory")
	l.Close()
	l2, err := OpenRunLog(path, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	check(l2, "read again")
}

// A flood that moves from one mailbox to another leaves each half of the
// log: the counts of runs held follow every run let go.
func TestRunLogFloodsOfTwoMailboxesShareIt(t *testing.T) {
	l, err := OpenRunLog(filepath.Join(t.TempDir(), "runs.jsonl"), 10)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, m := range []string{"a", "b"} {
		for i := range 50 {
			l.Append(protocol.HookRun{Hook: m, HookID: "h-" + m, Mailbox: m, MailboxID: "m-" + m, MessageID: m + strconv.Itoa(i)})
		}
	}
	if all := l.List(nil, 0); len(all) != 10 {
		t.Errorf("the log keeps %d runs, want its bound, 10", len(all))
	}
	for _, m := range []string{"a", "b"} {
		if got := l.List(func(r protocol.HookRun) bool { return r.MailboxID == "m-"+m }, 0); len(got) != 5 {
			t.Errorf("mailbox %s holds %d runs, want 5 of the 10", m, len(got))
		}
	}
}
