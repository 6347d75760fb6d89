package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// TestAttachFilesAreBoundedTogether: each --attach file was read up to
// what a request may carry, so a list of large files (sparse here) was all
// in memory before the request was refused as too large, with words about
// frames rather than attachments. The files together are bounded now: the
// one that passes the bound is named, and nothing after it is read.
func TestAttachFilesAreBoundedTogether(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for _, name := range []string{"a.bin", "b.bin", "c.bin"} {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(protocol.MaxFrame/2 + 1); err != nil {
			t.Fatal(err)
		}
		f.Close()
		paths = append(paths, p)
	}
	atts, err := readAttachmentFiles(paths[:1])
	if err != nil || len(atts) != 1 {
		t.Fatalf("one file under the bound: %d read, %v", len(atts), err)
	}
	atts, err = readAttachmentFiles(paths)
	if err == nil || !strings.Contains(err.Error(), "b.bin") || !strings.Contains(err.Error(), "attachments") {
		t.Fatalf("files over the bound together: %d read, err %v; want an error naming b.bin", len(atts), err)
	}
}

// TestSendAsRootReadsNoFileThroughALink: root's `mailctl send` of a body,
// an HTML body or an attachment named in another user's folder refuses a
// path with a symbolic link on it and a hard link there to a file of root's
// (where fs.protected_hardlinks is 0): nothing of root's file reaches the
// daemon or the output. The user's own file is sent.
func TestSendAsRootReadsNoFileThroughALink(t *testing.T) {
	testusers.RequireRoot(t)
	uid := int(testusers.UnusedUID(t))
	_, _, sock := startDev(t, t.TempDir())
	env := []string{"MAILCTL_SOCKET=" + sock}
	base := t.TempDir()
	secret := filepath.Join(base, "shadow")
	if err := os.WriteFile(secret, []byte("ROOT-SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(base, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	own, soft, hard := filepath.Join(home, "report.txt"), filepath.Join(home, "soft.txt"), filepath.Join(home, "hard.txt")
	if err := os.WriteFile(own, []byte("the user's report"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, soft); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(secret, hard); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{home, own} {
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	send := []string{"send", "--from", "agent", "--to", "agent@mailctl.test", "--subject", "s", "--dry-run", "--json"}
	for _, path := range []string{soft, hard} {
		for _, flag := range []string{"--body-file", "--html-body-file", "--attach"} {
			out, e, code := mailctl(t, env, append(send, flag, path)...)
			if code == 0 || strings.Contains(out+e, "ROOT-SECRET") || !strings.Contains(e, "run as root") {
				t.Errorf("send %s %s as root: exit %d\n%s%s\nwant it refused, saying why", flag, path, code, out, e)
			}
		}
	}
	if out, e, code := mailctl(t, env, append(send, "--body-file", own, "--attach", own)...); code != 0 {
		t.Errorf("send of the user's own file as root: exit %d\n%s%s", code, out, e)
	}
}
