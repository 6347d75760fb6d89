package tlsrpt

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"net"
	"net/mail"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/internal/tlsrptcheck"
)

// ValidateReport checks a report's JSON against ReportSchema and returns it
// decoded generically.
func ValidateReport(t testing.TB, js []byte) map[string]any {
	t.Helper()
	inst, err := tlsrptcheck.Validate(js)
	if err != nil {
		t.Fatalf("report does not follow RFC 8460: %v\n%s", err, js)
	}
	return inst
}

// TestSchemaRefusesBrokenReports: the schema check can fail.
func TestSchemaRefusesBrokenReports(t *testing.T) {
	good := `{"organization-name":"o","contact-info":"c","report-id":"r","date-range":{"start-datetime":"2026-03-01T00:00:00Z","end-datetime":"2026-03-01T23:59:59Z"},` +
		`"policies":[{"policy":{"policy-type":"sts","policy-domain":"d.test"},"summary":{"total-successful-session-count":1,"total-failure-session-count":0}}]}`
	if _, err := tlsrptcheck.Validate([]byte(good)); err != nil {
		t.Fatalf("a good report refused: %v", err)
	}
	for _, broken := range []string{
		strings.Replace(good, `"sts"`, `"bogus"`, 1),
		strings.Replace(good, `"organization-name":"o",`, "", 1),
		strings.Replace(good, `T00:00:00Z`, `T00:00:00`, 1),
		strings.Replace(good, `"total-successful-session-count":1`, `"total-successful-session-count":"1"`, 1),
		strings.Replace(good, `"policies":[{`, `"policies":[{"failure-details":[{"result-type":"oops","failed-session-count":1}],`, 1),
	} {
		if _, err := tlsrptcheck.Validate([]byte(broken)); err == nil {
			t.Errorf("broken report passed: %s", broken)
		}
	}
}

// sent is one report the Sender got.
type sent struct {
	rep Report
	rua []string
	gz  []byte
}

