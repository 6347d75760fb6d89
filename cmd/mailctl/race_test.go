//go:build race

package main

// raceBuild is true under -race; tests that only drive separately built
// binaries skip there (the race detector has nothing of theirs to watch).
func init() { raceBuild = true }
