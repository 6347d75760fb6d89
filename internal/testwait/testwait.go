// Package testwait lets a test wait for a state, not for a time: it polls a
// condition until it holds and fails the test if it never does.
package testwait

import (
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Timeout is how long For waits before it fails the test: far longer than
// any state it waits for takes, even on a loaded CI machine.
const Timeout = 10 * time.Second

// For polls cond until it holds, and fails tb naming what it waited for when
// it has not held within Timeout.
func For(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Returns runs fn in a goroutine of its own and waits, as For does, for it to
// return: what a test of a call that must not block (on a FIFO, a lock, a
// peer that never answers) asserts. It fails tb naming what it waited for
// when fn has not returned within Timeout, and gives fn's result otherwise.
func Returns[T any](tb testing.TB, what string, fn func() T) T {
	tb.Helper()
	done := make(chan T, 1)
	go func() { done <- fn() }()
	var v T
	For(tb, what+" to return", func() bool {
		select {
		case v = <-done:
			return true
		default:
			return false
		}
	})
	return v
}

// Recv waits for a value from ch and gives it, or the zero value once ch is
// closed: a receive that would otherwise block until go test's own timeout
// when what the test waits for never happens. It fails tb naming what it
// waited for when nothing has come within Timeout.
func Recv[T any](tb testing.TB, what string, ch <-chan T) T {
	tb.Helper()
	return recv(tb, what, ch, Timeout)
}

func recv[T any](tb testing.TB, what string, ch <-chan T, bound time.Duration) T {
	tb.Helper()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		tb.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// FIFO makes a named pipe at path, and when the test ends opens it for
// writing once, so that a reader a failing test left blocked in open(2)
// is let go instead of holding the test binary.
func FIFO(tb testing.TB, path string) {
	tb.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			syscall.Close(fd)
		}
	})
}

// StopTimeout is how long Stopped waits for a server to end: far longer
// than a clean shutdown takes, even on a loaded CI machine.
const StopTimeout = 20 * time.Second

// Stopped waits for done, on which an in-process server's Run returns once
// its context was cancelled. A server that does not end is a defect (a
// goroutine that ignores its context, a hold never let go), not something
// to carry on past: when nothing has come within StopTimeout, Stopped fails
// tb naming what it waited for, with the stack of every goroutine, and
// returns so that the rest of the test's cleanup and the later tests run.
func Stopped[T any](tb testing.TB, what string, done <-chan T) {
	tb.Helper()
	StoppedWithin(tb, what, done, StopTimeout)
}

// StoppedWithin is Stopped waiting at most bound: for the tests of a
// helper that stops a server, which see what a server that never ends does
// to a test without waiting StopTimeout for it.
func StoppedWithin[T any](tb testing.TB, what string, done <-chan T, bound time.Duration) {
	tb.Helper()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		var stacks strings.Builder
		pprof.Lookup("goroutine").WriteTo(&stacks, 2)
		tb.Errorf("%s did not stop within %v; goroutines:\n%s", what, bound, stacks.String())
	}
}
