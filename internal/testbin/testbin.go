// Package testbin helps end-to-end tests that build and run the real
// binaries of this module. Every package builds mailctl the same way and
// honours the same environment:
//
//	MAILCTL_TEST_BIN=PATH     use this prebuilt mailctl instead of building one
//	                          (e.g. compiled tests run by a user without Go)
//	MAILCTL_BUILDFLAGS="..."  extra `go build` flags for mailctl, e.g. "-race"
//	                          (builds are CGO_ENABLED=0 but for -race)
//	MAILCTL_COVERDIR=DIR      build mailctl with coverage; CoverEnv points
//	                          its processes' GOCOVERDIR at DIR
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// ModuleRoot returns the directory of the mailctl module's go.mod, where
// `go build ./cmd/mailctl` runs.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the mailctl module")
	}
	return filepath.Dir(mod), nil
}

var (
	mu     sync.Mutex
	binDir string
	built  = map[string]string{} // package -> binary
)

// Mailctl returns the mailctl binary under test: $MAILCTL_TEST_BIN, or
// ./cmd/mailctl built once per test process with $MAILCTL_BUILDFLAGS and,
// when $MAILCTL_COVERDIR is set, coverage of the whole module.
func Mailctl() (string, error) {
	if b := os.Getenv("MAILCTL_TEST_BIN"); b != "" {
		return b, nil
	}
	flags := strings.Fields(os.Getenv("MAILCTL_BUILDFLAGS"))
	if dir := os.Getenv("MAILCTL_COVERDIR"); dir != "" {
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return "", err
		}
		// Hooks run `mailctl mcp` as other users: let them write too.
		os.Chmod(dir, 0o777)
		flags = append(flags, "-cover", "-coverpkg=github.com/mailctl/mailctl/...")
	}
	return Build("./cmd/mailctl", flags...)
}

// CoverEnv is the environment a process running Mailctl's binary needs to
// record coverage: GOCOVERDIR when $MAILCTL_COVERDIR is set, else nothing.
func CoverEnv() []string {
	if dir := os.Getenv("MAILCTL_COVERDIR"); dir != "" {
		return []string{"GOCOVERDIR=" + dir}
	}
	return nil
}

// Build builds the main package pkg (relative to the module root) once per
// test process, into a directory other users can traverse (hooks run as
// throwaway users), and returns the binary's path.
func Build(pkg string, flags ...string) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if b, ok := built[pkg]; ok {
		return b, nil
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	if binDir == "" {
		if binDir, err = os.MkdirTemp("", "mailctl-testbin-"); err != nil {
			return "", err
		}
		os.Chmod(binDir, 0o755)
	}
	bin := filepath.Join(binDir, filepath.Base(pkg))
	cmd := exec.Command("go", append(append([]string{"build", "-o", bin}, flags...), pkg)...)
	cmd.Dir = root
	// The binary under test is the one we ship: static and pure Go. Only
	// the race detector needs cgo (a -race binary is never shipped).
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if slices.Contains(flags, "-race") {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %v\n%s", pkg, err, out)
	}
	built[pkg] = bin
	return bin, nil
}

// Cleanup removes what Build built; TestMain calls it after m.Run.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	binDir, built = "", map[string]string{}
}
