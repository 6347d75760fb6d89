package main

import (
	"bytes"
	"encoding/json"
	"net/smtp"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testmount"
	"github.com/mailctl/mailctl/internal/testproc"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

func TestInertRemovesEscapes(t *testing.T) {
	for _, c := range []struct{ in, line, body string }{
		{"plain", "plain", "plain"},
		{"two\nlines\tand a tab", "two lines and a tab", "two\nlines\tand a tab"},
		{"\x1b[31mred\x1b[0m", "red", "red"},
		{"title\x1b]0;pwned\x07 ok", "title ok", "title ok"},
		{"osc st\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\", "osc stlink", "osc stlink"},
		{"c1\u009b2Jcsi", "c1csi", "c1csi"},
		{"a\rb\nc\td\x00e\x7f", "a b c d e ", "ab\nc\td e "},
		{"bidi \u202egnp.exe", "bidi gnp.exe", "bidi gnp.exe"},
		{"bad \xff utf8", "bad \uFFFD utf8", "bad \uFFFD utf8"},
		{"dangling \x1b", "dangling ", "dangling "},
		{"charset \x1b(Bok", "charset ok", "charset ok"},
	} {
		if got := inert(c.in); got != c.line {
			t.Errorf("inert(%q) = %q, want %q", c.in, got, c.line)
		}
		if got := inertBody(c.in); got != c.body {
			t.Errorf("inertBody(%q) = %q, want %q", c.in, got, c.body)
		}
	}
}

func FuzzInert(f *testing.F) {
	for _, s := range []string{"\x1b[31mred", "\x1b]0;t\x07", "\u009b1m", "a\x1b", "\x1b[", "ok"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, out := range []string{inert(s), inertBody(s)} {
			for _, r := range out {
				if (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || (r >= 0x80 && r < 0xa0) || (r >= '\u202a' && r <= '\u202e') {
					t.Fatalf("%q left %U in %q", s, r, out)
				}
			}
		}
		if strings.ContainsRune(inert(s), '\n') {
			t.Fatalf("inert(%q) kept a line break", s)
		}
	})
}

// `mailctl mail` against a dev daemon: a hostile subject (ANSI escapes, a
// terminal title, a bidi override) is listed and read inert; --json carries
// it intact as the protocol's types; mark and move change what list shows;
// wait returns a message that arrives while it waits.
func TestMailCLIInbox(t *testing.T) {
	_, banner, sock := startDev(t, t.TempDir())
	env := []string{"MAILCTL_SOCKET=" + sock}
	smtpAddr := regexp.MustCompile(`127\.0\.0\.1:\d+`).FindString(banner.String())
	if smtpAddr == "" {
		t.Fatalf("no SMTP address in the banner:\n%s", banner.String())
	}
	deliver := func(subject, body string) {
		t.Helper()
		smtpSend(t, smtpAddr, "From: Mallory <mallory@elsewhere.test>\r\nTo: agent@mailctl.test\r\nSubject: "+subject+
			"\r\nDate: Mon, 02 Mar 2026 10:00:00 +0000\r\nMessage-ID: <"+time.Now().Format("150405.000000000")+"@elsewhere.test>\r\n\r\n"+body+"\r\n")
	}
	run := func(args ...string) string {
		t.Helper()
		out, e, code := mailctl(t, env, args...)
		if code != 0 {
			t.Fatalf("mailctl %s: exit %d: %s", strings.Join(args, " "), code, e)
		}
		return out
	}

	// Two mailboxes in dev (agent, and captured for outbound mail): the
	// CLI takes the one that is not captured.
	if out, e, code := mailctl(t, env, "mail", "list"); code != 0 || !strings.Contains(out, "no messages in agent/inbox") {
		t.Fatalf("list without --mailbox in dev: exit %d: %s%s", code, out, e)
	}
	// An empty search says so, and where it looked: a query naming
	// folders looks in them, not in the folder of the listing.
	if out := run("mail", "list", "--query", "in:anywhere nothingmatches"); !strings.Contains(out, "no matching messages in agent (the folders the query names)") {
		t.Fatalf("an empty search in:anywhere: %s", out)
	}
	if out := run("mail", "list", "--from", "nobody@nowhere.test"); !strings.Contains(out, "no matching messages in agent/inbox") {
		t.Fatalf("an empty filtered listing: %s", out)
	}
	run("mailboxes", "create", "second")
	if _, e, code := mailctl(t, env, "mail", "list"); code != 2 || !strings.Contains(e, "--mailbox") || !strings.Contains(e, "agent, captured, second") {
		t.Fatalf("list without --mailbox with two of one's own: exit %d: %s", code, e)
	}
	run("mailboxes", "delete", "second")

	hostile := "Invoice \x1b[2J\x1b]0;owned\x07\x1b[31mURGENT\x1b[0m \u202eexe.pdf"
	deliver(hostile, "Pay now \x1b[8mhidden\x1b[0m please")
	var list protocol.MessageList
	testwait.For(t, "the message in the inbox", func() bool {
		out, _, code := mailctl(t, env, "mail", "list", "--mailbox", "agent", "--json")
		return code == 0 && json.Unmarshal([]byte(out), &list) == nil && len(list.Messages) == 1
	})
	// The daemon drops control characters from headers as it stores them;
	// what is left (a bidi override) reaches --json as it is.
	if got := list.Messages[0].Subject; !strings.Contains(got, "URGENT") || !strings.Contains(got, "\u202e") {
		t.Errorf("--json subject: %q", got)
	}
	id := list.Messages[0].ID

	out := run("mail", "list", "--mailbox", "agent")
	if strings.ContainsAny(out, "\x1b\x07\u202e") {
		t.Fatalf("list printed escapes:\n%q", out)
	}
	if !strings.Contains(out, "Invoice") || !strings.Contains(out, "URGENT") || !strings.Contains(out, id) || !strings.Contains(out, "*") {
		t.Errorf("list lacks the message, its id or the unread mark:\n%s", out)
	}
	out = run("mail", "read", id, "--mailbox", "agent")
	if strings.ContainsAny(out, "\x1b\x07\u202e") {
		t.Fatalf("read printed escapes:\n%q", out)
	}
	for _, want := range []string{"From:", "Mallory <mallory@elsewhere.test>", "Subject:", "Pay now", "hidden", "State:", "unread"} {
		if !strings.Contains(out, want) {
			t.Errorf("read lacks %q:\n%s", want, out)
		}
	}
	// --json round trip: the protocol's Message, decoded as such.
	var m protocol.Message
	if err := json.Unmarshal([]byte(run("mail", "read", id, "--mailbox", "agent", "--json")), &m); err != nil || m.ID != id || m.Subject != list.Messages[0].Subject || m.Read {
		t.Fatalf("read --json: %v %+v", err, m)
	}
	if !strings.Contains(m.Body, "\x1b[8mhidden") {
		t.Errorf("--json does not carry the body as stored (scripts get the data, the terminal gets it inert): %q", m.Body)
	}

	if out := run("mail", "read", id, "--mailbox", "agent", "--mark-read"); !regexp.MustCompile(`(?m)^State:\s+read$`).MatchString(out) {
		t.Errorf("read --mark-read:\n%s", out)
	}
	if unread := run("mail", "list", "--mailbox", "agent", "--unread"); !strings.Contains(unread, "no matching messages") {
		t.Errorf("--unread after read --mark-read:\n%s", unread)
	}
	run("mail", "mark", id, "--unread", "--mailbox", "agent")
	if unread := run("mail", "list", "--mailbox", "agent", "--unread"); !strings.Contains(unread, id) {
		t.Errorf("--unread after mark --unread:\n%s", unread)
	}
	run("mail", "mark", id, "--read", "--mailbox", "agent")
	if unread := run("mail", "list", "--mailbox", "agent", "--unread"); !strings.Contains(unread, "no matching messages") {
		t.Errorf("--unread after mark --read:\n%s", unread)
	}
	if _, e, code := mailctl(t, env, "mail", "mark", id, "--mailbox", "agent"); code != 2 || !strings.Contains(e, "--read") {
		t.Errorf("mark without --read/--unread: exit %d: %s", code, e)
	}
	var moved struct {
		Moved []struct{ ID, Folder string }
	}
	if err := json.Unmarshal([]byte(run("mail", "move", id, "--to", "archive", "--mailbox", "agent", "--json")), &moved); err != nil ||
		len(moved.Moved) != 1 || moved.Moved[0].Folder != "archive" {
		t.Fatalf("move --json: %v %+v", err, moved)
	}
	if out := run("mail", "list", "--mailbox", "agent", "--folder", "archive"); !strings.Contains(out, id) {
		t.Errorf("archive after move:\n%s", out)
	}
	if _, e, code := mailctl(t, env, "mail", "read", id, "--mailbox", "agent"); code != 3 || !strings.Contains(e, "not_found") {
		t.Errorf("read of a moved message in the inbox: exit %d: %s", code, e)
	}
	// junk: listed with --folder junk only, readable there, and taken back out.
	run("mail", "move", id, "--folder", "archive", "--to", "junk", "--mailbox", "agent")
	if out := run("mail", "list", "--mailbox", "agent", "--folder", "junk"); !strings.Contains(out, id) {
		t.Errorf("junk after move:\n%s", out)
	}
	if out := run("mail", "read", id, "--mailbox", "agent", "--folder", "junk"); !strings.Contains(out, "Pay now") {
		t.Errorf("read in junk:\n%s", out)
	}
	run("mail", "move", id, "--folder", "junk", "--to", "archive", "--mailbox", "agent")
	if out := run("mail", "list", "--mailbox", "agent", "--folder", "junk"); strings.Contains(out, id) {
		t.Errorf("junk after moving out:\n%s", out)
	}

	// wait: nothing arrives within the timeout (exit 75), then a message
	// that does not match the filter is passed over for one that does.
	if _, e, code := mailctl(t, env, "mail", "wait", "--mailbox", "agent", "--timeout", "300ms"); code != 75 || !strings.Contains(e, "timeout") {
		t.Fatalf("wait with nothing arriving: exit %d: %s", code, e)
	}
	cmd := exec.Command(os.Args[0], "mail", "wait", "--mailbox", "agent", "--subject", "code", "--timeout", "30s", "--json")
	cmd.Env = append(append(os.Environ(), "MAILCTL_AS_BINARY=1"), env...)
	var stdout, stderr testproc.Output
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	var wait testproc.Proc
	if err := wait.Start(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wait.Kill9)
	testwait.For(t, "mail wait to start watching", func() bool { return strings.Contains(stderr.String(), "waiting for new mail in agent") })
	deliver("newsletter", "not this one")
	deliver("Your code 123456", "code inside")
	testwait.For(t, "mail wait to return the matching message", wait.Exited)
	if st := wait.State(); !st.Success() {
		t.Fatalf("wait: %v: %s", st, stderr.String())
	}
	var got protocol.Message
	if err := json.Unmarshal([]byte(stdout.String()), &got); err != nil || !strings.Contains(got.Subject, "code") {
		t.Fatalf("wait --json: %v\n%s", err, stdout.String())
	}

	// A wait on a mailbox deleted meanwhile ends at once, saying so.
	run("mailboxes", "create", "brief")
	cmd = exec.Command(os.Args[0], "mail", "wait", "--mailbox", "brief", "--timeout", "30s")
	cmd.Env = append(append(os.Environ(), "MAILCTL_AS_BINARY=1"), env...)
	var gone testproc.Output
	cmd.Stderr = &gone
	var waitGone testproc.Proc
	if err := waitGone.Start(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(waitGone.Kill9)
	testwait.For(t, "mail wait to start watching brief", func() bool { return strings.Contains(gone.String(), "waiting for new mail in brief") })
	run("mailboxes", "delete", "brief", "--force", "--yes")
	testwait.For(t, "mail wait on a deleted mailbox to end", waitGone.Exited)
	if st := waitGone.State(); st.ExitCode() != 3 || !strings.Contains(gone.String(), "was deleted") {
		t.Errorf("wait on a deleted mailbox: %v: %s", st, gone.String())
	}
}

// smtpSend hands msg to the dev SMTP server at addr, for agent@mailctl.test.
func smtpSend(t *testing.T, addr, msg string) {
	t.Helper()
	// Plain SMTP: the dev server's certificate is its own.
	c, err := smtp.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Mail("mallory@elsewhere.test"); err != nil {
		t.Fatal(err)
	}
	if err := c.Rcpt("agent@mailctl.test"); err != nil {
		t.Fatal(err)
	}
	w, err := c.Data()
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(msg))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	c.Quit()
}

// A message as it came: without a Date header, with a byte that is not
// UTF-8. `mail list` and `mail read` show when it was received and say so;
// `mail read --raw` prints the stored .eml, byte for byte and nothing else.
func TestMailCLIRawAndReceivedDate(t *testing.T) {
	_, banner, sock := startDev(t, t.TempDir())
	env := []string{"MAILCTL_SOCKET=" + sock}
	smtpAddr := regexp.MustCompile(`127\.0\.0\.1:\d+`).FindString(banner.String())
	smtpSend(t, smtpAddr, "From: <old@elsewhere.test>\r\nTo: agent@mailctl.test\r\nSubject: no date\r\nMessage-ID: <nodate@elsewhere.test>\r\n\r\ncaf\xe9 au lait\r\n")
	var list protocol.MessageList
	testwait.For(t, "the message in the inbox", func() bool {
		out, _, code := mailctl(t, env, "mail", "list", "--json")
		return code == 0 && json.Unmarshal([]byte(out), &list) == nil && len(list.Messages) == 1
	})
	s := list.Messages[0]
	if s.DateSource != protocol.DateReceived || s.Date.Year() < 2000 {
		t.Fatalf("--json row: date %v (%q)", s.Date, s.DateSource)
	}
	out, _, _ := mailctl(t, env, "mail", "list")
	if !strings.Contains(out, localDate(s.Date)+" (received)") {
		t.Errorf("list does not say the date is when it was received:\n%s", out)
	}
	out, _, _ = mailctl(t, env, "mail", "read", s.ID)
	if !regexp.MustCompile(`(?m)^Received:\s+`+regexp.QuoteMeta(localDate(s.Date))+` \(the message has no Date header\)$`).MatchString(out) || strings.Contains(out, "0001-") {
		t.Errorf("read does not say when it was received:\n%s", out)
	}
	var m protocol.Message
	if err := json.Unmarshal([]byte(must(mailctl(t, env, "mail", "read", s.ID, "--json"))), &m); err != nil || m.RawPath == "" {
		t.Fatalf("read --json: %v %+v", err, m)
	}
	want, err := os.ReadFile(m.RawPath)
	if err != nil {
		t.Fatal(err)
	}
	raw, e, code := mailctl(t, env, "mail", "read", s.ID, "--raw")
	if code != 0 || raw != string(want) {
		t.Fatalf("read --raw: exit %d %s\nprinted %d bytes, the .eml has %d; first difference at %d", code, e, len(raw), len(want), firstDiff(raw, string(want)))
	}
	if !strings.Contains(raw, "caf\xe9 au lait") || !strings.HasPrefix(raw, "Authentication-Results:") {
		t.Errorf("--raw is not the message as stored:\n%q", raw[:min(len(raw), 300)])
	}
	if _, e, code := mailctl(t, env, "mail", "read", s.ID, "--raw", "--offset", "5"); code != 2 || !strings.Contains(e, "drop --offset") {
		t.Errorf("--raw --offset: exit %d %s", code, e)
	}
}

func firstDiff(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestCopyRawAsRootReadsOnlyTheMailboxsOwnFile: root reads the raw file of
// a message in another user's mailbox. Once the daemon has named the path,
// the owner may put in place of the .eml a hard link to a root file (where
// fs.protected_hardlinks is 0: the test, as root, makes it), or in place of
// the folder a link to another mailbox's folder holding a file of that
// name. Root's read prints neither; it prints the mailbox's own file.
func TestCopyRawAsRootReadsOnlyTheMailboxsOwnFile(t *testing.T) {
	testusers.RequireRoot(t)
	uid := int(testusers.UnusedUID(t))
	base := t.TempDir()
	mkdir := func(p string, owner int) {
		t.Helper()
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, owner, owner); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, data string, owner int) {
		t.Helper()
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, owner, owner); err != nil {
			t.Fatal(err)
		}
	}
	box, other := filepath.Join(base, "box"), filepath.Join(base, "other")
	for _, d := range []string{box, filepath.Join(box, "inbox"), filepath.Join(box, "trash"), other, filepath.Join(other, "inbox")} {
		mkdir(d, uid)
	}
	secret := filepath.Join(base, "shadow")
	write(secret, "ROOT-SECRET", 0)
	write(filepath.Join(other, "inbox", "m.eml"), "OTHER-MAILBOX", uid)
	own := filepath.Join(box, "inbox", "own.eml")
	write(own, "Subject: s\r\n\r\nb\r\n", uid)
	if err := os.Link(secret, filepath.Join(box, "inbox", "m.eml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(other, "inbox"), filepath.Join(box, "junk")); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(other, "inbox", "j.eml"), "OTHER-MAILBOX", uid)
	for _, path := range []string{filepath.Join(box, "inbox", "m.eml"), filepath.Join(box, "junk", "j.eml")} {
		var out strings.Builder
		if err := copyRaw(&out, path); err == nil || out.Len() != 0 {
			t.Errorf("copyRaw of %s as root: %v, printed %q; want it refused, nothing printed", path, err, out.String())
		}
	}
	var out strings.Builder
	if err := copyRaw(&out, own); err != nil || out.String() != "Subject: s\r\n\r\nb\r\n" {
		t.Errorf("copyRaw of the mailbox's own file: %v, printed %q", err, out.String())
	}
}

// TestCopyRawRefusesOddFiles: the raw path the daemon names is read with
// the caller's rights; a FIFO planted there is refused without waiting for
// a writer, and a link is refused rather than followed to a file of the
// caller's that the daemon never named.
func TestCopyRawRefusesOddFiles(t *testing.T) {
	dir := t.TempDir()
	eml := filepath.Join(dir, "m.eml")
	os.WriteFile(eml, []byte("Subject: s\r\n\r\nb\r\n"), 0o600)
	fifo, link := filepath.Join(dir, "fifo.eml"), filepath.Join(dir, "link.eml")
	testwait.FIFO(t, fifo)
	if err := os.Symlink(eml, link); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, link} {
		var out strings.Builder
		err := testwait.Returns(t, "copyRaw of "+filepath.Base(path), func() error { return copyRaw(&out, path) })
		if err == nil || out.Len() != 0 {
			t.Errorf("copyRaw of %s: %v, printed %q; want it refused, nothing printed", path, err, out.String())
		}
	}
	var out strings.Builder
	if err := copyRaw(&out, eml); err != nil || out.String() != "Subject: s\r\n\r\nb\r\n" {
		t.Errorf("copyRaw of a regular file: %v, printed %q", err, out.String())
	}
}

// TestRawOnATerminalPrintsInert: a sender's escape sequences in a message
// reach whoever runs `mail read --raw` on a terminal (root, reading a
// user's mail) as plain text, never as a title, a clipboard write or a
// cleared screen; piped, --raw stays byte for byte
// (TestMailCLIRawAndReceivedDate).
func TestRawOnATerminalPrintsInert(t *testing.T) {
	_, banner, sock := startDev(t, t.TempDir())
	env := []string{"MAILCTL_SOCKET=" + sock}
	smtpAddr := regexp.MustCompile(`127\.0\.0\.1:\d+`).FindString(banner.String())
	smtpSend(t, smtpAddr, "From: <x@elsewhere.test>\r\nTo: agent@mailctl.test\r\nSubject: hi\r\nMessage-ID: <esc@elsewhere.test>\r\n\r\n"+
		"see \x1b]0;TITLE\x07\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J\u009b31mevil\u202e here\r\n")
	var list protocol.MessageList
	testwait.For(t, "the message in the inbox", func() bool {
		out, _, code := mailctl(t, env, "mail", "list", "--json")
		return code == 0 && json.Unmarshal([]byte(out), &list) == nil && len(list.Messages) == 1
	})
	pm, ps, err := openPTY()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer pm.Close()
	cmd := exec.Command(os.Args[0], "mail", "read", list.Messages[0].ID, "--raw")
	cmd.Env = append(append(os.Environ(), "MAILCTL_AS_BINARY=1"), env...)
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = ps, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ps.Close()
	var got bytes.Buffer
	done := make(chan struct{})
	go func() { defer close(done); got.ReadFrom(pm) }() // ends with EIO once the command has gone
	if err := cmd.Wait(); err != nil {
		t.Fatalf("mail read --raw on a terminal: %v\n%s", err, errb.String())
	}
	<-done
	out := strings.ReplaceAll(got.String(), "\r", "") // the terminal's own CR before each LF
	if why := safeOutput(out); why != "" || !strings.Contains(out, "evil") || !strings.Contains(out, "Message-ID: <esc@elsewhere.test>") {
		t.Errorf("mail read --raw on a terminal printed %s:\n%q", why, out)
	}
}

// TestCopyRawNeverAsksAMount: root's `mail read --raw` of a file the
// daemon names in a mailbox never asks a file system mounted in the
// mailbox (an owner's FUSE file system, where /etc/fuse.conf lets it be
// seen by root, or a bind mount): a folder, a file or the mailbox itself
// that is a mount point is refused, and one whose daemon never answers
// holds nothing up.
func TestCopyRawNeverAsksAMount(t *testing.T) {
	if !testmount.InNamespace(t) {
		return
	}
	store := t.TempDir()
	mk := func(p, data string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if data != "" {
			if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	mb := filepath.Join(store, "agent")
	own := mk(filepath.Join(mb, "inbox", "own.eml"), "Subject: s\r\n\r\nb\r\n")
	bound := mk(filepath.Join(mb, "inbox", "bound.eml"), "placeholder")
	testmount.Bind(t, mk(filepath.Join(t.TempDir(), "other.eml"), "OTHER FILE SYSTEM"), bound)
	mk(filepath.Join(mb, "archive", "x"), "")
	testmount.Tmpfs(t, filepath.Join(mb, "archive"))
	onTmpfs := mk(filepath.Join(mb, "archive", "t.eml"), "ON A TMPFS")
	mk(filepath.Join(mb, "junk", "x"), "")
	testmount.DeadFUSE(t, filepath.Join(mb, "junk"), false)
	deadFile := mk(filepath.Join(mb, "sent", "dead.eml"), "placeholder")
	testmount.DeadFUSE(t, deadFile, true)
	deadBox := filepath.Join(store, "fused")
	mk(filepath.Join(deadBox, "inbox", "x"), "")
	testmount.DeadFUSE(t, deadBox, false)

	for _, path := range []string{bound, onTmpfs, filepath.Join(mb, "junk", "j.eml"), deadFile, filepath.Join(deadBox, "inbox", "m.eml")} {
		var out strings.Builder
		err := testwait.Returns(t, "copyRaw of "+path, func() error { return copyRaw(&out, path) })
		if err == nil || out.Len() != 0 {
			t.Errorf("copyRaw of %s: %v, printed %q; want it refused, nothing printed", path, err, out.String())
		}
	}
	var out strings.Builder
	if err := copyRaw(&out, own); err != nil || out.String() != "Subject: s\r\n\r\nb\r\n" {
		t.Errorf("copyRaw of the mailbox's own file: %v, printed %q", err, out.String())
	}
}

// TestCopyRawRefusesAMailboxThatIsALink: the mailbox's own folder being a
// symbolic link (to another mailbox) is refused like a link below it, and
// the path the daemon names is read the same with a doubled slash or a
// "." in it.
func TestCopyRawRefusesAMailboxThatIsALink(t *testing.T) {
	store := t.TempDir()
	real := filepath.Join(store, "real")
	if err := os.MkdirAll(filepath.Join(real, "inbox"), 0o700); err != nil {
		t.Fatal(err)
	}
	const mail = "Subject: s\r\n\r\nb\r\n"
	if err := os.WriteFile(filepath.Join(real, "inbox", "m.eml"), []byte(mail), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(store, "linked")); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := copyRaw(&out, filepath.Join(store, "linked", "inbox", "m.eml")); err == nil || out.Len() != 0 {
		t.Errorf("copyRaw through a mailbox that is a link: %v, printed %q; want it refused, nothing printed", err, out.String())
	}
	for _, path := range []string{store + "//real/inbox/m.eml", store + "/./real/inbox//m.eml"} {
		var out strings.Builder
		if err := copyRaw(&out, path); err != nil || out.String() != mail {
			t.Errorf("copyRaw of %s: %v, printed %q", path, err, out.String())
		}
	}
}
