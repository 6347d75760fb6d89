// Package tlsrpt is the sending side of SMTP TLS Reporting (RFC 8460): it
// counts the TLS sessions delivery opens per policy domain, successes and
// failures with their result types, keeps the day's counts on disk, and
// at the end of each UTC day builds the aggregate report of every domain
// that publishes an _smtp._tls record and hands it to be mailed.
package tlsrpt

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mailctl/mailctl/internal/safeio"
)

// Policy types (RFC 8460 §4.3).
const (
	PolicyTLSA = "tlsa"
	PolicySTS  = "sts"
	PolicyNone = "no-policy-found"
)

// Result types mailctl reports (RFC 8460 §4.3).
const (
	ResultSTARTTLSNotSupported = "starttls-not-supported"
	ResultCertHostMismatch     = "certificate-host-mismatch"
	ResultCertExpired          = "certificate-expired"
	ResultCertNotTrusted       = "certificate-not-trusted"
	ResultValidationFailure    = "validation-failure"
	ResultTLSAInvalid          = "tlsa-invalid"
	ResultDNSSECInvalid        = "dnssec-invalid"
)

// Session is one TLS negotiation delivery attempted with an MX host of a
// policy domain, or a policy that could not be had.
type Session struct {
	PolicyDomain string
	PolicyType   string
	PolicyString []string
	MXHost       []string
	ReceivingMX  string
	ReceivingIP  string
	SendingIP    string
	// Failure is the result type; empty for a success.
	Failure string
	Detail  string
}

// Report is an aggregate report (RFC 8460 §4.4).
type Report struct {
	OrganizationName string         `json:"organization-name"`
	DateRange        DateRange      `json:"date-range"`
	ContactInfo      string         `json:"contact-info"`
	ReportID         string         `json:"report-id"`
	Policies         []PolicyResult `json:"policies"`
}

// DateRange is the day a report covers.
type DateRange struct {
	Start time.Time `json:"start-datetime"`
	End   time.Time `json:"end-datetime"`
}

// PolicyResult is one policy's counts.
type PolicyResult struct {
	Policy         PolicyDesc      `json:"policy"`
	Summary        Summary         `json:"summary"`
	FailureDetails []FailureDetail `json:"failure-details,omitempty"`
}

// PolicyDesc says which policy the counts are for.
type PolicyDesc struct {
	Type   string   `json:"policy-type"`
	String []string `json:"policy-string,omitempty"`
	Domain string   `json:"policy-domain"`
	MXHost []string `json:"mx-host,omitempty"`
}

// Summary counts sessions.
type Summary struct {
	Successful int64 `json:"total-successful-session-count"`
	Failed     int64 `json:"total-failure-session-count"`
}

// FailureDetail counts one kind of failure with one host.
type FailureDetail struct {
	ResultType    string `json:"result-type"`
	SendingIP     string `json:"sending-mta-ip,omitempty"`
	ReceivingMX   string `json:"receiving-mx-hostname,omitempty"`
	ReceivingIP   string `json:"receiving-ip,omitempty"`
	Count         int64  `json:"failed-session-count"`
	AdditionalInf string `json:"additional-information,omitempty"`
}

// Limits on what one day keeps: a flood of domains or failure kinds must not
// grow the counts without end.
const (
	maxPolicies       = 10_000
	maxFailureDetails = 100
	maxDetailLen      = 200
	// maxDayFile bounds a day's counts on disk. A day of a few thousand
	// policy domains, each with its policy and a few failure kinds, is a
	// few MiB; what would pass it is not written, so never read back.
	maxDayFile = 64 << 20
)

// day is one UTC day's counts, as kept on disk in <date>.json.
type day struct {
	Date     string          `json:"date"` // YYYY-MM-DD, as the file is named
	Policies []*PolicyResult `json:"policies"`
}

// Sender mails a finished report to a domain's rua addresses.
type Sender func(ctx context.Context, r Report, rua []string, gz []byte) error

// Recorder counts sessions and sends the reports. Set its fields before use.
type Recorder struct {
	// Dir keeps the counts, one file per day; root-owned.
	Dir string
	// Organization and Contact fill organization-name and contact-info;
	// Submitter is this host's name (report ids, file names).
	Organization, Contact, Submitter string
	// LookupTXT reads a domain's _smtp._tls record.
	LookupTXT func(ctx context.Context, name string) ([]string, error)
	Send      Sender
	Now       func() time.Time
	Logger    *slog.Logger

	mu    sync.Mutex
	today *day
	dirty bool
}

