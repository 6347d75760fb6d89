package safeio

import (
	"errors"
	"fmt"
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

// TestReadSecretFollowsATrustedLink: a link that only the secret's owner
// (or root) could have made, through directories only they can change, is
// followed, as certbot's live/privkey.pem -> ../../archive/... is.
func TestReadSecretFollowsATrustedLink(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"archive/x", "live/x"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "archive/x/privkey1.pem"), []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "live/x/privkey.pem")
	if err := os.Symlink("../../archive/x/privkey1.pem", link); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadSecret(link); err != nil || string(b) != "s3cret" {
		t.Fatalf("through a trusted link: %q %v", b, err)
	}
	if err := CheckSecret(link); err != nil {
		t.Fatalf("CheckSecret through a trusted link: %v", err)
	}
}

// TestReadSecretRefusesAnUntrustedLink: a link that someone else could
// have made or redirected is not followed: one in a directory others can
// write in, one whose file is in such a directory, one that belongs to
// another user, and a chain longer than the kernel would follow. The file
// it leads to is still read when named itself.
func TestReadSecretRefusesAnUntrustedLink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real")
	if err := os.WriteFile(target, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o777) // not sticky: anyone could replace a link here
	link := filepath.Join(open, "pw")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	refused := func(link string, want ...string) {
		t.Helper()
		b, err := ReadSecret(link)
		if b != nil {
			t.Fatalf("read %q through %s", b, link)
		}
		secretErr(t, err, append([]string{link + " is a"}, want...)...)
		if CheckSecret(link) == nil {
			t.Fatalf("CheckSecret passed %s", link)
		}
	}
	refused(link, "symbolic link whose way to its file passes "+open, "others can write in it", "point the config key at the file itself")

	// A trusted link to a file in a directory others can write in.
	inOpen := filepath.Join(open, "real")
	if err := os.WriteFile(inOpen, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	toOpen := filepath.Join(dir, "to-open")
	if err := os.Symlink(inOpen, toOpen); err != nil {
		t.Fatal(err)
	}
	refused(toOpen, "passes "+open)

	// A chain of more links than the kernel follows.
	prev := target
	for i := range maxLinks + 1 {
		next := filepath.Join(dir, fmt.Sprintf("chain%d", i))
		if err := os.Symlink(prev, next); err != nil {
			t.Fatal(err)
		}
		prev = next
	}
	refused(prev, fmt.Sprintf("chain of more than %d symbolic links", maxLinks))

	// A link that belongs to another user (root can make one).
	if os.Geteuid() == 0 {
		foreign := filepath.Join(dir, "foreign")
		if err := os.Symlink(target, foreign); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(foreign, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		refused(foreign, "belongs to uid 65534")
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

// TestReadSecretRefusesAWayOthersCanChange names a secret by a path that
// passes a directory another user owns, or one anyone may write in: that
// user can swap the directory below it for a link to one of root's (or
// hard-link another of root's files in under the secret's name), and the
// daemon would take root's other file for the secret. The path is refused
// as a link on it would be, before the swap as after; a sticky directory
// (as /tmp), where others cannot replace what is not theirs, is not one.
func TestReadSecretRefusesAWayOthersCanChange(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the rule is for root's secrets, and a directory of another uid's takes root to make")
	}
	dir := t.TempDir()
	rootOnly := filepath.Join(dir, "root-only")
	if err := os.Mkdir(rootOnly, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootOnly, "pw"), []byte("root's other secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(dir, "theirs")
	open := filepath.Join(dir, "open")
	sticky := filepath.Join(dir, "sticky")
	for _, d := range []string{theirs, open, sticky} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(open, 0o777) // not sticky: anyone may rename what is in it
	os.Chmod(sticky, 0o777|os.ModeSticky)
	group := filepath.Join(dir, "group")
	if err := os.Mkdir(group, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(group, 0o775) // its group's members may
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	ways := []struct{ dir, why string }{{open, "others can write in it"}, {group, "has mode 0775"}, {theirs, "belongs to uid 65534"}}
	for _, w := range ways {
		conf := filepath.Join(w.dir, "conf")
		if err := os.Mkdir(conf, 0o700); err != nil {
			t.Fatal(err)
		}
		pw := filepath.Join(conf, "pw")
		if err := os.WriteFile(pw, []byte("s3cret"), 0o600); err != nil {
			t.Fatal(err)
		}
		if b, err := ReadSecret(pw); b != nil || err == nil {
			t.Errorf("%s, passing %s: read %q, %v", pw, w.dir, b, err)
		} else {
			secretErr(t, err, w.dir, w.why)
		}
		// What whoever may change w.dir does: conf becomes a link to
		// root's directory.
		if err := os.Rename(conf, conf+".old"); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(rootOnly, conf); err != nil {
			t.Fatal(err)
		}
		if b, err := ReadSecret(pw); b != nil || err == nil {
			t.Errorf("%s, after %s/conf became a link to root's directory: read %q, %v", pw, w.dir, b, err)
		} else {
			secretErr(t, err, w.dir, w.why)
		}
		if CheckSecret(pw) == nil {
			t.Errorf("CheckSecret passed %s", pw)
		}
	}
	inSticky := filepath.Join(sticky, "conf")
	if err := os.Mkdir(inSticky, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(inSticky, "pw"), []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadSecret(filepath.Join(inSticky, "pw")); err != nil || string(b) != "s3cret" {
		t.Errorf("a secret below a sticky directory: %q, %v", b, err)
	}
}

// TestOthersCanChangeNamesTheWay: input the daemon trusts (its config, a
// certificate authority) is found through a way, and anyone who may change
// a directory, a link or the file on it could have the daemon trust their
// own. Each such place is named; a way only root and the running user
// control, or one through a sticky directory, is not.
func TestOthersCanChangeNamesTheWay(t *testing.T) {
	base := t.TempDir()
	mk := func(rel string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(base, rel)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	file := func(dir string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, "ca.pem")
		if err := os.WriteFile(p, []byte("pem"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	check := func(name, path, wantWhere string) {
		t.Helper()
		where, why, err := OthersCanChange(path)
		if err != nil || where != wantWhere {
			t.Errorf("%s: OthersCanChange(%s) = %q (%s), %v; want %q", name, path, where, why, err, wantWhere)
		}
	}
	check("a private way", file(mk("private", 0o755), 0o644), "")
	check("a sticky directory", file(mk("sticky", os.ModeSticky|0o777), 0o644), "")
	open := mk("open", 0o777)
	check("a directory anyone writes in", file(open, 0o644), open)
	group := mk("group", 0o775)
	check("a directory its group writes in", file(group, 0o644), group)
	writable := file(mk("writable", 0o755), 0o666)
	check("a file anyone writes", writable, writable)

	link := filepath.Join(mk("links", 0o755), "ca.pem")
	if err := os.Symlink(filepath.Join(open, "ca.pem"), link); err != nil {
		t.Fatal(err)
	}
	check("a link to a file in a directory anyone writes in", link, open)
	rel := filepath.Join(base, "links", "rel.pem")
	if err := os.Symlink("../private/ca.pem", rel); err != nil {
		t.Fatal(err)
	}
	check("a relative link along a private way", rel, "")
	if _, _, err := OthersCanChange(filepath.Join(base, "private", "none.pem")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file that does not exist: %v, want ErrNotExist", err)
	}

	if os.Geteuid() != 0 {
		t.Log("as root, this also checks a link and a directory that belong to another uid")
		return
	}
	theirs := mk("theirs", 0o755)
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	check("a directory another uid owns", file(theirs, 0o644), theirs)
	their := filepath.Join(base, "links", "theirs.pem")
	if err := os.Symlink("../private/ca.pem", their); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(their, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	check("a link another uid owns", their, their)
}
