package protocol

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mailctl/mailctl/internal/testusers"
)

// TestGiveMailboxCommandTakesHostileNames: run by a shell on a folder whose
// own name, and whose files' names, hold newlines, quotes, spaces and
// leading dashes, in a deep tree with a FIFO, a socket and a device node,
// the command gives every folder and file of one link and nothing else: not
// the special files, and nothing outside.
func TestGiveMailboxCommandTakesHostileNames(t *testing.T) {
	testusers.RequireRoot(t)
	uid := testusers.UnusedUID(t)
	base := t.TempDir()
	box := filepath.Join(base, "-rf 'x'\n\"y\" $(id)")
	deep := box
	for i := range 40 {
		deep = filepath.Join(deep, fmt.Sprintf("-d%d\n", i))
	}
	if err := os.MkdirAll(deep, 0o700); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(base, "outside")
	if err := os.WriteFile(outside, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	var given []string
	for _, dir := range []string{box, deep} {
		for _, name := range []string{"-rf", "--help", "a\nb", "it's", " sp ", "*", "{}", ";", "\\"} {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			given = append(given, p)
		}
	}
	for d := deep; d != base; d = filepath.Dir(d) {
		given = append(given, d)
	}
	fifo, sock, dev := filepath.Join(deep, "-fifo"), filepath.Join(box, "sock"), filepath.Join(deep, "null")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(dev, syscall.S_IFCHR|0o600, 1<<8|3); err != nil {
		t.Fatal(err)
	}
	t.Chdir(box) // a socket's path must be short
	ln, err := net.Listen("unix", "sock")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	t.Chdir(base)

	cmd := GiveMailboxCommand(fmt.Sprintf("%d:%d", uid, uid), box)
	if out, err := exec.Command("sh", "-c", cmd).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", cmd, err, out)
	}
	owner := func(p string) uint32 {
		t.Helper()
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st.Sys().(*syscall.Stat_t).Uid
	}
	for _, p := range given {
		if got := owner(p); got != uid {
			t.Errorf("%q belongs to uid %d, want %d", strings.TrimPrefix(p, base), got, uid)
		}
	}
	for _, p := range []string{fifo, sock, dev, outside, base} {
		if got := owner(p); got != 0 {
			t.Errorf("%q, not the mailbox's own, was given to uid %d", strings.TrimPrefix(p, base), got)
		}
	}
}