// TestDailyReport records a day of sessions with an injected clock, lets
// the day roll over, and checks the reports: one per domain that publishes
// a mailto: rua, valid against the schema, with the day's counts; a domain
// without a record gets none; the counts survive a restart mid-day.
func TestDailyReport(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tlsrpt")
	now := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	var got []sent
	txt := map[string][]string{
		"_smtp._tls.sts.test":  {"v=TLSRPTv1; rua=mailto:reports@sts.test,https://reports.sts.test/upload"},
		"_smtp._tls.dane.test": {"v=TLSRPTv1;rua=mailto:tls%2Breports@dane.test"},
	}
	newRecorder := func() *Recorder {
		return &Recorder{Dir: dir, Organization: "mx.ours.test", Contact: "postmaster@ours.test", Submitter: "mx.ours.test",
			Now: func() time.Time { return now },
			LookupTXT: func(_ context.Context, name string) ([]string, error) {
				if v, ok := txt[name]; ok {
					return v, nil
				}
				return nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
			},
			Send: func(_ context.Context, r Report, rua []string, gz []byte) error {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, sent{r, rua, gz})
				return nil
			}}
	}
	r := newRecorder()
	sts := []string{"version: STSv1", "mode: enforce", "mx: mx.sts.test", "max_age: 86400"}
	for range 5 {
		r.Record(Session{PolicyDomain: "sts.test", PolicyType: PolicySTS, PolicyString: sts, MXHost: []string{"mx.sts.test"}, ReceivingMX: "mx.sts.test", ReceivingIP: "192.0.2.1"})
	}
	for range 2 {
		r.Record(Session{PolicyDomain: "sts.test", PolicyType: PolicySTS, PolicyString: sts, MXHost: []string{"mx.sts.test"},
			ReceivingMX: "mx.sts.test", ReceivingIP: "192.0.2.1", Failure: ResultCertNotTrusted, Detail: "x509: unknown authority"})
	}
	r.Record(Session{PolicyDomain: "sts.test", PolicyType: PolicySTS, PolicyString: sts, ReceivingMX: "mx2.sts.test", Failure: ResultSTARTTLSNotSupported})
	r.Tick(context.Background()) // writes the counts
	now = now.Add(3 * time.Hour)
	r = newRecorder() // a restart mid-day keeps the counts
	r.Record(Session{PolicyDomain: "dane.test", PolicyType: PolicyTLSA, PolicyString: []string{"3 1 1 abcd"}, MXHost: []string{"mx.dane.test"}, ReceivingMX: "mx.dane.test"})
	r.Record(Session{PolicyDomain: "dane.test", PolicyType: PolicyTLSA, PolicyString: []string{"3 1 1 abcd"}, MXHost: []string{"mx.dane.test"}, ReceivingMX: "mx.dane.test", Failure: ResultValidationFailure})
	r.Record(Session{PolicyDomain: "quiet.test", PolicyType: PolicyNone})
	r.Tick(context.Background())
	if len(got) != 0 {
		t.Fatalf("reports sent before the day ended: %+v", got)
	}

	now = time.Date(2026, 3, 2, 0, 0, 30, 0, time.UTC)
	r.Record(Session{PolicyDomain: "sts.test", PolicyType: PolicySTS, PolicyString: sts}) // the new day's
	r.Tick(context.Background())
	if len(got) != 2 {
		t.Fatalf("%d reports, want one for dane.test and one for sts.test: %+v", len(got), got)
	}
	want := map[string]struct {
		rua        string
		ok, failed int64
		details    int
	}{"dane.test": {"tls+reports@dane.test", 1, 1, 1}, "sts.test": {"reports@sts.test", 5, 3, 2}}
	for _, s := range got {
		zr, err := gzip.NewReader(bytes.NewReader(s.gz))
		if err != nil {
			t.Fatal(err)
		}
		js, _ := io.ReadAll(zr)
		inst := ValidateReport(t, js)
		dom := s.rep.Policies[0].Policy.Domain
		w := want[dom]
		if len(s.rua) != 1 || s.rua[0] != w.rua {
			t.Errorf("%s: rua %v, want %s", dom, s.rua, w.rua)
		}
		dr := inst["date-range"].(map[string]any)
		if dr["start-datetime"] != "2026-03-01T00:00:00Z" || dr["end-datetime"] != "2026-03-01T23:59:59Z" {
			t.Errorf("%s: date range %v", dom, dr)
		}
		pols := inst["policies"].([]any)
		if len(pols) != 1 {
			t.Fatalf("%s: %d policies", dom, len(pols))
		}
		p := pols[0].(map[string]any)
		sum := p["summary"].(map[string]any)
		if int64(sum["total-successful-session-count"].(float64)) != w.ok || int64(sum["total-failure-session-count"].(float64)) != w.failed {
			t.Errorf("%s: summary %v, want %d ok, %d failed", dom, sum, w.ok, w.failed)
		}
		if fd, _ := p["failure-details"].([]any); len(fd) != w.details {
			t.Errorf("%s: failure details %v", dom, fd)
		}
	}
	// The finished day is gone from disk, today's is kept.
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "2026-03-02.json" {
		t.Errorf("files after the rollover: %v", ents)
	}
	r.Tick(context.Background())
	if len(got) != 2 {
		t.Errorf("a day reported twice")
	}
}

// TestCompose: the mail is a multipart/report of report-type tlsrpt with the
// RFC's headers, a text part and the gzipped report, which reads back.
func TestCompose(t *testing.T) {
	rep := Report{OrganizationName: "ours", ContactInfo: "postmaster@ours.test", ReportID: "2026-03-01.sts.test@mx.ours.test",
		DateRange: DateRange{Start: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), End: time.Date(2026, 3, 1, 23, 59, 59, 0, time.UTC)},
		Policies:  []PolicyResult{{Policy: PolicyDesc{Type: PolicySTS, Domain: "sts.test"}, Summary: Summary{Successful: 3}}}}
	gz, err := Gzip(rep)
	if err != nil {
		t.Fatal(err)
	}
	m := Compose("postmaster@ours.test", []string{"reports@sts.test"}, "mx.ours.test", "r1@ours.test", rep, gz, time.Now())
	msg, err := mail.ReadMessage(bytes.NewReader(m.Raw))
	if err != nil {
		t.Fatal(err)
	}
	if msg.Header.Get("TLS-Report-Domain") != "sts.test" || msg.Header.Get("TLS-Report-Submitter") != "mx.ours.test" ||
		!strings.HasPrefix(msg.Header.Get("Subject"), "Report Domain: sts.test Submitter: mx.ours.test Report-ID: <2026-03-01.sts.test@mx.ours.test>") {
		t.Errorf("headers: %v", msg.Header)
	}
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/report" || params["report-type"] != "tlsrpt" {
		t.Fatalf("content type %q %v", msg.Header.Get("Content-Type"), err)
	}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	text, err := mr.NextPart()
	if err != nil || !strings.HasPrefix(text.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("first part: %v %v", text, err)
	}
	att, err := mr.NextPart()
	if err != nil || att.Header.Get("Content-Type") != "application/tlsrpt+gzip" || att.FileName() != "mx.ours.test!sts.test!1772323200!1772409599!2026-03-01.sts.test_mx.ours.test.json.gz" {
		t.Fatalf("report part: %v %q %v", att.Header, att.FileName(), err)
	}
	b64, _ := io.ReadAll(att)
	dec := make([]byte, len(b64))
	n, err := base64Decode(dec, b64)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(dec[:n]))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := io.ReadAll(zr)
	ValidateReport(t, js)
}

