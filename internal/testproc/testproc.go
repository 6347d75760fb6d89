// Package testproc runs a long-lived process for a test, such as a daemon:
// its output gathered where the test can read it while it runs, and ended
// by SIGKILL or by SIGTERM with a grace period.
package testproc

import (
	"bytes"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Output is an io.Writer that several goroutines (a process's stdout and
// stderr, a logger) write to while a test reads it.
type Output struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

// String is what has been written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// Proc is one run of a process at a time; Start again after it ended runs
// it anew.
type Proc struct {
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts cmd and reaps it when it exits.
func (p *Proc) Start(cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	return nil
}

func (p *Proc) current() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

// Done is closed when the process started last has ended and been reaped
// (its cmd.ProcessState is then set). Proc is the one waiter of the
// process: a test that waits on its own uses Done, never cmd.Wait (two
// Waits at once can leave one blocked for ever on the result of the
// output's copy, which exec.Cmd hands out once).
func (p *Proc) Done() <-chan struct{} {
	_, done := p.current()
	return done
}

// State is how the process started last ended; nil while it runs.
func (p *Proc) State() *os.ProcessState {
	cmd, done := p.current()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return cmd.ProcessState
	default:
		return nil
	}
}

// Exited reports whether the process started last has ended.
func (p *Proc) Exited() bool {
	_, done := p.current()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// PID is the process id of the process started last.
func (p *Proc) PID() int {
	cmd, _ := p.current()
	return cmd.Process.Pid
}

// Kill9 sends SIGKILL and waits until the process is gone.
func (p *Proc) Kill9() {
	cmd, done := p.current()
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// Stop sends SIGTERM, then SIGKILL if the process has not ended within
// grace, and waits until it is gone. It does nothing if nothing was started
// or the process has ended already.
func (p *Proc) Stop(grace time.Duration) {
	cmd, done := p.current()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		cmd.Process.Kill()
		<-done
	}
}
