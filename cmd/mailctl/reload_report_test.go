package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/protocol"
)

// TestReloadReportNamesPendingKeysOnly: a reload whose only changes wait for
// a restart must not say that no setting changed.
func TestReloadReportNamesPendingKeysOnly(t *testing.T) {
	var buf bytes.Buffer
	saved := stdout
	stdout = &buf
	defer func() { stdout = saved }()
	if code := reportReload(42, &protocol.ReloadStatus{OK: true, Pending: []string{"dns.resolver"}}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	out := buf.String()
	if strings.Contains(out, "no setting changed") || !strings.Contains(out, "dns.resolver") {
		t.Errorf("a reload with a restart-only change reported:\n%s", out)
	}
	buf.Reset()
	reportReload(42, &protocol.ReloadStatus{OK: true})
	if !strings.Contains(buf.String(), "no setting changed") {
		t.Errorf("an unchanged reload reported:\n%s", buf.String())
	}
}

// TestReloadReportNamesMailboxesNotServed: a declared mailbox the daemon
// does not serve is said, not only logged.
func TestReloadReportNamesMailboxesNotServed(t *testing.T) {
	var buf bytes.Buffer
	saved := stdout
	stdout = &buf
	defer func() { stdout = saved }()
	problem := `mailbox "ops": owner "nosuch": no such user`
	if code := reportReload(42, &protocol.ReloadStatus{OK: true, Applied: []string{"mailboxes"}, NotServed: []string{problem}}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(buf.String(), "not served: "+problem) {
		t.Errorf("the report does not name the mailbox not served:\n%s", buf.String())
	}
}
