package main

import (
	"bytes"
	"fmt"
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

// TestReportsKeepOutsideTextOnItsLine: what mailctl prints of an error or
// a daemon's report (a reload refused, the keys it applied, a command's
// failure quoting a file name from a mailbox tree or an archive) cannot
// begin a line of its own on root's terminal, or in the journal, where
// each line of serve's stderr is an entry.
func TestReportsKeepOutsideTextOnItsLine(t *testing.T) {
	var buf bytes.Buffer
	savedOut, savedErr := stdout, stderr
	stdout, stderr = &buf, &buf
	defer func() { stdout, stderr = savedOut, savedErr }()
	reportReload(42, &protocol.ReloadStatus{OK: false, Error: hostile})
	reportReload(42, &protocol.ReloadStatus{OK: true, Applied: []string{hostile}, Pending: []string{hostile}, DKIMKeys: []string{hostile}})
	failure(newFlagSet("restore", "restore", ""), fmt.Errorf("reading %s: bad entry", hostile))
	if n := forgedLines(buf.String()); n != 0 || !strings.Contains(buf.String(), "evil") {
		t.Errorf("%d forged line(s), or the text is gone:\n%s", n, buf.String())
	}
}
