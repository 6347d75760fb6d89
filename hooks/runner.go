package hooks

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"golang.org/x/sys/unix"

	"github.com/mailctl/mailctl/protocol"
)

// Runner defaults.
const (
	DefaultMaxConcurrent = 4
	DefaultMaxQueued     = 64
	// DefaultMaxHeldBytes bounds the stdin bytes (the messages) that runs
	// started with Go hold while they wait or run.
	DefaultMaxHeldBytes = 256 << 20
	DefaultOutputCap    = 32 << 10
	DefaultKillGrace    = 5 * time.Second
	// StderrTailBytes is how much of the end of stderr a run record keeps.
	StderrTailBytes = 2048
)

// Runner starts hooks. The zero value is ready to use with the defaults; set
// the fields before the first run and do not change them afterwards.
type Runner struct {
	// MaxConcurrent bounds how many hooks run at once (default 4). Further
	// runs wait for a slot. The hooks of one owner take at most all but
	// one of the slots (OwnerShare), so that a user whose hooks run long
	// cannot hold back everyone else's.
	MaxConcurrent int
	// MaxQueued bounds how many asynchronous runs may wait for a slot
	// (default 64); Go records a run beyond that as dropped, and likewise a
	// run of an owner whose runs already wait in half of the places.
	MaxQueued int
	// MaxHeldBytes bounds the bytes of stdin (each run's message, counted
	// once per run) that runs started with Go and not yet over hold, so
	// that runs waiting for a slot cannot fill the daemon's memory with
	// large messages (default DefaultMaxHeldBytes). One owner's runs hold at
	// most half. A run past either bound is recorded as dropped, unless
	// nothing is held: a message larger than the bound still runs alone.
	MaxHeldBytes int64
	// OutputCap bounds the bytes kept of each of stdout and stderr per run
	// (default 32 KiB each). The rest is read and discarded so the hook never
	// blocks on a full pipe. Each stream has its own bound, so what is kept
	// does not depend on which pipe the runner happened to read first.
	OutputCap int
	// KillGrace is the time between SIGTERM and SIGKILL (default 5s).
	KillGrace time.Duration
	// Log receives every run, including refused and dropped ones. Optional.
	Log *RunLog
	// Logger receives one line per run; slog.Default() when nil. Message
	// data is never logged, only hook, mailbox and message ids.
	Logger *slog.Logger
	// OnRun, when set, hears of every run as it is recorded, refused and
	// dropped ones included (for metrics). It must not block. A run is
	// recorded (here and in Log) once it has let go of what it held: from
	// then on it counts against no bound.
	OnRun func(run protocol.HookRun)
	// Check, when set, is asked once a run has its slot, just before the
	// hook starts. A run can wait for a slot long after its hook was
	// chosen, and meanwhile the hook may have been deleted or changed, or
	// its mailbox deleted and perhaps made again under the same name by
	// someone else. A non-nil error drops the run: it is recorded as
	// dropped, with the error, and nothing starts. It must not block.
	Check func(h protocol.Hook, owner Owner, f Facts) error

	once     sync.Once
	sem      chan struct{}
	baseCtx  context.Context
	cancel   context.CancelFunc
	mu       sync.Mutex
	inflight int
	held     int64 // stdin bytes of the runs counted in inflight
	byOwner  map[uint32]*ownerRuns
	closed   bool
	wg       sync.WaitGroup

	// started, when set (tests do), is called once a run's command has
	// started, before the run supervises it.
	started func()
}

// ownerRuns are one owner's runs: started with Go and not yet over
// (running or waiting), and the slots its runs may hold at once.
type ownerRuns struct {
	inflight int
	held     int64 // stdin bytes of those runs
	starting int   // runs given up on while their process was starting
	users    int   // RunOutput calls and starting runs that hold this record
	sem      chan struct{}
}

// OwnerShare is what the runs of one owner may hold of a runner with
// atOnce slots and queued places to wait: all slots but one (at least
// one), and half the places.
func OwnerShare(atOnce, queued int) (running, waiting int) {
	return max(1, atOnce-1), max(1, queued/2)
}