func (r *Recorder) now() time.Time {
	if r.Now != nil {
		return r.Now().UTC()
	}
	return time.Now().UTC()
}

func (r *Recorder) log() *slog.Logger {
	if r.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Logger
}

func dateOf(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// Record counts one session on the day it happens.
func (r *Recorder) Record(s Session) {
	if s.PolicyDomain == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.dayLocked(dateOf(r.now()))
	key := policyKey(s.PolicyDomain, s.PolicyType, s.PolicyString)
	var p *PolicyResult
	for _, q := range d.Policies {
		if policyKey(q.Policy.Domain, q.Policy.Type, q.Policy.String) == key {
			p = q
			break
		}
	}
	if p == nil {
		if len(d.Policies) >= maxPolicies {
			return
		}
		p = &PolicyResult{Policy: PolicyDesc{Type: s.PolicyType, String: s.PolicyString, Domain: strings.ToLower(s.PolicyDomain), MXHost: s.MXHost}}
		d.Policies = append(d.Policies, p)
	}
	r.dirty = true
	if s.Failure == "" {
		p.Summary.Successful++
		return
	}
	p.Summary.Failed++
	detail := s.Detail
	if len(detail) > maxDetailLen {
		detail = detail[:maxDetailLen]
	}
	for i := range p.FailureDetails {
		f := &p.FailureDetails[i]
		if f.ResultType == s.Failure && f.ReceivingMX == s.ReceivingMX && f.ReceivingIP == s.ReceivingIP && f.SendingIP == s.SendingIP {
			f.Count++
			return
		}
	}
	if len(p.FailureDetails) < maxFailureDetails {
		p.FailureDetails = append(p.FailureDetails, FailureDetail{ResultType: s.Failure, SendingIP: s.SendingIP,
			ReceivingMX: s.ReceivingMX, ReceivingIP: s.ReceivingIP, Count: 1, AdditionalInf: strings.ToValidUTF8(detail, "")})
	}
}

func policyKey(domain, typ string, s []string) string {
	return strings.ToLower(domain) + "\x00" + typ + "\x00" + strings.Join(s, "\x00")
}

// dayLocked is the counts of date, loaded from disk the first time.
func (r *Recorder) dayLocked(date string) *day {
	if r.today != nil && r.today.Date == date {
		return r.today
	}
	if r.today != nil && r.dirty {
		r.flushLocked() // the day before, kept for its report
	}
	d := r.load(date)
	if d == nil {
		d = &day{Date: date}
	}
	r.today, r.dirty = d, false
	return d
}

func (r *Recorder) path(date string) string { return filepath.Join(r.Dir, date+".json") }

func (r *Recorder) load(date string) *day {
	if r.Dir == "" {
		return nil
	}
	b, err := safeio.ReadRegular(r.path(date), maxDayFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		// A link or a FIFO in its place is never followed nor waited on;
		// the next write replaces it.
		r.log().Warn("TLS report counts unreadable, starting over", "file", r.path(date), "err", err)
		return nil
	}
	var d day
	if json.Unmarshal(b, &d) != nil {
		r.log().Warn("TLS report counts unreadable, starting over", "file", r.path(date))
		return nil
	}
	d.Date = date // the file's name says which day it counts
	return &d
}

// Flush writes the day's counts to disk.
func (r *Recorder) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.flushLocked()
}

func (r *Recorder) flushLocked() error {
	if r.today == nil || !r.dirty || r.Dir == "" {
		return nil
	}
	b, err := json.Marshal(r.today)
	if err != nil {
		return err
	}
	if len(b) > maxDayFile {
		return fmt.Errorf("%s: the day's counts come to %d bytes, over the %d-byte limit: not written", r.path(r.today.Date), len(b), maxDayFile)
	}
	if err := os.MkdirAll(r.Dir, 0o700); err != nil {
		return err
	}
	if err := safeio.WriteFile(r.path(r.today.Date), b); err != nil {
		return err
	}
	r.dirty = false
	return nil
}

