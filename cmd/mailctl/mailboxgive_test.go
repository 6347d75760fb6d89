package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/internal/testusers"
)

// mailboxesFolder makes a folder of root's stamped as a daemon's mailboxes
// folder is, as the folders mailboxes give takes are in one.
func mailboxesFolder(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := formats.WriteStamp(filepath.Join(dir, formats.StampName), formats.KindMailboxes, formats.Mailboxes, "test"); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestMailboxesGiveGivesTheFolder: run as root, `mailctl mailboxes give`
// gives the folder and its mail to the owner --to names (a uid with no
// passwd entry, and a group), leaves a hard link to a file outside and a
// symbolic link as they are, and names them on standard error, inert.
func TestMailboxesGiveGivesTheFolder(t *testing.T) {
	testusers.RequireRoot(t)
	uid := testusers.UnusedUID(t)
	base := mailboxesFolder(t)
	box, secret := filepath.Join(base, "box"), filepath.Join(base, "secret")
	mail, hard := filepath.Join(box, "inbox", "m.eml"), filepath.Join(box, "inbox", "hard.eml")
	if err := os.MkdirAll(filepath.Dir(mail), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{mail, secret} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(secret, hard); err != nil {
		t.Fatal(err)
	}
	// The folder's owner names its files: a name that would act on a
	// terminal or forge a line is printed inert.
	if err := os.Symlink(secret, filepath.Join(box, hostile)); err != nil {
		t.Fatal(err)
	}
	out, e, code := mailctl(t, nil, "mailboxes", "give", "--to", fmt.Sprintf("%d:%d", uid, uid), box)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, e)
	}
	for _, p := range []string{box, filepath.Dir(mail), mail} {
		if st := lstatOf(t, p); st.Uid != uid || st.Gid != uid {
			t.Errorf("%s belongs to %d:%d, want %d:%d", p, st.Uid, st.Gid, uid, uid)
		}
	}
	if st := lstatOf(t, secret); st.Uid != 0 {
		t.Errorf("%s, outside the folder, was given to uid %d", secret, st.Uid)
	}
	if !strings.Contains(e, "2 left as they were") || !strings.Contains(e, hard) || !strings.Contains(e, "a file of 2 links") || !strings.Contains(e, "a symbolic link") {
		t.Errorf("standard error does not name the hard and symbolic links left as they were:\n%s", e)
	}
	if why := safeOutput(out + e); why != "" || forgedLines(out+e) > 0 {
		t.Errorf("a file's name reached the terminal as it is (%s):\n%q", why, out+e)
	}
}