// owner returns the record of uid's runs, held until release.
func (r *Runner) owner(uid uint32) *ownerRuns {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ownerLocked(uid)
}

func (r *Runner) ownerLocked(uid uint32) *ownerRuns {
	if r.byOwner == nil {
		r.byOwner = map[uint32]*ownerRuns{}
	}
	o := r.byOwner[uid]
	if o == nil {
		running, _ := OwnerShare(orDefault(r.MaxConcurrent, DefaultMaxConcurrent), orDefault(r.MaxQueued, DefaultMaxQueued))
		o = &ownerRuns{sem: make(chan struct{}, running)}
		r.byOwner[uid] = o
	}
	o.users++
	return o
}

// release gives up a hold ownerLocked took; the record goes with the last.
func (r *Runner) release(uid uint32, o *ownerRuns) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.releaseLocked(uid, o)
}

func (r *Runner) releaseLocked(uid uint32, o *ownerRuns) {
	if o.users--; o.users == 0 {
		delete(r.byOwner, uid)
	}
}

// Output is what a run wrote, within Runner.OutputCap.
type Output struct {
	Stdout, Stderr []byte
	// Discarded counts the bytes read from the hook beyond the cap.
	Discarded int64
}

func (r *Runner) init() {
	r.once.Do(func() {
		r.sem = make(chan struct{}, orDefault(r.MaxConcurrent, DefaultMaxConcurrent))
		r.baseCtx, r.cancel = context.WithCancel(context.Background())
	})
}

// orDefault is v when it is set (positive), else def: a field left zero or
// set out of range takes the default.
func orDefault[T int | int64 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// RunOutput runs h once for the event f as owner, feeding stdin (the
// message's Markdown) to it, and returns the run record after appending it to
// Log, and the captured output. It waits for a free slot first (bounded by
// MaxConcurrent), then asks Check whether h may still run. Cancelling ctx
// terminates the hook's process group like a timeout does.
func (r *Runner) RunOutput(ctx context.Context, h protocol.Hook, owner Owner, f Facts, stdin []byte) (protocol.HookRun, Output) {
	run, out := r.runOutput(ctx, h, owner, f, stdin)
	r.record(run)
	return run, out
}

// runOutput is RunOutput but for the record, which its caller makes once
// the run has let go of everything it held (its slot, its owner's share
// and record, and for Go its place in flight): a run that Log or OnRun
// says ended no longer counts against its owner or the runner, and the
// owner's next run is not dropped for it.
func (r *Runner) runOutput(ctx context.Context, h protocol.Hook, owner Owner, f Facts, stdin []byte) (protocol.HookRun, Output) {
	r.init()
	notStarted := func() (protocol.HookRun, Output) {
		return dropped(h, f, fmt.Sprintf("not started: %v while waiting for a free slot", context.Cause(ctx))), Output{}
	}
	if ctx.Err() != nil {
		return notStarted()
	}
	// The owner's share first, then a slot: a run waiting for its owner's
	// share holds no slot another owner could use.
	o := r.owner(owner.UID)
	defer r.release(owner.UID, o)
	select {
	case o.sem <- struct{}{}:
	case <-ctx.Done():
		return notStarted()
	}
	defer func() { <-o.sem }()
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return notStarted()
	}
	if r.Check != nil {
		if err := r.Check(h, owner, f); err != nil {
			<-r.sem
			return dropped(h, f, "dropped before it started: "+err.Error()), Output{}
		}
	}
	run, out := r.exec(ctx, h, owner, f, stdin)
	<-r.sem
	return run, out
}

