package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"time"
)

// startCPUProfile writes the process's CPU profile (pprof's format) to a
// new file in dir, named for the time it starts, until stop is called. It
// never opens a name that exists: a restart writes a file of its own
// rather than failing on the last one's, and no link another user planted
// in dir is followed.
func startCPUProfile(dir string, now time.Time) (path string, stop func() error, err error) {
	f, err := os.CreateTemp(dir, "serve-"+now.UTC().Format("20060102-150405")+"-*.pprof") // O_EXCL, 0600
	if err != nil {
		return "", nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", nil, fmt.Errorf("cpu profile: %w", err)
	}
	return f.Name(), func() error {
		pprof.StopCPUProfile()
		return errors.Join(f.Sync(), f.Close())
	}, nil
}
