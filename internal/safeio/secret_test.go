package safeio

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runFix runs the command a SecretError names (without sudo: the test is
// already the owner or root) and fails when it does not make the file pass.
func runFix(t *testing.T, e *SecretError) {
	t.Helper()
	_, cmd, ok := strings.Cut(e.Fix, "`")
	cmd, _, _ = strings.Cut(cmd, "`")
	if !ok || cmd == "" {
		t.Fatalf("fix %q names no command", e.Fix)
	}
	cmd = strings.ReplaceAll(cmd, "sudo ", "")
	if out, err := exec.Command("sh", "-c", cmd).CombinedOutput(); err != nil {
		t.Fatalf("the fix %q failed: %v\n%s", cmd, err, out)
	}
	if err := CheckSecret(e.Path); err != nil {
		t.Fatalf("after the fix %q: %v", cmd, err)
	}
}

func secretErr(t *testing.T, err error, want ...string) *SecretError {
	t.Helper()
	var se *SecretError
	if !errors.As(err, &se) {
		t.Fatalf("error %v, want a *SecretError", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	return se
}

func TestReadSecretReadsAPrivateFile(t *testing.T) {
	dir := t.TempDir()
	for _, mode := range []os.FileMode{0o600, 0o400} {
		p := filepath.Join(dir, "pw")
		os.Remove(p)
		if err := os.WriteFile(p, []byte("s3cret\n"), mode); err != nil {
			t.Fatal(err)
		}
		b, err := ReadSecret(p)
		if err != nil || string(b) != "s3cret\n" {
			t.Fatalf("mode %04o: %q, %v", mode, b, err)
		}
	}
}

// TestReadSecretRefusesWhatOthersCanRead: a secret readable (or writable)
// by the group or by others is refused with the chmod that fixes it, and
// the fix works.
func TestReadSecretRefusesWhatOthersCanRead(t *testing.T) {
	for mode, who := range map[os.FileMode]string{0o644: "group and others", 0o640: "its group", 0o604: "others", 0o620: "its group"} {
		p := filepath.Join(t.TempDir(), "key.pem")
		if err := os.WriteFile(p, []byte("secret"), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		b, err := ReadSecret(p)
		if b != nil {
			t.Errorf("mode %04o: read %q", mode, b)
		}
		se := secretErr(t, err, p, who, "chmod 600 "+p)
		runFix(t, se)
	}
}

// TestReadSecretRefusesASymlink: a link is not followed, even to a good
// file.
func TestReadSecretRefusesASymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real")
	if err := os.WriteFile(target, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "pw")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	b, err := ReadSecret(link)
	if b != nil {
		t.Fatalf("read %q through a link", b)
	}
	secretErr(t, err, link+" is a symbolic link", "point the config key at the file itself")
	if err := CheckSecret(link); err == nil {
		t.Fatal("CheckSecret passed a link")
	}
	if _, err := ReadSecret(target); err != nil {
		t.Fatalf("the file itself: %v", err)
	}
}

// TestReadSecretRefusesOddFiles: a FIFO (which would block a plain open),
// a directory and a file past the bound are refused without hanging.
func TestReadSecretRefusesOddFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := ReadSecret(fifo); done <- err }()
	select {
	case err := <-done:
		secretErr(t, err, "not a regular file")
	case <-time.After(10 * time.Second):
		t.Fatal("ReadSecret blocked on a FIFO")
	}
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o700)
	_, err := ReadSecret(sub)
	secretErr(t, err, "not a regular file")

	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, MaxSecretBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = ReadSecret(big)
	secretErr(t, err, "larger than")
	if _, err := ReadSecret(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v, want ErrNotExist", err)
	}
}

// TestReadSecretRefusesAnotherOwner: as root, a 0600 file owned by another
// user is refused (that user could read it or swap it), with the chown
// that fixes it.
func TestReadSecretRefusesAnotherOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another user")
	}
	p := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(p, []byte("s3cret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err := ReadSecret(p)
	se := secretErr(t, err, "belongs to uid 65534", "mode 0644", "chown root:root "+p, "chmod 600 "+p)
	runFix(t, se)
}