// Go runs h in the background and returns at once. When MaxConcurrent runs
// are busy and MaxQueued more are waiting, or after Shutdown, the run is
// recorded as dropped instead. stdin must not be modified afterwards.
func (r *Runner) Go(h protocol.Hook, owner Owner, f Facts, stdin []byte) {
	r.init()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		r.drop(h, f, "dropped: hooks are shutting down")
		return
	}
	atOnce, queued := orDefault(r.MaxConcurrent, DefaultMaxConcurrent), orDefault(r.MaxQueued, DefaultMaxQueued)
	if r.inflight >= atOnce+queued {
		r.mu.Unlock()
		r.drop(h, f, fmt.Sprintf("dropped: %d hook runs already running or waiting (%d at once, %d queued)", atOnce+queued, atOnce, queued))
		return
	}
	o := r.ownerLocked(owner.UID)
	if running, waiting := OwnerShare(atOnce, queued); o.inflight >= running+waiting {
		r.releaseLocked(owner.UID, o)
		r.mu.Unlock()
		r.drop(h, f, fmt.Sprintf("dropped: %d hook runs of uid %d already running or waiting, the most one owner may have (%d at once, %d queued)",
			running+waiting, owner.UID, running, waiting))
		return
	}
	if o.starting > 0 {
		r.releaseLocked(owner.UID, o)
		r.mu.Unlock()
		r.drop(h, f, fmt.Sprintf("dropped: an earlier hook run of uid %d never got its command started and is still waiting for it", owner.UID))
		return
	}
	size := int64(len(stdin))
	maxHeld := orDefault(r.MaxHeldBytes, DefaultMaxHeldBytes)
	if o.held > 0 && o.held+size > maxHeld/2 {
		r.releaseLocked(owner.UID, o)
		r.mu.Unlock()
		r.drop(h, f, fmt.Sprintf("dropped: hook runs of uid %d already hold %d bytes of messages, and this one has %d (at most %d for one owner)",
			owner.UID, o.held, size, maxHeld/2))
		return
	}
	if r.held > 0 && r.held+size > maxHeld {
		r.releaseLocked(owner.UID, o)
		r.mu.Unlock()
		r.drop(h, f, fmt.Sprintf("dropped: hook runs already hold %d bytes of messages, and this one has %d (at most %d)", r.held, size, maxHeld))
		return
	}
	o.inflight++
	o.held += size
	r.inflight++
	r.held += size
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		run, _ := r.runOutput(r.baseCtx, h, owner, f, stdin)
		r.mu.Lock()
		r.inflight--
		r.held -= size
		o.inflight--
		o.held -= size
		r.releaseLocked(owner.UID, o)
		r.mu.Unlock()
		r.record(run)
	}()
}

// Wait blocks until every run started with Go has finished.
func (r *Runner) Wait() { r.wg.Wait() }

// Shutdown refuses further Go runs and waits for the running ones. When ctx
// ends first, the remaining runs are terminated (SIGTERM, then SIGKILL after
// KillGrace) and recorded as canceled; Shutdown then returns ctx's error.
func (r *Runner) Shutdown(ctx context.Context) error {
	r.init()
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		r.cancel()
		<-done
		return ctx.Err()
	}
}

// drop records a run of h that did not start, and why, and returns it.
func (r *Runner) drop(h protocol.Hook, f Facts, why string) protocol.HookRun {
	run := dropped(h, f, why)
	r.record(run)
	return run
}

// dropped is the record of a run of h that did not start, and why.
func dropped(h protocol.Hook, f Facts, why string) protocol.HookRun {
	run := newRun(h, f)
	run.Error = why
	return run
}

func newRun(h protocol.Hook, f Facts) protocol.HookRun {
	return protocol.HookRun{
		Hook:      h.Name,
		HookID:    h.ID,
		Mailbox:   cmp.Or(f.Mailbox, h.Mailbox),
		MailboxID: h.MailboxID,
		Event:     cmp.Or(f.Event, h.Event),
		MessageID: f.ID,
		StartedAt: time.Now().UTC(),
		ExitCode:  -1,
	}
}

