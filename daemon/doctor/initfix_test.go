package doctor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/fakemx"
	"github.com/mailctl/mailctl/internal/testcert"
	"github.com/mailctl/mailctl/protocol"
)

// TestFixesFitAHostWithoutSystemd: the fixes that reload, restart or read
// the log of the daemon said `systemctl` and `journalctl` on a host where
// systemd is not the init (a container), where those commands only fail.
// Not parallel: it swaps protocol.SystemdRuns.
func TestFixesFitAHostWithoutSystemd(t *testing.T) {
	was := protocol.SystemdRuns
	t.Cleanup(func() { protocol.SystemdRuns = was })
	protocol.SystemdRuns = func() bool { return false }
	const reload, restart, logs = "`sudo mailctl reload PID`", "`sudo mailctl serve`", "standard error"

	type seeded struct {
		name string
		seed func(t *testing.T, in *install)
		id   string
		want string
	}
	var all []protocol.Finding
	for _, tc := range []seeded{
		{"bad config key", func(t *testing.T, in *install) { appendFile(t, in.cfg.File, "\n[smtp2]\nlisten = []\n") }, "config.unknown_key", reload},
		{"config syntax", func(t *testing.T, in *install) { appendFile(t, in.cfg.File, "\nhostname = \n") }, "config.parse", reload},
		{"version drift", func(t *testing.T, in *install) { in.env.ClientVersion = "1.3.0" }, "daemon.version_drift", restart},
		{"declared mailbox not made yet", func(t *testing.T, in *install) {
			appendFile(t, in.cfg.File, fmt.Sprintf("\n[[mailboxes]]\nname = \"later\"\nowner = %q\n", myUserName(t)))
		}, "mailbox.missing", reload},
		{"damaged queue journal", func(t *testing.T, in *install) {
			os.MkdirAll(in.cfg.Paths.QueueDir(), 0o700)
			os.WriteFile(filepath.Join(in.cfg.Paths.QueueDir(), "journal"), []byte("{not a journal"), 0o600)
		}, "queue.damaged", restart},
		{"expired certificate", func(t *testing.T, in *install) {
			in.env.Now = func() time.Time { return time.Now().AddDate(11, 0, 0) }
		}, "tls.expired", reload},
		{"private socket", func(t *testing.T, in *install) {
			ln, err := net.Listen("unix", in.cfg.Paths.Socket)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			os.Chmod(in.cfg.Paths.Socket, 0o600)
		}, "paths.socket", restart},
		{"daemon down", func(t *testing.T, in *install) {
			in.env.SocketAnswers = func() (string, error) { return "", errors.New("connection refused") }
		}, "daemon.down", logs},
	} {
		in := newInstall(t)
		tc.seed(t, in)
		f := in.check(t)
		all = append(all, f...)
		if fix, ok := fixOf(f, tc.id); !ok || !strings.Contains(fix, tc.want) {
			t.Errorf("%s: %s fix %q, want %q in it", tc.name, tc.id, fix, tc.want)
		}
	}

	in := newInstall(t)
	in.cfg.Mailboxes = nil
	var roles findings
	checkRoleAddresses(&roles, in.cfg)
	all = append(all, roles...)
	if fix, ok := fixOf(roles, "role.missing"); !ok || !strings.Contains(fix, reload) {
		t.Errorf("role.missing fix %q, want %q in it", fix, reload)
	}

	// The certificate served is not the file's; then STARTTLS fails.
	stale := testcert.NewCA(t).Issue(t, "mx.example.test")
	in.env.Now = func() time.Time { return stale.Leaf.NotAfter.Add(-24 * time.Hour) }
	in.env.ServedCertificate = nil
	mx := fakemx.New(t, "127.0.0.1", &tls.Config{Certificates: []tls.Certificate{stale}})
	_, port, _ := net.SplitHostPort(mx.Addr)
	in.cfg.SMTP.Listen = []string{"127.0.0.1:" + port}
	var served findings
	checkTLS(context.Background(), &served, in.cfg, in.env)
	all = append(all, served...)
	if fix, ok := fixOf(served, "tls.served_differs"); !ok || !strings.Contains(fix, logs) || !strings.Contains(fix, "`grep certificate`") || !strings.Contains(fix, reload) {
		t.Errorf("tls.served_differs fix %q, want the log's certificate lines and %q", fix, reload)
	}
	failing := fakemx.New(t, "127.0.0.1", &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return nil, errors.New("no") }})
	_, port, _ = net.SplitHostPort(failing.Addr)
	in.cfg.SMTP.Listen = []string{"127.0.0.1:" + port}
	var starttls findings
	checkTLS(context.Background(), &starttls, in.cfg, in.env)
	all = append(all, starttls...)
	if fix, ok := fixOf(starttls, "tls.starttls"); !ok || !strings.Contains(fix, logs) {
		t.Errorf("tls.starttls fix %q, want %q in it", fix, logs)
	}

	for _, x := range all {
		if strings.Contains(x.Fix, "systemctl") || strings.Contains(x.Fix, "journalctl") {
			t.Errorf("%s without systemd: %q", x.ID, x.Fix)
		}
	}
}

// fixOf is the fix of the first finding with id.
func fixOf(f []protocol.Finding, id string) (string, bool) {
	for _, x := range f {
		if x.ID == id {
			return x.Fix, true
		}
	}
	return "", false
}
