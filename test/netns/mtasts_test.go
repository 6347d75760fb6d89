package netns

import (
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testcert"
	"github.com/mailctl/mailctl/internal/tlsrptcheck"
	"github.com/mailctl/mailctl/protocol"
)

// policyHost serves MTA-STS policies over HTTPS on port 443 of a lab host,
// one per mta-sts.<domain> name, with a certificate of the test CA.
func policyHost(t *testing.T, h *nsHost, ca *testcert.CA, policies map[string]string) {
	t.Helper()
	var names []string
	for name := range policies {
		names = append(names, name)
	}
	certPEM, keyPEM, _ := ca.IssuePEM(t, names...)
	ln, err := listenIn(h.NS, h.IP+":443")
	if err != nil {
		t.Fatalf("policy host: %v", err)
	}
	srv := &http.Server{TLSConfig: &tls.Config{Certificates: []tls.Certificate{testcert.TLS(t, certPEM, keyPEM)}},
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, ok := policies[strings.ToLower(r.Host)]
			if !ok || r.URL.Path != "/.well-known/mta-sts.txt" {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, p)
		})}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
}

// useCACert installs a certificate of ca for hosts as a mail host's
// STARTTLS certificate (before it starts).
func useCACert(t *testing.T, ca *testcert.CA, hosts ...string) func(h *mailHost) {
	return func(h *mailHost) {
		certPEM, keyPEM, _ := ca.IssuePEM(t, hosts...)
		if err := os.WriteFile(filepath.Join(h.dir, "tls", "cert.pem"), certPEM, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(h.dir, "tls", "key.pem"), keyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOutboundMTASTS: a.test delivers to four domains that publish MTA-STS
// policies, fetched over HTTPS from a lab host with a test CA's
// certificate: to good.test (enforce) over TLS valid for its MX name,
// recorded "mta-sts enforce"; to wrong.test (enforce, an MX whose
// certificate names another host) and notls.test (enforce, an MX without
// STARTTLS) not at all, deferred; to testing.test (testing, no STARTTLS)
// in plaintext. Then a's day of traffic is reported (RFC 8460): the
// daemon's counts are moved to yesterday's date while it is stopped (the
// day rolling over), and at its next start it mails each domain's report
// to the rua they publish; the reports reach good.test's postmaster,
// validate against RFC 8460's schema and carry the counts of the traffic.
func TestOutboundMTASTS(t *testing.T) {
	start := time.Now()
	l := newLab(t)
	ca := testcert.NewCA(t)
	caFile := filepath.Join(testDir(t), "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	web, plain := l.addHost("web"), l.addHost("plain")
	policyHost(t, web, ca, map[string]string{
		"mta-sts.good.test":    "version: STSv1\r\nmode: enforce\r\nmx: mx.good.test\r\nmax_age: 86400\r\n",
		"mta-sts.wrong.test":   "version: STSv1\r\nmode: enforce\r\nmx: mx.wrong.test\r\nmax_age: 86400\r\n",
		"mta-sts.notls.test":   "version: STSv1\r\nmode: enforce\r\nmx: *.notls.test\r\nmax_age: 86400\r\n",
		"mta-sts.testing.test": "version: STSv1\r\nmode: testing\r\nmx: mx.testing.test\r\nmax_age: 86400\r\n",
	})
	fake := startFakeMX(t, plain, false, 0) // no STARTTLS
	g := l.newMailHost("g", "good.test", hostOptions{Mailboxes: []string{"agent", "postmaster"}, Domains: []string{"wrong.test"},
		BeforeStart: useCACert(t, ca, "mx.good.test")})
	domains := []string{"good.test", "wrong.test", "notls.test", "testing.test"}
	var recs []string
	for _, d := range domains {
		recs = append(recs, "_mta-sts."+d+" TXT v=STSv1; id=20260301", "mta-sts."+d+" A "+web.IP,
			"_smtp._tls."+d+" TXT v=TLSRPTv1; rua=mailto:postmaster@good.test,https://reports.example.test/tlsrpt")
	}
	l.publish(append(recs,
		"wrong.test MX 10 mx.wrong.test.", "mx.wrong.test A "+g.IP,
		"notls.test MX 10 mx.notls.test.", "mx.notls.test A "+plain.IP,
		"testing.test MX 10 mx.testing.test.", "mx.testing.test A "+plain.IP)...)
	a := l.newMailHost("a", "a.test", hostOptions{Mailboxes: []string{"boss", "postmaster"},
		Delivery: fmt.Sprintf("ca_file = %q", caFile)})

	send := func(to string) protocol.SendResult {
		return a.send(protocol.SendArgs{FromMailbox: "boss", To: []string{to}, Subject: "to " + to, Body: "policy check", WaitMS: 20000})
	}
	good := send("agent@good.test")
	if good.Status != "delivered" || good.Recipients[0].TLS != "mta-sts enforce" {
		t.Fatalf("good.test: %s %+v, want delivered under mta-sts enforce", good.Status, good.Recipients)
	}
	g.byMessageID("agent", "inbox", good.MessageID, 20*time.Second)
	if sc := a.sentCopy("boss", good.ID, "delivered", 10*time.Second); sc.Meta.DeliveryDetails[0].TLS != "mta-sts enforce" {
		t.Errorf("sent copy tls %q, want mta-sts enforce", sc.Meta.DeliveryDetails[0].TLS)
	}
	var deferred []protocol.SendResult
	for _, to := range []string{"agent@wrong.test", "x@notls.test"} {
		r := send(to)
		if r.Status != "deferred" || !strings.Contains(r.Recipients[0].Detail, "MTA-STS") {
			t.Errorf("%s: %s %+v, want deferred by the MTA-STS policy", to, r.Status, r.Recipients)
		}
		deferred = append(deferred, r)
	}
	testingRes := send("x@testing.test")
	if testingRes.Status != "delivered" || testingRes.Recipients[0].TLS != "none" {
		t.Errorf("testing.test: %s %+v, want delivered in plaintext (testing mode)", testingRes.Status, testingRes.Recipients)
	}
	if n := len(g.folder("agent", "inbox")); n != 1 {
		t.Errorf("good.test's MX stored %d messages, want 1 (nothing for wrong.test)", n)
	}
	if byMID, txns, _ := fake.counts(); txns != 1 || byMID[strings.Trim(testingRes.MessageID, "<>")] != 1 {
		t.Errorf("the plaintext MX got %v, want only the testing-mode message", byMID)
	}
	for _, r := range deferred {
		if err := a.call(protocol.VerbQueueDrop, protocol.QueueIDArgs{ID: "boss." + r.ID}, nil); err != nil {
			t.Fatalf("queue.drop: %v", err)
		}
	}
	summary(t, "mta-sts", "good.test delivered (%s); wrong.test and notls.test deferred, nothing sent; testing.test delivered (tls %s) (%s)",
		good.Recipients[0].TLS, testingRes.Recipients[0].TLS, time.Since(start).Round(time.Second))

	// The day rolls over: the counts a kept for today become yesterday's.
	reportStart := time.Now()
	a.stop()
	today, yesterday := time.Now().UTC().Format(time.DateOnly), time.Now().UTC().Add(-24*time.Hour).Format(time.DateOnly)
	dir := filepath.Join(a.State, "tlsrpt")
	if err := os.Rename(filepath.Join(dir, today+".json"), filepath.Join(dir, yesterday+".json")); err != nil {
		t.Fatalf("the day's TLS counts are not on disk: %v", err)
	}
	a.start()
	var reports []stored
	waitFor(60*time.Second, func() bool {
		reports = nil
		for _, m := range g.folder("postmaster", "inbox") {
			if strings.HasPrefix(m.Meta.Subject, "Report Domain: ") {
				reports = append(reports, m)
			}
		}
		return len(reports) == len(domains)
	})
	if len(reports) != len(domains) {
		t.Fatalf("%d TLS reports reached postmaster@good.test, want %d; a's log:\n%s", len(reports), len(domains), tail(a.Logs.String(), 6000))
	}
	want := map[string]struct {
		ok, failed int64
		result     string
		labelled   bool
	}{
		"good.test":    {1, 0, "", true},
		"wrong.test":   {0, 1, "certificate-host-mismatch", true},
		"notls.test":   {0, 1, "starttls-not-supported", false},
		"testing.test": {0, 1, "starttls-not-supported", false},
	}
	for _, m := range reports {
		if len(m.Meta.Attachments) != 1 || m.Meta.Attachments[0].ContentType != "application/tlsrpt+gzip" {
			t.Fatalf("report %q attachments %+v", m.Meta.Subject, m.Meta.Attachments)
		}
		gz, err := os.ReadFile(filepath.Join(g.State, "mailboxes", "postmaster", "inbox", m.Meta.Attachments[0].Path))
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(gz))
		if err != nil {
			t.Fatalf("report %q is not gzip: %v", m.Meta.Subject, err)
		}
		js, _ := io.ReadAll(zr)
		inst, err := tlsrptcheck.Validate(js)
		if err != nil {
			t.Fatalf("report %q does not validate against RFC 8460's schema: %v\n%s", m.Meta.Subject, err, js)
		}
		dr := inst["date-range"].(map[string]any)
		if dr["start-datetime"] != yesterday+"T00:00:00Z" || dr["end-datetime"] != yesterday+"T23:59:59Z" {
			t.Errorf("date range %v, want %s", dr, yesterday)
		}
		pols := inst["policies"].([]any)
		if len(pols) != 1 {
			t.Fatalf("report %q has %d policies", m.Meta.Subject, len(pols))
		}
		p := pols[0].(map[string]any)
		dom := p["policy"].(map[string]any)["policy-domain"].(string)
		w, ok := want[dom]
		if !ok {
			t.Fatalf("a report for %q", dom)
		}
		delete(want, dom)
		if typ := p["policy"].(map[string]any)["policy-type"]; typ != "sts" {
			t.Errorf("%s: policy-type %v, want sts", dom, typ)
		}
		sum := p["summary"].(map[string]any)
		if int64(sum["total-successful-session-count"].(float64)) != w.ok || int64(sum["total-failure-session-count"].(float64)) != w.failed {
			t.Errorf("%s: summary %v, want %d successful, %d failed", dom, sum, w.ok, w.failed)
		}
		if w.result != "" {
			fd, _ := p["failure-details"].([]any)
			if len(fd) != 1 || fd[0].(map[string]any)["result-type"] != w.result {
				t.Errorf("%s: failure details %v, want one %s", dom, fd, w.result)
			}
		}
		if got := strings.Contains(strings.Join(m.Meta.Labels, ","), "tls-report"); got != w.labelled {
			t.Errorf("%s: labels %v; want tls-report only on reports about good.test's own domains", dom, m.Meta.Labels)
		}
	}
	if !strings.Contains(a.Logs.String(), "only mailto: is sent") {
		t.Errorf("the https: rua was not logged as skipped")
	}
	summary(t, "tls-report", "after the day rolled over, a mailed %d reports to postmaster@good.test; each validates against RFC 8460's schema and matches the day's sessions (%s)",
		len(reports), time.Since(reportStart).Round(time.Second))
}

// testDir is a directory root's daemons can read.
func testDir(t *testing.T) string {
	d := t.TempDir()
	os.Chmod(d, 0o755)
	return d
}
