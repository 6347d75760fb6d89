package control

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/protocol"
)

// A non-root caller's status keeps host-wide findings and those about its own
// mailboxes, and hides those naming another user's mailbox or paths in it.
func TestVisibleFinding(t *testing.T) {
	if !visibleFinding(protocol.Finding{ID: "dns.mx", Message: "no MX for example.test"}, nil, []string{"bob"}) {
		t.Error("host-wide finding hidden")
	}
	if visibleFinding(protocol.Finding{ID: "mailbox.owner_wrong", Message: "mailbox bob is owned by uid 7"}, []string{"alice"}, []string{"bob"}) {
		t.Error("another user's mailbox finding shown")
	}
	if !visibleFinding(protocol.Finding{ID: "mailbox.folder_missing", Message: "mailbox alice lacks inbox"}, []string{"alice"}, []string{"bob"}) {
		t.Error("own mailbox finding hidden")
	}
	if visibleFinding(protocol.Finding{ID: "paths.mode", Message: "/var/lib/mailctl/mailboxes/bob/inbox mode 0755"}, []string{"alice"}, []string{"bob"}) {
		t.Error("path inside another user's mailbox shown")
	}
}

// pendingBackend has config keys changed that wait for a restart.
type pendingBackend struct{ fakeBackend }

func (pendingBackend) RestartPending() []string { return []string{"delivery.retry_for"} }

// TestRestartPendingFitsTheInit: the fix of config.restart_pending said
// `sudo systemctl restart mailctl` on a host without systemd (a
// container), where it only fails. Not parallel: it swaps
// protocol.SystemdRuns.
func TestRestartPendingFitsTheInit(t *testing.T) {
	was := protocol.SystemdRuns
	t.Cleanup(func() { protocol.SystemdRuns = was })
	reg, _, err := registry.Open(filepath.Join(t.TempDir(), "registry"))
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Registry: reg, Backend: &pendingBackend{}})
	for _, systemd := range []bool{true, false} {
		protocol.SystemdRuns = func() bool { return systemd }
		res, err := handleStatus(context.Background(), s, &call{caller: Caller{}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var fix string
		for _, f := range res.(protocol.Status).Findings {
			if f.ID == "config.restart_pending" {
				fix = f.Fix
			}
		}
		if fix != protocol.RestartLine() {
			t.Errorf("systemd %v: restart_pending fix %q, want %q", systemd, fix, protocol.RestartLine())
		}
		if !systemd && (strings.Contains(fix, "systemctl") || !strings.Contains(fix, "`sudo mailctl serve`")) {
			t.Errorf("without systemd: %q", fix)
		}
	}
}
