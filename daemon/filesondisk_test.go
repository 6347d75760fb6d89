package daemon

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/internal/fakemx"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/internal/testcert"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// fileRow is one path of docs/architecture.md's "Files on disk" table with
// the owner and mode the table gives it.
type fileRow struct {
	doc   string // the path as the table writes it, braces expanded
	re    *regexp.Regexp
	owner string // "root" or "mailbox owner"
	mode  os.FileMode
}

// filesOnDisk reads the "Files on disk" table: each row's paths (`…/` is
// the directory of the path before it; a path ending in / is its own
// directory) and its owner and modes, one for every path or one each.
func filesOnDisk(t *testing.T) []fileRow {
	t.Helper()
	doc, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Files on disk\n")
	if !ok {
		t.Fatal("docs/architecture.md has no Files on disk section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	cellPath := regexp.MustCompile("`([^`]+)`")
	ownerMode := regexp.MustCompile(`^(root|mailbox owner) (0[0-7]{3}(?:, 0[0-7]{3})*)$`)
	var rows []fileRow
	prev := ""
	for line := range strings.SplitSeq(section, "\n") {
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| `") || len(cells) < 2 {
			continue
		}
		m := ownerMode.FindStringSubmatch(cells[1])
		if m == nil {
			t.Fatalf("Files on disk: %q: the owner and mode must read `root 0600` or `mailbox owner 0700, 0600`", cells[1])
		}
		var modes []os.FileMode
		for _, s := range strings.Split(m[2], ", ") {
			var v uint32
			fmt.Sscanf(s, "%o", &v)
			modes = append(modes, os.FileMode(v))
		}
		paths := cellPath.FindAllStringSubmatch(cells[0], -1)
		if len(modes) != 1 && len(modes) != len(paths) {
			t.Fatalf("Files on disk: %s: %d modes for %d paths", cells[0], len(modes), len(paths))
		}
		for i, p := range paths {
			path := p[1]
			if rest, ok := strings.CutPrefix(path, "…/"); ok {
				dir := prev
				if !strings.HasSuffix(dir, "/") {
					dir = filepath.Dir(dir) + "/"
				}
				path = dir + rest
			}
			prev = path
			mode := modes[0]
			if len(modes) > 1 {
				mode = modes[i]
			}
			for _, e := range expandBraces(path) {
				rows = append(rows, fileRow{doc: e, re: pathPattern(e), owner: m[1], mode: mode})
			}
		}
	}
	if len(rows) < 10 {
		t.Fatalf("Files on disk: only %d paths read; has the table's layout changed?", len(rows))
	}
	return rows
}

// expandBraces turns a{b,c}d into abd and acd (one group per path).
func expandBraces(p string) []string {
	i, j := strings.Index(p, "{"), strings.Index(p, "}")
	if i < 0 || j < i {
		return []string{p}
	}
	var out []string
	for _, alt := range strings.Split(p[i+1:j], ",") {
		out = append(out, p[:i]+alt+p[j+1:])
	}
	return out
}

