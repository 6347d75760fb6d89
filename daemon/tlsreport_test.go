package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/tlsrpt"
)

// reportMail is a TLS report about domain, as another MTA mails it.
func reportMail(t *testing.T, domain, to string) string {
	t.Helper()
	rep := tlsrpt.Report{OrganizationName: "sender.example", ContactInfo: "tls@sender.example", ReportID: "r-" + domain,
		DateRange: tlsrpt.DateRange{Start: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), End: time.Date(2026, 3, 1, 23, 59, 59, 0, time.UTC)},
		Policies:  []tlsrpt.PolicyResult{{Policy: tlsrpt.PolicyDesc{Type: tlsrpt.PolicyNone, Domain: domain}, Summary: tlsrpt.Summary{Successful: 4}}}}
	gz, err := tlsrpt.Gzip(rep)
	if err != nil {
		t.Fatal(err)
	}
	m := tlsrpt.Compose("tls@sender.example", []string{to}, "mx.sender.example", "r-"+domain+"@sender.example", rep, gz, time.Now())
	return strings.ReplaceAll(string(m.Raw), "\r\n", "\n")
}

// TestTLSReportsGoToPostmaster: a TLS report about one of our domains goes
// to the [tlsrpt] mailbox (postmaster), labelled, whichever of our
// addresses it was sent to; a report about another domain, or any other
// mail, goes where it was addressed.
func TestTLSReportsGoToPostmaster(t *testing.T) {
	td, addr, _ := startInbound(t, "[trust]\ndmarc_enforce = false\n")
	td.ensureMine(t, "agent")
	td.ensureMine(t, "postmaster")
	if err := sendSMTP(t, addr, "tls@sender.example", []string{"agent@example.test"}, reportMail(t, "example.test", "agent@example.test")); err != nil {
		t.Fatal(err)
	}
	if err := sendSMTP(t, addr, "tls@sender.example", []string{"agent@example.test"}, reportMail(t, "elsewhere.test", "agent@example.test")); err != nil {
		t.Fatal(err)
	}
	pm, agent := folderCount(t, td, "postmaster", "inbox"), folderCount(t, td, "agent", "inbox")
	if len(pm) != 1 || !strings.Contains(pm[0].Subject, "Report Domain: example.test") || strings.Join(pm[0].Labels, ",") != "tls-report" {
		t.Errorf("postmaster: %+v, want the report about example.test, labelled tls-report", pm)
	}
	if len(agent) != 1 || !strings.Contains(agent[0].Subject, "Report Domain: elsewhere.test") || len(agent[0].Labels) != 0 {
		t.Errorf("agent: %+v, want only the report about another domain, unlabelled", agent)
	}
}
