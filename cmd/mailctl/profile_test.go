package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testproc"
)

// pprofText is the decompressed profile at path (pprof's gzipped protocol
// buffer, whose string table is plain text).
func pprofText(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s is not a pprof profile: %v", path, err)
	}
	b, err := io.ReadAll(z)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

// TestServeCPUProfile runs `mailctl serve --cpu-profile DIR` as the docs
// give it, twice (a restart): each run writes a file of its own, named on
// stderr, that holds a CPU profile once SIGTERM has stopped the daemon.
func TestServeCPUProfile(t *testing.T) {
	dir, err := os.MkdirTemp("", "mcprof") // a short path for the socket
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfgPath := serveConfig(t, dir, freePort(t))
	profDir := filepath.Join(dir, "profiles")
	if err := os.Mkdir(profDir, 0o700); err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`the CPU profile goes to (\S+) when the daemon stops`)
	var files []string
	for run := 1; run <= 2; run++ {
		serve := exec.Command(os.Args[0], "serve", "--config", cfgPath, "--cpu-profile", profDir)
		serve.Env = append(os.Environ(), "MAILCTL_AS_BINARY=1")
		var logs testproc.Output
		serve.Stderr = &logs
		if err := serve.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { serve.Process.Kill() })
		waitLog(t, &logs, "mailctl daemon ready", 1)
		m := named.FindStringSubmatch(logs.String())
		if m == nil || filepath.Dir(m[1]) != profDir {
			t.Fatalf("run %d: stderr names no profile in %s:\n%s", run, profDir, logs.String())
		}
		if fi, err := os.Lstat(m[1]); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Fatalf("run %d: the profile while the daemon runs: %v, %v; want a 0600 file", run, fi, err)
		}
		serve.Process.Signal(syscall.SIGTERM)
		if err := serve.Wait(); err != nil {
			t.Fatalf("run %d: serve: %v\n%s", run, err, logs.String())
		}
		b := pprofText(t, m[1])
		for _, want := range []string{"samples", "cpu", "nanoseconds"} {
			if !bytes.Contains(b, []byte(want)) {
				t.Errorf("run %d: the profile has no %q: not a CPU profile", run, want)
			}
		}
		files = append(files, m[1])
	}
	if files[0] == files[1] {
		t.Errorf("both runs wrote %s", files[0])
	}
	if got, _ := filepath.Glob(filepath.Join(profDir, "*")); len(got) != 2 {
		t.Errorf("the profile directory holds %q, want the two profiles", got)
	}
}

// TestServeCPUProfileNeedsADirectory: a --cpu-profile that is no directory
// the daemon can write in stops it before it starts, with the reason.
func TestServeCPUProfileNeedsADirectory(t *testing.T) {
	dir := t.TempDir()
	cfgPath := serveConfig(t, dir, freePort(t))
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, filepath.Join(dir, "missing")} {
		// A daemon that went on would run until killed: the deadline
		// ends it, and the test fails on its exit.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, os.Args[0], "serve", "--config", cfgPath, "--cpu-profile", p)
		cmd.Env = append(os.Environ(), "MAILCTL_AS_BINARY=1")
		var e bytes.Buffer
		cmd.Stderr = &e
		err := cmd.Run()
		cancel()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(e.String(), "cpu profile") {
			t.Errorf("--cpu-profile %s: %v, stderr %q; want exit 1 and the profile named", filepath.Base(p), err, e.String())
		}
	}
	if b, _ := os.ReadFile(file); string(b) != "keep\n" {
		t.Errorf("the file now holds %q", b)
	}
	for _, p := range []string{filepath.Join(dir, "missing"), filepath.Join(dir, "mailctl.sock"), filepath.Join(dir, "state")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s exists: the daemon went on", filepath.Base(p))
		}
	}
}

// TestDefaultPGOIsTheDaemonsProfile: the profile `go build` optimizes
// mailctl for (bench/pgo.sh) is a CPU profile of the daemon's inbound and
// outbound paths, the work it is there to speed up.
func TestDefaultPGOIsTheDaemonsProfile(t *testing.T) {
	b := pprofText(t, "default.pgo")
	for _, want := range []string{
		"cpu", "nanoseconds",
		"github.com/emersion/go-smtp.(*dataReader).Read",                    // DATA, inbound
		"github.com/mailctl/mailctl/daemon/ingest.",                         // checks and parsing
		"modernc.org/sqlite/lib._sqlite3Fts5",                               // the full-text index
		"github.com/mailctl/mailctl/daemon/outbound/queue.(*Queue).Enqueue", // sending
		"github.com/emersion/go-msgauth/dkim.",                              // signing and verifying
	} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("default.pgo has no samples in %q: remake it with sudo bench/pgo.sh", want)
		}
	}
}