// Tick is the recorder's clock: it writes the counts and, for every day
// before today with counts on disk, sends its reports and removes it. Run
// calls it every minute; tests call it with the time they choose.
func (r *Recorder) Tick(ctx context.Context) {
	today := dateOf(r.now())
	r.mu.Lock()
	r.dayLocked(today)
	if err := r.flushLocked(); err != nil {
		r.log().Warn("TLS report counts not written", "err", err)
	}
	r.mu.Unlock()
	if r.Dir == "" {
		return
	}
	ents, _ := os.ReadDir(r.Dir)
	for _, e := range ents {
		date, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || safeio.IsTemp(e.Name()) || date >= today {
			continue
		}
		if _, err := time.Parse(time.DateOnly, date); err != nil {
			continue
		}
		d := r.load(date)
		if d != nil {
			r.report(ctx, d)
		}
		if err := os.Remove(r.path(date)); err != nil {
			r.log().Warn("TLS report counts not removed", "file", r.path(date), "err", err)
		}
	}
}

// Run ticks every minute until ctx ends, then writes the counts.
func (r *Recorder) Run(ctx context.Context) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		r.Tick(ctx)
		select {
		case <-ctx.Done():
			r.Flush()
			return
		case <-t.C:
		}
	}
}

// report builds and sends the reports of a finished day, one per policy
// domain that publishes a TLSRPT record with a mailto: rua.
func (r *Recorder) report(ctx context.Context, d *day) {
	start, _ := time.Parse(time.DateOnly, d.Date)
	byDomain := map[string][]PolicyResult{}
	for _, p := range d.Policies {
		byDomain[p.Policy.Domain] = append(byDomain[p.Policy.Domain], *p)
	}
	domains := make([]string, 0, len(byDomain))
	for dom := range byDomain {
		domains = append(domains, dom)
	}
	sort.Strings(domains)
	for _, dom := range domains {
		rua, skipped, err := r.rua(ctx, dom)
		for _, s := range skipped {
			r.log().Info("TLS report destination skipped: only mailto: is sent", "domain", dom, "rua", s)
		}
		if err != nil || len(rua) == 0 {
			continue
		}
		rep := Report{OrganizationName: r.Organization, ContactInfo: r.Contact,
			DateRange: DateRange{Start: start, End: start.Add(24*time.Hour - time.Second)},
			ReportID:  fmt.Sprintf("%s.%s@%s", d.Date, dom, r.Submitter), Policies: byDomain[dom]}
		gz, err := Gzip(rep)
		if err == nil {
			err = r.Send(ctx, rep, rua, gz)
		}
		if err != nil {
			r.log().Warn("TLS report not sent", "domain", dom, "date", d.Date, "err", err)
			continue
		}
		r.log().Info("TLS report sent", "domain", dom, "date", d.Date, "rua", rua, "policies", len(rep.Policies))
	}
}

// Gzip is the report as RFC 8460 mails it: JSON, gzip-compressed.
func Gzip(rep Report) ([]byte, error) {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if err := json.NewEncoder(zw).Encode(rep); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// rua reads domain's _smtp._tls record (RFC 8460 §3): the mailto:
// addresses to send to, and the https: destinations skipped.
func (r *Recorder) rua(ctx context.Context, domain string) (mailto, skipped []string, err error) {
	if r.LookupTXT == nil {
		return nil, nil, errors.New("no resolver")
	}
	txts, err := r.LookupTXT(ctx, "_smtp._tls."+domain)
	if err != nil {
		return nil, nil, err
	}
	return ParseRecord(txts)
}

// ParseRecord picks the v=TLSRPTv1 record among txts and returns its
// mailto: addresses and the destinations it cannot use.
func ParseRecord(txts []string) (mailto, other []string, err error) {
	var recs []string
	for _, t := range txts {
		if strings.HasPrefix(strings.TrimSpace(t), "v=TLSRPTv1") {
			recs = append(recs, t)
		}
	}
	if len(recs) != 1 {
		return nil, nil, fmt.Errorf("%d TLSRPTv1 records, want one", len(recs))
	}
	for _, f := range strings.Split(recs[0], ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(f), "=")
		if !ok || strings.TrimSpace(k) != "rua" {
			continue
		}
		for _, u := range strings.Split(v, ",") {
			u = strings.TrimSpace(u)
			addr, isMail := strings.CutPrefix(u, "mailto:")
			if !isMail {
				other = append(other, u)
				continue
			}
			addr, _, _ = strings.Cut(addr, "?")
			if a, err := url.PathUnescape(addr); err == nil {
				addr = a
			}
			if at := strings.LastIndexByte(addr, '@'); at > 0 && at < len(addr)-1 && !strings.ContainsAny(addr, " \t\r\n<>,;") &&
				!slices.Contains(mailto, addr) && len(mailto) < 10 {
				mailto = append(mailto, addr)
			}
		}
	}
	return mailto, other, nil
}
