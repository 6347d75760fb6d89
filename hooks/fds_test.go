package hooks

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestHookGetsOnlyStdio leaves a secret open on fd 7 (or the next free
// number) without close-on-exec,
// as a careless starter of the daemon would, and runs a hook that lists its
// descriptors and reads fd 7: it has 0, 1 and 2 only.
func TestHookGetsOnlyStdio(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("ROOT-ONLY-SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(secret, unix.O_RDONLY, 0) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	// On a number nothing of this process uses, from 7 up.
	stray := 7
	for ; stray != fd; stray++ {
		if _, err := unix.FcntlInt(uintptr(stray), unix.F_GETFD, 0); err == unix.EBADF {
			break
		}
	}
	if stray != fd {
		if err := unix.Dup3(fd, stray, 0); err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
	}
	defer unix.Close(stray)
	owner, _ := hookOwner(t)
	r := testRunner(t)
	// No pipeline: while one runs, the shell itself holds the pipe.
	h := recvHook("fds", "/bin/sh", "-c", `ls /proc/$$/fd; cat <&`+strconv.Itoa(stray))
	run, out := r.RunOutput(context.Background(), h, owner, recvFacts, nil)
	if run.Error != "" {
		t.Fatalf("run = %+v", run)
	}
	if got := strings.Fields(string(out.Stdout)); strings.Join(got, " ") != "0 1 2" {
		t.Errorf("the hook holds descriptors %q, want 0 1 2 only", got)
	}
	if strings.Contains(string(out.Stdout)+string(out.Stderr), "ROOT-ONLY-SECRET") {
		t.Errorf("the hook read the daemon's fd %d", stray)
	}
}
