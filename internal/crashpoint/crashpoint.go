// Package crashpoint lets a test kill the real daemon at a named point of a
// write path, to check what a crash there leaves. The daemon calls Hit at
// each point; when the environment variable MAILCTL_CRASH_AT is NAME or
// NAME:N, the N-th (default the first) arrival at point NAME kills the
// process with SIGKILL, as kill -9 would, before it does anything more.
// Unset, Hit costs one atomic load.
package crashpoint

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Env names the environment variable that arms a crash point.
const Env = "MAILCTL_CRASH_AT"

var (
	once  sync.Once
	armed atomic.Bool
	name  string
	left  atomic.Int64
)

func load() {
	v := os.Getenv(Env)
	if v == "" {
		return
	}
	n := int64(1)
	if at, count, ok := strings.Cut(v, ":"); ok {
		v = at
		if k, err := strconv.ParseInt(count, 10, 64); err == nil && k > 0 {
			n = k
		}
	}
	name = v
	left.Store(n)
	armed.Store(true)
}

// Armed reports whether a crash point is armed, for code that does a step
// differently (in two parts) only so that a test can kill it in between.
func Armed() bool {
	once.Do(load)
	return armed.Load()
}

// Hit is a crash point named at: see the package comment.
func Hit(at string) {
	once.Do(load)
	if !armed.Load() || at != name {
		return
	}
	if left.Add(-1) == 0 {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way: do nothing more
	}
}
