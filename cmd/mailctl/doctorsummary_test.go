package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/daemon/doctor"
	"github.com/mailctl/mailctl/protocol"
)

// TestDoctorSummarySaysWhyNoDaemonChecked: the summary line under a
// user's doctor names why the daemon checked nothing: none answers, or
// one may run that this user cannot reach (another user's mailctl dev, a
// config the user cannot read), where "no daemon" would send them to
// start one.
func TestDoctorSummarySaysWhyNoDaemonChecked(t *testing.T) {
	for _, tc := range []struct{ id, want string }{
		{"daemon.down", "(no daemon to check with)"},
		{"daemon.socket", "(no daemon this user can reach)"},
		{"daemon.status", "(checked by the daemon for you)"},
	} {
		var buf bytes.Buffer
		saved := stdout
		stdout = &buf
		printFindings([]protocol.Finding{{ID: tc.id, Severity: doctor.Fail, Message: "m"}}, "daemon")
		stdout = saved
		if !strings.Contains(buf.String(), "1 fail, 0 warn, 0 ok "+tc.want) {
			t.Errorf("%s: summary %q, want %s", tc.id, buf.String(), tc.want)
		}
	}
}