func (r *Runner) record(run protocol.HookRun) {
	attrs := []any{
		slog.String("hook", run.Hook), slog.String("mailbox", run.Mailbox),
		slog.String("event", run.Event), slog.String("id", run.MessageID),
		slog.Int("exit_code", run.ExitCode), slog.Int64("duration_ms", run.DurationMS),
		slog.Bool("timed_out", run.TimedOut),
	}
	if run.Error != "" {
		attrs = append(attrs, slog.String("error", run.Error))
	}
	log := cmp.Or(r.Logger, slog.Default())
	log.Info("hook run", attrs...)
	if r.OnRun != nil {
		r.OnRun(run)
	}
	if r.Log != nil {
		if err := r.Log.Append(run); err != nil {
			log.Warn("hook run log", slog.String("hook", run.Hook), slog.Any("err", err))
		}
	}
}

// exec starts one process group and sees it to its end.
func (r *Runner) exec(ctx context.Context, h protocol.Hook, owner Owner, f Facts, stdin []byte) (run protocol.HookRun, out Output) {
	run = newRun(h, f)
	start := time.Now()
	defer func() { run.DurationMS = time.Since(start).Milliseconds() }()

	// Validate again: a hook read from a hand-edited file must meet the same
	// rules as one created over the socket.
	h.Cmd = append([]string(nil), h.Cmd...)
	if err := startable(&h, owner); err != nil {
		run.Error = "not started: " + err.Error()
		return run, Output{}
	}
	capt := &capture{limit: orDefault(r.OutputCap, DefaultOutputCap)}
	grace := orDefault(r.KillGrace, DefaultKillGrace)
	newCmd := func(dir string) *exec.Cmd {
		cmd := command(h, owner, f, stdin, capt, grace)
		cmd.Dir = dir
		return cmd
	}
	// A hook gets stdin, stdout and stderr only: no ExtraFiles, and nothing
	// the daemon inherited.
	if err := CloseOnExecAbove2(); err != nil {
		run.Error = "not started: marking the daemon's descriptors close-on-exec: " + err.Error()
		return run, capt.output()
	}
	timeout := time.Duration(h.TimeoutSecs) * time.Second
	deadline := time.Now().Add(timeout)
	cmd, why, err := r.start(ctx, newCmd, owner, timeout)
	if why != "" {
		run.TimedOut = ctx.Err() == nil
		run.Error = why
		return run, capt.output()
	} else if err != nil {
		run.Error = "not started: " + err.Error()
		return run, capt.output()
	}
	if r.started != nil {
		r.started()
	}
	stopped, timedOut := supervise(ctx, cmd.Process.Pid, deadline, timeout, grace)
	run.TimedOut = timedOut
	err = cmd.Wait()
	run.ExitCode, run.Error = outcome(cmd.ProcessState, stopped, err)
	out = capt.output()
	run.StderrTail = capt.stderrTail()
	return run, out
}

// start starts the command newCmd makes in the owner's home (see startIn),
// giving up when timeout passes or ctx ends first, and says why it gave
// up; else it returns the started command or Start's error. The new
// process changes to the owner's home and
// executes cmd[0] before Start returns, and either may wait for ever on a
// file system that never answers (a FUSE mount of the owner's): the run
// must not hold its slot, outlast its timeout or hold up a shutdown. The
// process is then left to finish starting and killed, with its session, as
// soon as it has; meanwhile the owner's further runs are dropped (Go), so
// at most one such process per owner is left waiting.
func (r *Runner) start(ctx context.Context, newCmd func(dir string) *exec.Cmd, owner Owner, timeout time.Duration) (cmd *exec.Cmd, gaveUp string, err error) {
	uid := owner.UID
	started := make(chan startResult, 1)
	go func() {
		// Choosing the directory looks at the home too.
		started <- startIn(newCmd, owner.Home)
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case res := <-started:
		return res.cmd, "", res.err
	case <-timer.C:
		if res, ok := startedBy(started); ok {
			return res.cmd, "", res.err
		}
		gaveUp = fmt.Sprintf("timed out after %ds before its command started (the owner's home or cmd[0] is on a file system that does not answer); it is killed when it starts", int(timeout/time.Second))
	case <-ctx.Done():
		if res, ok := startedBy(started); ok {
			return res.cmd, "", res.err
		}
		gaveUp = fmt.Sprintf("canceled (%v) before its command started; it is killed when it starts", context.Cause(ctx))
	}
	r.mu.Lock()
	o := r.ownerLocked(uid)
	o.starting++
	r.mu.Unlock()
	go func() {
		if res := <-started; res.err == nil {
			pid := res.cmd.Process.Pid
			_ = unix.Kill(-pid, unix.SIGKILL)
			waitExited(pid)
			killSession(pid)
			_ = res.cmd.Wait()
		}
		r.mu.Lock()
		o.starting--
		r.releaseLocked(uid, o)
		r.mu.Unlock()
	}()
	return nil, gaveUp, nil
}

