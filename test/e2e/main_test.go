// Package e2e drives the real mailctl binary with the clients a user would
// point at it (swaks, Python's smtplib, msmtp, Postfix) and checks what lands
// on disk: the Markdown frontmatter, attachments, and the raw copy byte for
// byte. The binary is built once in TestMain.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/freeport"
	"github.com/mailctl/mailctl/internal/testbin"
	"github.com/mailctl/mailctl/internal/testcert"
	"github.com/mailctl/mailctl/internal/testproc"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/store"
)

// Every test uses the same names so that failures read alike.
const (
	domain   = "e2e.test"
	hostname = "mx.e2e.test"
	mailbox  = "agent"
	rcpt     = mailbox + "@" + domain
)

// bin is the mailctl binary under test.
var bin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	defer testbin.Cleanup()
	var err error
	if bin, err = testbin.Mailctl(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// needTool skips the test when an external program is missing.
func needTool(t *testing.T, path, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(path)
	if err != nil {
		t.Skipf("%s not installed (apt install %s)", path, pkg)
	}
	return p
}

// options shape one daemon's config.
type options struct {
	Resolver       string   // [dns] resolver; empty means a port nothing answers on
	TrustedSenders []string // [trust] trusted_senders
	TrustExtra     string   // more [trust] lines, verbatim
	LMTP           bool     // also serve LMTP on dir/lmtp.sock
	MaxConns       int      // [smtp] max_connections (0: default)
	MaxConnsPerIP  int      // [smtp] max_connections_per_ip (0: default)
	MaxBytes       int      // [smtp] max_message_bytes (0: default)
	SMTPExtra      string   // more [smtp] lines, verbatim
	Extra          string   // more TOML at the end (e.g. [[hooks]]), verbatim; DIR is replaced by the daemon's folder
}

// daemon is one running (or stopped) `mailctl serve`.
type daemon struct {
	t        *testing.T
	dir      string
	cfgPath  string
	SMTPAddr string
	LMTPSock string
	state    string
	uid, gid int

	proc testproc.Proc
	logs *testproc.Output
}

// owner picks the mailbox owner: a throwaway user as root (the daemon then
// really changes ownership), the current user otherwise.
func owner(t *testing.T) (name string, uid, gid int) {
	t.Helper()
	if os.Geteuid() == 0 {
		if _, err := exec.LookPath("useradd"); err == nil {
			u := testusers.Create(t, "mce2e")
			return u.Name, int(u.UID), int(u.GID)
		}
	}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return u.Username, uid, gid
}

func quoteList(v []string) string {
	q := make([]string, len(v))
	for i, s := range v {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// startDaemon writes a config for o and starts `mailctl serve` with it. The
// daemon is stopped when the test ends.
func startDaemon(t *testing.T, o options) *daemon {
	t.Helper()
	// Shared (0755) so that Postfix's lmtp client, running as postfix, can
	// reach the socket.
	dir := testusers.SharedDir(t)
	if os.Geteuid() != 0 {
		dir = t.TempDir()
	}
	ownerName, uid, gid := owner(t)
	d := &daemon{t: t, dir: dir, cfgPath: filepath.Join(dir, "config.toml"), SMTPAddr: freeport.TCP(t),
		state: filepath.Join(dir, "state"), uid: uid, gid: gid, logs: &testproc.Output{}}
	cert, key := testcert.Files(t, filepath.Join(dir, "tls"), hostname, "127.0.0.1")
	if o.Resolver == "" {
		o.Resolver = freeport.TCP(t) // nothing answers: lookups fail fast or time out
	}
	var b strings.Builder
	fmt.Fprintf(&b, "hostname = %q\ndomains = [%q]\n\n[paths]\nstate_dir = %q\nsocket = %q\ndkim_dir = %q\n\n",
		hostname, domain, d.state, filepath.Join(dir, "mailctl.sock"), filepath.Join(dir, "dkim"))
	fmt.Fprintf(&b, "[smtp]\nlisten = [%q]\ntls_cert = %q\ntls_key = %q\n", d.SMTPAddr, cert, key)
	if o.LMTP {
		d.LMTPSock = filepath.Join(dir, "lmtp.sock")
		fmt.Fprintf(&b, "lmtp_socket = %q\n", d.LMTPSock)
	}
	if o.MaxConns > 0 {
		fmt.Fprintf(&b, "max_connections = %d\n", o.MaxConns)
	}
	if o.MaxBytes > 0 {
		fmt.Fprintf(&b, "max_message_bytes = %d\n", o.MaxBytes)
	}
	b.WriteString(o.SMTPExtra)
	if o.MaxConnsPerIP > 0 {
		fmt.Fprintf(&b, "max_connections_per_ip = %d\n", o.MaxConnsPerIP)
	}
	fmt.Fprintf(&b, "\n[dns]\nresolver = %q\n[trust]\ntrusted_senders = %s\n%s\n", o.Resolver, quoteList(o.TrustedSenders), o.TrustExtra)
	fmt.Fprintf(&b, "\n[[mailboxes]]\nname = %q\nowner = %q\n", mailbox, ownerName)
	b.WriteString(strings.ReplaceAll(o.Extra, "DIR", dir))
	if err := os.WriteFile(d.cfgPath, []byte(b.String()), 0o640); err != nil {
		t.Fatal(err)
	}
	d.start()
	t.Cleanup(d.stop)
	return d
}

// start runs the daemon and waits until SMTP greets.
func (d *daemon) start() {
	t := d.t
	t.Helper()
	cmd := exec.Command(bin, "serve", "--config", d.cfgPath)
	cmd.Stdout = d.logs
	cmd.Stderr = d.logs
	if err := d.proc.Start(cmd); err != nil {
		t.Fatalf("starting mailctl serve: %v", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if d.proc.Exited() {
			t.Fatalf("mailctl serve exited at start:\n%s", d.logs)
		}
		if c, err := net.DialTimeout("tcp", d.SMTPAddr, time.Second); err == nil {
			c.SetDeadline(time.Now().Add(5 * time.Second))
			r := bufio.NewReader(c)
			line, _ := r.ReadString('\n')
			if strings.HasPrefix(line, "220 ") {
				// QUIT and wait for the server's close: the daemon frees a
				// session's slot before closing it, so tests that count
				// connection slots start from zero.
				fmt.Fprintf(c, "QUIT\r\n")
				io.Copy(io.Discard, r)
				c.Close()
				return
			}
			c.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("mailctl serve did not greet on %s in time:\n%s", d.SMTPAddr, d.logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill9 kills the daemon with SIGKILL and waits for it to be gone.
func (d *daemon) kill9() { d.proc.Kill9() }

// stop ends the daemon with SIGTERM (SIGKILL after a grace period).
func (d *daemon) stop() {
	d.proc.Stop(10 * time.Second)
	if d.t.Failed() {
		d.t.Logf("mailctl serve log:\n%s", d.logs)
	}
}

// ctl runs a mailctl client command against this daemon's control socket
// and returns its standard output.
func (d *daemon) ctl(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "MAILCTL_SOCKET="+filepath.Join(d.dir, "mailctl.sock"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mailctl %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return string(out)
}

// stored is one message as the daemon left it on disk.
type stored struct {
	ID   string
	Meta *store.Message
	Body string
	Raw  []byte
}

// mailboxDir is the mailbox's folder on disk.
func (d *daemon) mailboxDir() string { return filepath.Join(d.state, "mailboxes", mailbox) }

// inbox reads every message in the inbox, oldest first.
func (d *daemon) inbox(t *testing.T) []stored {
	t.Helper()
	dir := filepath.Join(d.mailboxDir(), "inbox")
	ents, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		t.Fatal(err)
	}
	var out []stored
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".md")
		if !ok || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		md, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m, body, err := store.Parse(md)
		if err != nil {
			t.Fatalf("%s does not parse: %v", e.Name(), err)
		}
		raw, err := os.ReadFile(filepath.Join(dir, id+".eml"))
		if err != nil {
			t.Fatalf("%s has no raw copy: %v", id, err)
		}
		out = append(out, stored{ID: id, Meta: m, Body: body, Raw: raw})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// byMessageID finds the stored message with the given Message-ID.
func (d *daemon) byMessageID(t *testing.T, id string, timeout time.Duration) stored {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, m := range d.inbox(t) {
			if m.Meta.MessageID == id {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no stored message with Message-ID %s after %v; log:\n%s", id, timeout, d.logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// headerFields splits the first n header fields (with their folded
// continuation lines) off raw.
func headerFields(raw []byte, n int) (fields []string, rest []byte) {
	for range n {
		end := 0
		for {
			i := bytes.Index(raw[end:], []byte("\r\n"))
			if i < 0 {
				return fields, raw
			}
			end += i + 2
			if end >= len(raw) || (raw[end] != ' ' && raw[end] != '\t') {
				break
			}
		}
		fields = append(fields, string(raw[:end]))
		raw = raw[end:]
	}
	return fields, raw
}

// checkRaw asserts that the stored raw copy is exactly one
// Authentication-Results header by us, our Received header, then `extra`
// Received headers added on the way (a relay's), then sent byte for byte.
// It returns the prepended fields.
func checkRaw(t *testing.T, raw, sent []byte, extra int) []string {
	t.Helper()
	fields, rest := headerFields(raw, 2+extra)
	if len(fields) != 2+extra {
		t.Fatalf("raw copy has fewer than %d header fields:\n%s", 2+extra, raw)
	}
	if !strings.HasPrefix(fields[0], "Authentication-Results: "+hostname+";") {
		t.Errorf("first field is not our Authentication-Results: %q", fields[0])
	}
	if !strings.HasPrefix(fields[1], "Received: from ") || !strings.Contains(fields[1], "by "+hostname+" (mailctl)") {
		t.Errorf("second field is not our Received: %q", fields[1])
	}
	for _, f := range fields[2:] {
		if !strings.HasPrefix(f, "Received: ") {
			t.Errorf("relay field is not a Received header: %q", f)
		}
	}
	if !bytes.Equal(rest, sent) {
		t.Errorf("raw copy differs from what was sent after the prepended fields\n--- sent\n%q\n--- stored\n%q", sent, rest)
	}
	ours := []byte("Authentication-Results: " + hostname + ";")
	if n := bytes.Count(raw, ours) - bytes.Count(sent, ours); n != 1 {
		t.Errorf("%d Authentication-Results headers by %s were added, want exactly 1", n, hostname)
	}
	return fields
}

// crlf turns LF line ends into CRLF.
func crlf(s string) []byte {
	return []byte(strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\n", "\r\n"))
}

// checkAttachment asserts that attachment name exists in the frontmatter and on
// disk with exactly data.
func (d *daemon) checkAttachment(t *testing.T, m stored, name, ctype string, data []byte) {
	t.Helper()
	for _, a := range m.Meta.Attachments {
		if a.Filename != name {
			continue
		}
		if !strings.HasPrefix(a.ContentType, ctype) {
			t.Errorf("attachment %s content_type %q, want %q", name, a.ContentType, ctype)
		}
		if a.Size != int64(len(data)) {
			t.Errorf("attachment %s size %d, want %d", name, a.Size, len(data))
		}
		// The path is relative to the message's folder.
		path := filepath.Join(d.mailboxDir(), "inbox", a.Path)
		if !strings.HasPrefix(filepath.Clean(path), filepath.Join(d.mailboxDir(), "inbox")+"/") {
			t.Fatalf("attachment path %q leaves the folder", a.Path)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("attachment %s not on disk at %s: %v", name, a.Path, err)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("attachment %s on disk differs from what was sent (%d vs %d bytes)", name, len(got), len(data))
		}
		st, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if sys := st.Sys().(*syscall.Stat_t); int(sys.Uid) != d.uid {
			t.Errorf("attachment owned by uid %d, want the mailbox owner %d", sys.Uid, d.uid)
		}
		if st.Mode()&0o022 != 0 || !st.Mode().IsRegular() {
			t.Errorf("attachment mode %v: want a regular file writable by its owner only", st.Mode())
		}
		return
	}
	t.Errorf("no attachment %q in frontmatter: %+v", name, m.Meta.Attachments)
}

// checkOwned asserts that the message files and the mailbox belong to the
// mailbox owner (a throwaway user as root) and are private to it.
func (d *daemon) checkOwned(t *testing.T, m stored) {
	t.Helper()
	for _, p := range []string{d.mailboxDir(), filepath.Join(d.mailboxDir(), "inbox", m.ID+".md"), filepath.Join(d.mailboxDir(), "inbox", m.ID+".eml")} {
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if sys := st.Sys().(*syscall.Stat_t); int(sys.Uid) != d.uid {
			t.Errorf("%s owned by uid %d, want the mailbox owner %d", p, sys.Uid, d.uid)
		}
		if st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v, want it private to the owner", p, st.Mode())
		}
	}
}

// checkCommon asserts the frontmatter fields every scenario shares.
func checkCommon(t *testing.T, m stored, from, subject, messageID string) {
	t.Helper()
	fm := m.Meta
	checks := []struct {
		field     string
		got, want any
	}{
		{"id", fm.ID, m.ID},
		{"from", fm.From, from},
		{"subject", fm.Subject, subject},
		{"message_id", fm.MessageID, messageID},
		{"delivered_to", fm.DeliveredTo, rcpt},
		{"mailbox", fm.Mailbox, mailbox},
		{"size_bytes", fm.SizeBytes, int64(len(m.Raw))},
		{"read", fm.Read, false},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("frontmatter %s = %#v, want %#v", c.field, c.got, c.want)
		}
	}
	if !contains(fm.To, rcpt) {
		t.Errorf("frontmatter to = %q, want it to include %s", fm.To, rcpt)
	}
	if fm.ReceivedAt.IsZero() || time.Since(fm.ReceivedAt) > 5*time.Minute {
		t.Errorf("frontmatter received_at = %v", fm.ReceivedAt)
	}
	if fm.ThreadID == "" {
		t.Errorf("frontmatter thread_id is empty")
	}
	if fm.Trusted == "" {
		t.Errorf("frontmatter trusted is empty")
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) || strings.HasSuffix(strings.ToLower(v), "<"+strings.ToLower(s)+">") {
			return true
		}
	}
	return false
}

// runTool runs an external client with a deadline and returns its combined
// output, failing the test when it fails.
func runTool(t *testing.T, stdin []byte, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}
