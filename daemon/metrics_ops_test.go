package daemon

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	dto "github.com/prometheus/client_model/go"

	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/daemon/setup"
	"github.com/mailctl/mailctl/internal/fakemx"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// scrape returns the metrics endpoint's text.
func scrape(t *testing.T, td *testDaemon) string {
	t.Helper()
	resp, err := http.Get("http://" + td.metricsS.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// sample is the value of the series line that starts with series.
func sample(t *testing.T, text, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("no series %s in the metrics:\n%s", series, text)
	return 0
}

// The operations metrics, scraped from the endpoint after real events: the
// served certificate's expiry, the queue by state and its oldest item,
// delivery latency and results with a configured destination label, delay
// warnings. Every mailctl_ metric the endpoint serves is documented in
// docs/operations.md, and every one documented there is served.
func TestOperationsMetrics(t *testing.T) {
	clk := testclock.New()
	clk.Advance(time.Since(clk.Now()))
	dir := t.TempDir()
	// A certificate that expires in 30 days.
	certPEM, keyPEM, err := setup.SelfSigned(time.Now().AddDate(-10, 0, 30), "mx.example.test")
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certPath, certPEM, 0o644)
	os.WriteFile(keyPath, keyPEM, 0o600)
	mx := fakemx.New(t, "127.0.0.1", nil)
	_, port, _ := net.SplitHostPort(mx.Addr)
	dns := &resolver.Map{}
	dns.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	dns.SetIP("mx.remote.test", "127.0.0.1")
	td := startDaemonSMTP(t, "[delivery]\nport = "+port+"\ndelay_warning = \"1h\"\n[metrics]\nlisten = \"127.0.0.1:0\"\ndestination_domains = [\"remote.test\"]\n",
		"listen = [\"127.0.0.1:0\"]\ntls_cert = \""+certPath+"\"\ntls_key = \""+keyPath+"\"\n", Options{Resolver: dns, Clock: clk.Now})
	td.ensureMine(t, "alice")
	mx.SetRcptErr("slow@remote.test", &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 2, 1}, Message: "busy"})
	for _, to := range []string{"ok@remote.test", "slow@remote.test"} {
		if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "alice", To: []string{to}, Subject: "s", Body: "b"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(time.Hour + time.Minute)
	td.out.queue.Kick()
	var text string
	// The kick also starts the deferred item's next attempt: the scrape
	// that is checked is one taken while no attempt is under way.
	testwait.For(t, "the delay warning counted and no attempt under way", func() bool {
		text = scrape(t, td)
		return strings.Contains(text, "mailctl_delay_warnings_total 1") &&
			strings.Contains(text, "mailctl_queue_items{state=\"delivering\"} 0\n")
	})
	if v := sample(t, text, `mailctl_tls_certificate_expiry_seconds{listener="smtp",name="mx.example.test"}`); v < 29*86400 || v > 30*86400 {
		t.Errorf("certificate expiry %v s, want about 30 days", v)
	}
	if v := sample(t, text, `mailctl_queue_items{state="deferred"}`); v != 1 {
		t.Errorf("deferred items %v, want 1", v)
	}
	if v := sample(t, text, `mailctl_queue_items{state="held"}`); v != 0 {
		t.Errorf("held items %v, want 0", v)
	}
	if v := sample(t, text, "mailctl_queue_oldest_item_age_seconds"); v < 3600 {
		t.Errorf("oldest item %v s old, want over an hour", v)
	}
	if v := sample(t, text, `mailctl_delivery_results_total{destination="remote.test",outcome="delivered"}`); v != 1 {
		t.Errorf("delivered to remote.test: %v, want 1", v)
	}
	if v := sample(t, text, `mailctl_delivery_results_total{destination="remote.test",outcome="deferred"}`); v < 1 {
		t.Errorf("deferred at remote.test: %v, want at least 1", v)
	}
	if v := sample(t, text, `mailctl_delivery_latency_seconds_count{stage="first_attempt"}`); v != 2 {
		t.Errorf("first attempts observed: %v, want 2", v)
	}
	if v := sample(t, text, `mailctl_delivery_latency_seconds_count{stage="final"}`); v != 1 {
		t.Errorf("final outcomes observed: %v, want 1 (the delivered message)", v)
	}
	if strings.Contains(text, `destination="mx.remote.test"`) || regexp.MustCompile(`destination="[^"]*@`).MatchString(text) {
		t.Error("a destination label carries a host or address")
	}

	// Every metric served is documented, and every one documented is served.
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	sec := string(doc)
	sec = sec[strings.Index(sec, "## Metrics"):]
	sec = sec[:strings.Index(sec[3:], "\n## ")+3]
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`(mailctl_[a-z_]+)").FindAllStringSubmatch(sec, -1) {
		documented[m[1]] = true
	}
	served := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# HELP (mailctl_[a-z_]+) `).FindAllStringSubmatch(text, -1) {
		served[m[1]] = true
		if !documented[m[1]] {
			t.Errorf("metric %s is served but not documented in docs/operations.md's Metrics section", m[1])
		}
	}
	for name := range documented {
		if !served[name] {
			t.Errorf("docs/operations.md documents %s, which the endpoint does not serve", name)
		}
	}
	// The example alerting rules use only metrics the daemon serves.
	rules, err := os.ReadFile("../packaging/prometheus/mailctl.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`mailctl_[a-z_]+`).FindAllString(string(rules), -1) {
		if !served[m] {
			t.Errorf("packaging/prometheus/mailctl.rules.yml uses %s, which the endpoint does not serve", m)
		}
	}
	if len(served) < 12 {
		t.Errorf("only %d mailctl metrics served", len(served))
	}
}

// A hook run that does not succeed is counted once, under why.
func TestHookFailuresCounted(t *testing.T) {
	m := &metrics{ops: newOpsMetrics()}
	for _, run := range []protocol.HookRun{
		{Event: "on_receive"},              // success: not a failure
		{Event: "on_receive", ExitCode: 3}, // exit
		{Event: "on_receive", TimedOut: true, ExitCode: -1},
		{Event: "after_send", ExitCode: -1, Error: "dropped: 68 hook runs already running or waiting"},
		{Event: "after_send", ExitCode: -1, Error: "fork/exec /x: no such file"},
	} {
		m.hookRun(run)
	}
	for _, c := range []struct {
		event, reason string
		want          float64
	}{{"on_receive", "exit", 1}, {"on_receive", "timeout", 1}, {"after_send", "dropped", 1}, {"after_send", "error", 1}, {"on_receive", "error", 0}} {
		var v dto.Metric
		if err := m.ops.hookFailures.WithLabelValues(c.event, c.reason).Write(&v); err != nil {
			t.Fatal(err)
		}
		if got := v.GetCounter().GetValue(); got != c.want {
			t.Errorf("%s/%s: %v, want %v", c.event, c.reason, got, c.want)
		}
	}
}