func TestParseRecord(t *testing.T) {
	mailto, other, err := ParseRecord([]string{"v=spf1 -all", "v=TLSRPTv1; rua=mailto:a@x.test, mailto:b@x.test?subject=x ,https://x.test/r"})
	if err != nil || strings.Join(mailto, ",") != "a@x.test,b@x.test" || len(other) != 1 {
		t.Errorf("%v %v %v", mailto, other, err)
	}
	for _, bad := range [][]string{nil, {"v=TLSRPTv1; rua=mailto:a@x.test", "v=TLSRPTv1; rua=mailto:b@x.test"}} {
		if _, _, err := ParseRecord(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if m, _, _ := ParseRecord([]string{"v=TLSRPTv1; rua=mailto:bad address@x.test,mailto:@x.test,mailto:evil@x.test%0d%0aBcc:y"}); len(m) != 0 {
		t.Errorf("bad addresses taken: %q", m)
	}
	// A record cannot make one report go to more than 10 addresses
	// (docs/security.md); an address named twice counts once.
	var rua []string
	for i := range 12 {
		rua = append(rua, fmt.Sprintf("mailto:r%d@x.test", i/2), fmt.Sprintf("mailto:r%d@x.test", i))
	}
	m, _, err := ParseRecord([]string{"v=TLSRPTv1; rua=" + strings.Join(rua, ",")})
	var want []string
	for i := range 10 {
		want = append(want, fmt.Sprintf("r%d@x.test", i))
	}
	if err != nil || !slices.Equal(m, want) {
		t.Errorf("a record of 12 addresses, each twice: %q, %v; want %q", m, err, want)
	}
}

func base64Decode(dst, src []byte) (int, error) {
	return base64.StdEncoding.Decode(dst, bytes.Join(bytes.Fields(src), nil))
}

// A day's counts are read by name: a link to a file elsewhere (left as it
// was) or a FIFO in place of a finished day's file is refused, never
// followed into a report nor waited on, and the name is cleared.
func TestDayFileRefusesWhatIsNoRegularFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tlsrpt")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "precious.json")
	held := `{"date":"2026-03-01","policies":[{"policy":{"policy-type":"no-policy-found","policy-domain":"elsewhere.test"},"summary":{"total-successful-session-count":1,"total-failure-session-count":0}}]}`
	if err := os.WriteFile(other, []byte(held), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, filepath.Join(dir, "2026-03-01.json")); err != nil {
		t.Fatal(err)
	}
	testwait.FIFO(t, filepath.Join(dir, "2026-03-02.json"))
	var logs bytes.Buffer
	var sentTo []string
	r := &Recorder{Dir: dir, Submitter: "mx.ours.test", Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Now: func() time.Time { return time.Date(2026, 3, 3, 9, 0, 0, 0, time.UTC) },
		LookupTXT: func(context.Context, string) ([]string, error) {
			return []string{"v=TLSRPTv1; rua=mailto:r@elsewhere.test"}, nil
		},
		Send: func(_ context.Context, rep Report, _ []string, _ []byte) error {
			sentTo = append(sentTo, rep.Policies[0].Policy.Domain)
			return nil
		}}
	testwait.Returns(t, "Tick", func() struct{} { r.Tick(context.Background()); return struct{}{} })
	if len(sentTo) != 0 {
		t.Errorf("reports sent from what the link leads to: %v", sentTo)
	}
	for _, day := range []string{"2026-03-01", "2026-03-02"} {
		path := filepath.Join(dir, day+".json")
		if !strings.Contains(logs.String(), path) {
			t.Errorf("no warning names %s:\n%s", path, logs.String())
		}
		if _, err := os.Lstat(path); err == nil {
			t.Errorf("%s left in place", path)
		}
	}
	if b, _ := os.ReadFile(other); string(b) != held {
		t.Errorf("the file the link leads to now holds %q", b)
	}
}