// TestMailboxesGiveRefuses: a --to that names no owner, an unknown user or
// group, or the id that means "no change", is a usage error; a folder that
// is a symbolic link is refused; and anyone but root is refused, saying to
// use sudo; a folder not in a daemon's mailboxes folder (one holding its
// format stamp) is refused: the mailboxes folder itself, a folder beside
// it, /. None of them changes anything.
func TestMailboxesGiveRefuses(t *testing.T) {
	base := mailboxesFolder(t)
	box, link := filepath.Join(base, "box"), filepath.Join(base, "link")
	if err := os.Mkdir(box, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(box, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{box}, 2, "name the new owner"},
		{[]string{"--to", "", box}, 2, "name the new owner"},
		{[]string{"--to", "no-such-user-here", box}, 2, `no user "no-such-user-here" here`},
		{[]string{"--to", "0:no-such-group-here", box}, 2, `no group "no-such-group-here" here`},
		{[]string{"--to", "0:", box}, 2, "name the group after the colon"},
		{[]string{"--to", "4294967295", box}, 2, "not a number below 4294967295"},
		{[]string{"--to", "12x", box}, 2, "not a number"},
		{[]string{"--to", "0"}, 2, "give exactly one FOLDER"},
	} {
		out, e, code := mailctl(t, nil, append([]string{"mailboxes", "give"}, tc.args...)...)
		if code != tc.code || !strings.Contains(e, tc.want) {
			t.Errorf("mailboxes give %q: exit %d, want %d with %q:\n%s%s", tc.args, code, tc.code, tc.want, out, e)
		}
	}
	if os.Geteuid() == 0 {
		_, e, code := mailctl(t, nil, "mailboxes", "give", "--to", "0", link)
		if code != 1 || !strings.Contains(e, "is a symbolic link") {
			t.Errorf("a folder that is a symbolic link: exit %d:\n%s", code, e)
		}
		// Not in a mailboxes folder: the folder that holds the stamp, one
		// in a folder that holds none. (/ is asked of inMailboxes alone: a
		// give that let it through would walk the host.)
		uid := testusers.UnusedUID(t)
		beside := filepath.Join(t.TempDir(), "box")
		if err := os.Mkdir(beside, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, folder := range []string{base, beside, box + "/.."} {
			_, e, code := mailctl(t, nil, "mailboxes", "give", "--to", fmt.Sprint(uid), folder)
			if code != 1 || !strings.Contains(e, "is not a mailbox's folder") {
				t.Errorf("mailboxes give %s: exit %d, want 1 saying it is not a mailbox's folder:\n%s", folder, code, e)
			}
		}
		for _, p := range []string{base, box, beside} {
			if st := lstatOf(t, p); st.Uid != 0 {
				t.Errorf("a refused give gave %s to uid %d", p, st.Uid)
			}
		}
	}
	if err := inMailboxes("/"); err == nil || !strings.Contains(err.Error(), "is not a mailbox's folder") {
		t.Errorf("inMailboxes(/): %v, want it refused", err)
	}

	// Not root: the test's own uid, or, run as root, one with no passwd
	// entry running a copy of the test binary.
	cmd := exec.Command(os.Args[0], "mailboxes", "give", "--to", "0", box)
	if os.Geteuid() == 0 {
		uid := testusers.UnusedUID(t)
		cmd = testusers.As(exec.Command(testusers.Executable(t), "mailboxes", "give", "--to", "0", box), uid, uid)
	}
	cmd.Env = append(os.Environ(), "MAILCTL_AS_BINARY=1")
	var e bytes.Buffer
	cmd.Stderr = &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(e.String(), "takes root: run it with sudo") {
		t.Errorf("not root: %v:\n%s", err, e.String())
	}
	if st := lstatOf(t, box); st.Uid != uint32(os.Geteuid()) {
		t.Errorf("a refused give changed the folder's owner to %d", st.Uid)
	}
}

func lstatOf(t *testing.T, p string) *syscall.Stat_t {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t)
}

// FuzzParseOwner: --to is read whatever it holds without a panic, and what
// it accepts is an owner chown(2) takes (a uid below (uid_t)-1, which
// means "no change"), with a group exactly when a colon names one; a
// number is read as that number.
func FuzzParseOwner(f *testing.F) {
	for _, s := range []string{"0", "root", "root:root", "65534:65534", "4294967294", "4294967295", "1:", ":1", "", "12x", "01", "+1", "-1", "0:0:0", "nobody:nogroup", "1\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		uid, gid, err := parseOwner(s)
		if err != nil {
			return
		}
		owner, group, hasGroup := strings.Cut(s, ":")
		if uid < 0 || uid >= math.MaxUint32 {
			t.Fatalf("parseOwner(%q) gave uid %d", s, uid)
		}
		switch {
		case !hasGroup && gid != -1:
			t.Fatalf("parseOwner(%q) gave gid %d with no group named", s, gid)
		case hasGroup && (gid < 0 || gid >= math.MaxUint32):
			t.Fatalf("parseOwner(%q) gave gid %d for group %q", s, gid, group)
		}
		if n, err := strconv.ParseUint(owner, 10, 32); err == nil && uint64(uid) != n {
			t.Fatalf("parseOwner(%q) gave uid %d, not the number %d", s, uid, n)
		}
	})
}
