package protocol

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestGiveMailboxCommandTakesHostileNames: run by a shell on a folder whose
// own name, and whose files' names, hold newlines, quotes, spaces and
// leading dashes, in a deep tree with a FIFO, a socket and a device node,
// the command gives every folder and file of one link and nothing else: not
// the special files, and nothing outside.
func TestGiveMailboxCommandTakesHostileNames(t *testing.T) {
	g := newGiveTree(t, "-rf 'x'\n\"y\" $(id)")
	base, box := g.base, g.box
	deep := box
	for i := range 40 {
		deep = filepath.Join(deep, fmt.Sprintf("-d%d\n", i))
	}
	g.mkdirs(deep)
	g.write(g.outside)
	var given []string
	for _, dir := range []string{box, deep} {
		for _, name := range []string{"-rf", "--help", "a\nb", "it's", " sp ", "*", "{}", ";", "\\"} {
			given = append(given, filepath.Join(dir, name))
		}
	}
	g.write(given...)
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

	g.give()
	for _, p := range given {
		if got := g.owner(p); got != g.uid {
			t.Errorf("%q belongs to uid %d, want %d", strings.TrimPrefix(p, base), got, g.uid)
		}
	}
	for _, p := range []string{fifo, sock, dev, g.outside, base} {
		if got := g.owner(p); got != 0 {
			t.Errorf("%q, not the mailbox's own, was given to uid %d", strings.TrimPrefix(p, base), got)
		}
	}
}

// TestGiveMailboxCommandTakesAFolderNamedLikeAFlag: a folder named, as the
// command is given it, with a leading dash is the folder, not a flag.
func TestGiveMailboxCommandTakesAFolderNamedLikeAFlag(t *testing.T) {
	g := newGiveTree(t, "--to=0")
	g.mkdirs(g.box)
	t.Chdir(g.base)
	g.box = filepath.Base(g.box)
	cmd := g.give()
	if got := g.owner(g.box); got != g.uid {
		t.Errorf("%s belongs to uid %d after %s, want %d", g.box, got, cmd, g.uid)
	}
}