// pathPattern matches the paths a documented path stands for: <x> and *
// are one file name (or the part of one they stand in).
func pathPattern(p string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for len(p) > 0 {
		switch {
		case p[0] == '*':
			b.WriteString(`[^/]+`)
			p = p[1:]
		case p[0] == '<' && strings.Contains(p, ">"):
			b.WriteString(`[^/]+`)
			p = p[strings.Index(p, ">")+1:]
		default:
			b.WriteString(regexp.QuoteMeta(p[:1]))
			p = p[1:]
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// notMadeHere are the table's paths the test does not bring about, and why.
var notMadeHere = map[string]string{
	"/var/lib/mailctl/queue/corrupt/":      "made only when a journal is damaged",
	"/var/lib/mailctl/inbound/corrupt/":    "made only when a journal is damaged",
	"/var/lib/mailctl/queue/corrupt/*":     "made only when a journal is damaged",
	"/var/lib/mailctl/inbound/corrupt/*":   "made only when a journal is damaged",
	"/var/lib/mailctl/pre-restore-<time>/": "made only by mailctl restore --force",
	"/var/lib/mailctl/restore-incomplete":  "there only while a restore swaps the state in",
}

// TestFilesOnDiskAreDocumented runs a daemon until every file of
// docs/architecture.md's "Files on disk" table exists (a mailbox of
// another user with mail in and out, an attachment, a message large
// enough to be spooled, a hook, an idempotency key, a cached MTA-STS
// policy, TLS report counts), then walks its state directory and the
// socket's: every file and directory must be
// one the table names, with the owner and mode it gives, and every path
// the table names must have been seen. A new file fails it until it is
// documented.
func TestFilesOnDiskAreDocumented(t *testing.T) {
	u := testusers.Create(t, "fod") // skips unless root: a mailbox must belong to someone else
	rows := filesOnDisk(t)
	def := config.Default()
	if def.Paths.StateDir != "/var/lib/mailctl" || filepath.Dir(def.Paths.Socket) != "/run/mailctl" {
		t.Fatalf("the table's paths are the defaults: state_dir %s, socket %s", def.Paths.StateDir, def.Paths.Socket)
	}

	// An MTA-STS policy (mode testing, so the plain fake MX still gets the
	// mail) for remote.test, served over HTTPS with a certificate of a CA
	// the daemon is told to trust.
	ca := testcert.NewCA(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	sts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "version: STSv1\r\nmode: testing\r\nmx: mx.remote.test\r\nmax_age: 86400\r\n")
	}))
	sts.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "mta-sts.remote.test")}}
	sts.StartTLS()
	t.Cleanup(sts.Close)
	_, stsPort, _ := net.SplitHostPort(sts.Listener.Addr().String())
	mx := fakemx.New(t, "127.0.0.1", nil)
	_, mxPort, _ := net.SplitHostPort(mx.Addr)
	td, addr, dns := startInbound(t, fmt.Sprintf("[delivery]\nport = %s\nmta_sts_port = %s\nca_file = %q\n", mxPort, stsPort, caFile))
	dns.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	dns.SetIP("mx.remote.test", "127.0.0.1")
	dns.SetIP("mta-sts.remote.test", "127.0.0.1")
	dns.SetTXT("_mta-sts.remote.test", "v=STSv1; id=1")
	if err := EnsureDevKeys(td.cfg.Paths.DKIMDir); err != nil {
		t.Fatal(err)
	}
	if err := td.out.loadKeys(); err != nil {
		t.Fatal(err)
	}

	if err := td.EnsureMailbox("agent", u.UID, u.GID); err != nil {
		t.Fatal(err)
	}
	var hook protocol.Hook
	if err := td.call(t, protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "agent", Event: protocol.EventAfterSend, Cmd: []string{"/bin/true"}}, &hook); err != nil {
		t.Fatal(err)
	}
	msg := "From: a@sender.test\nTo: agent@example.test\nSubject: with a file\nMessage-ID: <fod@sender.test>\nMIME-Version: 1.0\n" +
		"Content-Type: multipart/mixed; boundary=b\n\n--b\nContent-Type: text/plain\n\nhello\n" +
		"--b\nContent-Type: application/octet-stream\nContent-Disposition: attachment; filename=notes.bin\nContent-Transfer-Encoding: base64\n\naGVsbG8=\n--b--\n"
	if err := sendSMTP(t, addr, "a@sender.test", []string{"agent@example.test"}, msg); err != nil {
		t.Fatal(err)
	}
	// A message over 2 MiB is spooled as it arrives; its spool file is
	// kept, emptied, for the next one once the copy is durable.
	big := "From: a@sender.test\nTo: agent@example.test\nSubject: large\nMessage-ID: <fod-large@sender.test>\n\n" +
		strings.Repeat(strings.Repeat("x", 99)+"\n", 30<<10)
	if err := sendSMTP(t, addr, "a@sender.test", []string{"agent@example.test"}, big); err != nil {
		t.Fatal(err)
	}
	spool := filepath.Join(td.cfg.Paths.StateDir, "inbound", "spool")
	testwait.For(t, "the large message's spool file to be kept for reuse", func() bool {
		ents, _ := os.ReadDir(spool)
		return len(ents) > 0 && strings.HasPrefix(ents[0].Name(), "free.")
	})
	var res protocol.SendResult
	if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "agent", To: []string{"friend@remote.test"}, Subject: "out", Body: "hi", IdempotencyKey: "fod-1"}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Status != "delivered" || len(mx.Messages()) != 1 {
		t.Fatalf("send: %s, %d at the MX; want it delivered", res.Status, len(mx.Messages()))
	}
	if err := td.out.reports.Flush(); err != nil {
		t.Fatal(err)
	}

	roots := map[string]string{
		"/var/lib/mailctl": td.cfg.Paths.StateDir,
		"/run/mailctl":     filepath.Dir(td.cfg.Paths.Socket),
	}
	seen := map[string]bool{}
	for docRoot, root := range roots {
		err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			if safeio.IsTemp(e.Name()) {
				return nil // a write in progress
			}
			rel, _ := filepath.Rel(root, path)
			doc := docRoot + "/" + rel
			if rel == "." {
				doc = docRoot
			}
			if e.IsDir() {
				doc += "/"
			}
			var st syscall.Stat_t
			if err := syscall.Lstat(path, &st); errors.Is(err, fs.ErrNotExist) {
				return nil // gone since the directory was read (a journal segment let go)
			} else if err != nil {
				return err
			}
			var row *fileRow
			for i := range rows {
				if rows[i].re.MatchString(doc) {
					row = &rows[i]
					break
				}
			}
			if row == nil {
				t.Errorf("%s (%s, mode %04o, uid %d) is not in docs/architecture.md's Files on disk", doc, path, st.Mode&0o7777, st.Uid)
				return nil
			}
			seen[row.doc] = true
			wantUID := uint32(0)
			if row.owner == "mailbox owner" {
				wantUID = u.UID
			}
			if st.Uid != wantUID || os.FileMode(st.Mode&0o7777) != row.mode {
				t.Errorf("%s: uid %d, mode %04o; Files on disk says %s (uid %d) %04o, as %s", doc, st.Uid, st.Mode&0o7777, row.owner, wantUID, row.mode, row.doc)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range rows {
		if seen[r.doc] || notMadeHere[r.doc] != "" || strings.HasPrefix(r.doc, "/etc/") {
			continue
		}
		t.Errorf("Files on disk lists %s, which this test never saw: make it exist, or say in notMadeHere why not", r.doc)
	}
}