// startResult is a started command, or the error of its start.
type startResult struct {
	cmd *exec.Cmd
	err error
}

// startIn starts the command newCmd makes in the owner's home, or in "/"
// when the home is missing or not a directory (workDir) or the owner may
// not enter it. The child changes directory as the owner, after the switch
// of uid, and a failure of that (EACCES, or a home gone since it was
// looked at) comes back from Start as a failure of the exec itself would:
// so a start that fails in the home is made once more, in "/", which fails
// the same way when it was cmd[0] that could not be run.
func startIn(newCmd func(dir string) *exec.Cmd, home string) startResult {
	dir := workDir(home)
	cmd := newCmd(dir)
	err := cmd.Start()
	if err != nil && dir != "/" {
		cmd = newCmd("/")
		err = cmd.Start()
	}
	return startResult{cmd, err}
}

// startedBy returns Start's result if it is in already. select picks at
// random among the cases that are ready: a command that started just as
// the run's time ran out or its context ended is a started command all the
// same, to be stopped as one (SIGTERM, then SIGKILL after the grace).
func startedBy(started <-chan startResult) (startResult, bool) {
	select {
	case res := <-started:
		return res, true
	default:
		return startResult{}, false
	}
}

// startable checks that h may run as owner from this daemon.
func startable(h *protocol.Hook, owner Owner) error {
	DropUngatedFlags(h)
	if err := Normalize(h); err != nil {
		return err
	}
	if owner.UID == 0 {
		return ErrRootOwner
	}
	if self := uint32(os.Getuid()); owner.UID != self && os.Geteuid() != 0 {
		return fmt.Errorf("the daemon runs as uid %d, not root, so it cannot run a hook as uid %d", self, owner.UID)
	}
	return nil
}

// command is the hook's process: as the owner (with only the owner's
// groups), leading a session (and so a process group) of its own, with its
// output captured.
func command(h protocol.Hook, owner Owner, f Facts, stdin []byte, capt *capture, grace time.Duration) *exec.Cmd {
	cmd := &exec.Cmd{
		Path:   h.Cmd[0],
		Args:   h.Cmd,
		Env:    Env(h, f, owner),
		Stdin:  bytes.NewReader(stdin),
		Stdout: captureWriter{capt, false},
		Stderr: captureWriter{capt, true},
		// A process that escaped the session (setsid) may hold the pipes
		// open after the rest is gone; stop reading from them after the grace.
		WaitDelay: grace,
		SysProcAttr: &syscall.SysProcAttr{
			// A session, not just a process group: a child may leave the
			// group (setpgid, as a shell with job control does for every
			// background job) but stays in the session, where
			// killSession finds it.
			Setsid: true,
		},
	}
	if owner.UID != uint32(os.Getuid()) {
		groups := owner.Groups
		if groups == nil {
			groups = []uint32{} // still drop the daemon's supplementary groups
		}
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: owner.UID, Gid: owner.GID, Groups: groups}
	}
	return cmd
}

