// Package testwait lets a test wait for a state, not for a time: it polls a
// condition until it holds and fails the test if it never does.
package testwait

import (
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