// supervise waits for the hook's leader pid to exit, stopping its session
// (TERM, then KILL after grace) at deadline (timeout after the run began) or
// on cancellation, and kills
// whatever the session left behind. It says why it stopped the hook, if it did.
func supervise(ctx context.Context, pid int, deadline time.Time, timeout, grace time.Duration) (stopped string, timedOut bool) {
	exited := make(chan struct{})
	go func() {
		waitExited(pid)
		close(exited)
	}()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-exited:
	case <-timer.C:
		timedOut = true
		stopped = fmt.Sprintf("timed out after %ds: process group sent SIGTERM", int(timeout/time.Second))
	case <-ctx.Done():
		stopped = fmt.Sprintf("canceled (%v): process group sent SIGTERM", context.Cause(ctx))
	}
	if stopped != "" {
		_ = unix.Kill(-pid, unix.SIGTERM)
		signalSession(pid, unix.SIGTERM)
		select {
		case <-exited:
		case <-time.After(grace):
			stopped += fmt.Sprintf(", then SIGKILL after %v", grace)
			_ = unix.Kill(-pid, unix.SIGKILL)
			killSession(pid)
			<-exited
		}
	}
	// The leader has exited but is not reaped yet, so its pid (the session
	// and group id) cannot be reused: whatever it left behind in its session
	// is killed without risk of hitting an unrelated process.
	_ = unix.Kill(-pid, unix.SIGKILL)
	killSession(pid)
	return stopped, timedOut
}

// outcome is the exit code and error a run records.
func outcome(ps *os.ProcessState, stopped string, waitErr error) (code int, msg string) {
	code = ps.ExitCode() // -1 when killed by a signal
	if ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() && stopped == "" {
			msg = "killed by signal " + unix.SignalName(ws.Signal())
		}
	}
	if stopped != "" {
		msg = stopped
	}
	if errors.Is(waitErr, exec.ErrWaitDelay) {
		if msg != "" {
			msg += "; "
		}
		msg += "output left open by a process outside the hook's process group; stopped reading after the grace period"
	}
	return code, msg
}

// waitExited blocks until pid has exited without reaping it (WNOWAIT), so the
// process group id stays reserved until cmd.Wait.
func waitExited(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return
		}
	}
}

// workDir is the owner's home when it is a directory, else "/". The chdir
// itself happens in the child after it has dropped to the owner's uid.
func workDir(home string) string {
	if fi, err := os.Stat(home); err != nil || !fi.IsDir() {
		return "/"
	}
	return home
}

// capture keeps the first limit bytes of each of stdout and stderr and the last
// StderrTailBytes of stderr, and swallows the rest: writes never fail and
// never block, so the child cannot stall on a full pipe.
type capture struct {
	mu        sync.Mutex
	limit     int
	stdout    []byte
	stderr    []byte
	tail      []byte
	discarded int64
}

type captureWriter struct {
	c      *capture
	stderr bool
}

func (w captureWriter) Write(p []byte) (int, error) {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := len(c.stdout)
	if w.stderr {
		kept = len(c.stderr)
	}
	keep := min(max(c.limit-kept, 0), len(p))
	if w.stderr {
		c.stderr = append(c.stderr, p[:keep]...)
		c.tail = append(c.tail, p...)
		if len(c.tail) > 2*StderrTailBytes {
			c.tail = append(c.tail[:0], c.tail[len(c.tail)-StderrTailBytes:]...)
		}
	} else {
		c.stdout = append(c.stdout, p[:keep]...)
	}
	c.discarded += int64(len(p) - keep)
	return len(p), nil
}

func (c *capture) output() Output {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Output{Stdout: c.stdout, Stderr: c.stderr, Discarded: c.discarded}
}

// stderrTail is the end of stderr made safe for a log line and a terminal:
// valid UTF-8, no control characters but newline and tab.
func (c *capture) stderrTail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return sanitizeTail(c.tail, StderrTailBytes)
}

func sanitizeTail(b []byte, limit int) string {
	s := strings.Map(func(r rune) rune {
		if r != '\n' && r != '\t' && unicode.IsControl(r) { // C0, DEL, C1
			return ' '
		}
		return r
	}, strings.ToValidUTF8(string(b), "\uFFFD"))
	// The last limit bytes, less the rest of a rune the cut went through.
	return strings.ToValidUTF8(s[max(0, len(s)-limit):], "")
}
