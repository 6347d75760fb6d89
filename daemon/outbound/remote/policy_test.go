package remote

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/mailctl/mailctl/daemon/outbound/delivery"
	"github.com/mailctl/mailctl/daemon/outbound/mtasts"
	"github.com/mailctl/mailctl/daemon/outbound/tlsrpt"
	"github.com/mailctl/mailctl/internal/testcert"
)

// fixedSTS answers one policy for every domain.
type fixedSTS struct{ l mtasts.Lookup }

func (f fixedSTS) Get(context.Context, string) mtasts.Lookup { return f.l }

// sessions records what the client reports.
type sessions struct {
	mu   sync.Mutex
	list []tlsrpt.Session
}

func (s *sessions) Record(x tlsrpt.Session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list = append(s.list, x)
}

func (s *sessions) results() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, x := range s.list {
		out = append(out, x.PolicyType+":"+x.ReceivingMX+":"+x.Failure)
	}
	return out
}

// dnssecMap is a validating resolver as far as the client can tell: it
// answers MX and TLSA questions with the AD bit it is told to set.
type dnssecMap struct {
	secureMX bool
	tlsa     map[string][]string // "_25._tcp.host" -> "3 1 1 <hex>"
	insecure map[string]bool     // TLSA answers without AD
	fail     map[string]bool     // SERVFAIL
}

func (m *dnssecMap) Exchange(_ context.Context, name string, qtype uint16) (*dns.Msg, error) {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	r := new(dns.Msg)
	r.SetReply(q)
	switch qtype {
	case dns.TypeMX:
		r.AuthenticatedData = m.secureMX
	case dns.TypeTLSA:
		if m.fail[name] {
			r.Rcode = dns.RcodeServerFailure
			return r, nil
		}
		r.AuthenticatedData = !m.insecure[name]
		recs := m.tlsa[name]
		if len(recs) == 0 {
			r.Rcode = dns.RcodeNameError
		}
		for _, s := range recs {
			rr, err := dns.NewRR(dns.Fqdn(name) + " 60 IN TLSA " + s)
			if err != nil {
				return nil, err
			}
			r.Answer = append(r.Answer, rr)
		}
	}
	return r, nil
}

func spkiRecord(c tls.Certificate) string {
	leaf, _ := x509.ParseCertificate(c.Certificate[0])
	h := sha256.Sum256(leaf.RawSubjectPublicKeyInfo)
	return "3 1 1 " + hex.EncodeToString(h[:])
}

// TestMTASTSEnforce: under an enforce policy the message goes only to a
// policy MX host, over TLS with a certificate valid for its name; a host
// offering no TLS, a certificate for another name, or a self-signed one
// defers (never plaintext, whatever allow_plaintext says); a host the
// policy does not name is not tried. Testing mode delivers and reports.
func TestMTASTSEnforce(t *testing.T) {
	good, pool := testcert.New(t, "mx.sts.test")
	wrongName, _ := testcert.New(t, "other.test")
	selfSigned, _ := testcert.New(t, "mx.sts.test")
	enforce := mtasts.Lookup{Policy: &mtasts.Policy{Mode: mtasts.ModeEnforce, MX: []string{"mx.sts.test", "*.backup.sts.test"}, MaxAge: time.Hour}, ID: "1"}
	testingMode := mtasts.Lookup{Policy: &mtasts.Policy{Mode: mtasts.ModeTesting, MX: []string{"mx.sts.test"}, MaxAge: time.Hour}, ID: "1"}
	tests := []struct {
		name    string
		lookup  mtasts.Lookup
		tlsCfg  *tls.Config
		mxHost  string
		wantTLS string // "" = deferred
		wantRpt string
	}{
		{"enforce, valid certificate", enforce, &tls.Config{Certificates: []tls.Certificate{good}}, "mx.sts.test", delivery.TLSMTASTSEnforce, "sts:mx.sts.test:"},
		{"enforce, wildcard pattern", enforce, &tls.Config{Certificates: []tls.Certificate{good}}, "a.backup.sts.test", "", "sts:a.backup.sts.test:certificate-host-mismatch"},
		{"enforce, no STARTTLS", enforce, nil, "mx.sts.test", "", "sts:mx.sts.test:starttls-not-supported"},
		{"enforce, certificate for another name", enforce, &tls.Config{Certificates: []tls.Certificate{wrongName}}, "mx.sts.test", "", "sts:mx.sts.test:certificate-host-mismatch"},
		{"enforce, self-signed", enforce, &tls.Config{Certificates: []tls.Certificate{selfSigned}}, "mx.sts.test", "", "sts:mx.sts.test:certificate-not-trusted"},
		{"enforce, MX not in the policy", enforce, &tls.Config{Certificates: []tls.Certificate{good}}, "mx.evil.test", "", "sts:mx.evil.test:validation-failure"},
		{"testing, self-signed delivers", testingMode, &tls.Config{Certificates: []tls.Certificate{selfSigned}}, "mx.sts.test", delivery.TLSMTASTSTesting, "sts:mx.sts.test:"},
		{"testing, no STARTTLS delivers in plaintext", testingMode, nil, "mx.sts.test", delivery.TLSNone, "sts:mx.sts.test:starttls-not-supported"},
		{"no policy, self-signed", mtasts.Lookup{}, &tls.Config{Certificates: []tls.Certificate{selfSigned}}, "mx.sts.test", delivery.TLSOpportunistic, "no-policy-found:mx.sts.test:"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			ip := "127.0.2." + string(rune('1'+i))
			w.r.SetMX("sts.test", &net.MX{Host: tt.mxHost, Pref: 10})
			w.r.SetIP(tt.mxHost, ip)
			f := w.mx(t, ip, tt.tlsCfg)
			w.d.RootCAs = pool
			w.d.AllowPlaintext = true
			w.d.STS = fixedSTS{tt.lookup}
			rec := &sessions{}
			w.d.Reports = rec
			res := w.d.Deliver(context.Background(), "a@example.com", []string{"b@sts.test"}, []byte(testMsg))
			if tt.wantTLS == "" {
				if de := deliveryErr(t, res[0]); !de.Temporary {
					t.Fatalf("want deferred, got %+v", de)
				}
				if n := len(f.Messages()); n != 0 {
					t.Fatalf("message delivered against the policy")
				}
			} else if res[0].Err != nil || res[0].TLS != tt.wantTLS {
				t.Fatalf("result %+v, want delivered with tls %q", res[0], tt.wantTLS)
			}
			if got := strings.Join(rec.results(), ","); got != tt.wantRpt {
				t.Errorf("reported %q, want %q", got, tt.wantRpt)
			}
		})
	}
}

// TestMTASTSTriesTheNextHost: enforce skips a failing MX for one that
// passes.
func TestMTASTSTriesTheNextHost(t *testing.T) {
	good, pool := testcert.New(t, "mx2.sts.test")
	selfSigned, _ := testcert.New(t, "mx1.sts.test")
	w := newWorld(t)
	w.r.SetMX("sts.test", &net.MX{Host: "mx1.sts.test", Pref: 10}, &net.MX{Host: "mx2.sts.test", Pref: 20})
	w.r.SetIP("mx1.sts.test", "127.0.3.1")
	w.r.SetIP("mx2.sts.test", "127.0.3.2")
	bad := w.mx(t, "127.0.3.1", &tls.Config{Certificates: []tls.Certificate{selfSigned}})
	ok := w.mx(t, "127.0.3.2", &tls.Config{Certificates: []tls.Certificate{good}})
	w.d.RootCAs = pool
	w.d.STS = fixedSTS{mtasts.Lookup{Policy: &mtasts.Policy{Mode: mtasts.ModeEnforce, MX: []string{"*.sts.test"}, MaxAge: time.Hour}}}
	res := w.d.Deliver(context.Background(), "a@example.com", []string{"b@sts.test"}, []byte(testMsg))
	if res[0].Err != nil || res[0].TLS != delivery.TLSMTASTSEnforce || res[0].Host != "mx2.sts.test" || len(bad.Messages()) != 0 || len(ok.Messages()) != 1 {
		t.Fatalf("%+v; bad MX got %d, good %d", res[0], len(bad.Messages()), len(ok.Messages()))
	}
}

// TestDANE: with a validated MX RRset and validated TLSA records, the
// certificate must match them (its name and issuer do not matter); a
// mismatch, no STARTTLS or a failed TLSA lookup defers; DANE wins over an
// MTA-STS policy; TLSA answers without AD, or an MX RRset that does not
// validate, leave DANE out.
func TestDANE(t *testing.T) {
	cert, _ := testcert.New(t, "whatever.invalid") // self-signed, another name: DANE-EE does not care
	other, _ := testcert.New(t, "whatever.invalid")
	stsEnforce := mtasts.Lookup{Policy: &mtasts.Policy{Mode: mtasts.ModeEnforce, MX: []string{"mx.dane.test"}, MaxAge: time.Hour}}
	tests := []struct {
		name    string
		m       *dnssecMap
		sts     mtasts.Lookup
		tlsCfg  *tls.Config
		wantTLS string
		wantRpt string
	}{
		{"matching TLSA", &dnssecMap{secureMX: true, tlsa: map[string][]string{"_25._tcp.mx.dane.test": {spkiRecord(cert)}}}, mtasts.Lookup{},
			&tls.Config{Certificates: []tls.Certificate{cert}}, delivery.TLSDANE, "tlsa:mx.dane.test:"},
		{"mismatching TLSA", &dnssecMap{secureMX: true, tlsa: map[string][]string{"_25._tcp.mx.dane.test": {spkiRecord(other)}}}, mtasts.Lookup{},
			&tls.Config{Certificates: []tls.Certificate{cert}}, "", "tlsa:mx.dane.test:tlsa-invalid"},
		{"no STARTTLS", &dnssecMap{secureMX: true, tlsa: map[string][]string{"_25._tcp.mx.dane.test": {spkiRecord(cert)}}}, mtasts.Lookup{},
			nil, "", "tlsa:mx.dane.test:starttls-not-supported"},
		{"TLSA lookup fails", &dnssecMap{secureMX: true, fail: map[string]bool{"_25._tcp.mx.dane.test": true}}, mtasts.Lookup{},
			&tls.Config{Certificates: []tls.Certificate{cert}}, "", "tlsa:mx.dane.test:dnssec-invalid"},
		{"DANE wins over MTA-STS", &dnssecMap{secureMX: true, tlsa: map[string][]string{"_25._tcp.mx.dane.test": {spkiRecord(cert)}}}, stsEnforce,
			&tls.Config{Certificates: []tls.Certificate{cert}}, delivery.TLSDANE, "tlsa:mx.dane.test:"},
		{"TLSA without AD is not DANE", &dnssecMap{secureMX: true, tlsa: map[string][]string{"_25._tcp.mx.dane.test": {spkiRecord(other)}},
			insecure: map[string]bool{"_25._tcp.mx.dane.test": true}}, mtasts.Lookup{},
			&tls.Config{Certificates: []tls.Certificate{cert}}, delivery.TLSOpportunistic, "no-policy-found:mx.dane.test:"},
		{"MX without AD is not DANE", &dnssecMap{secureMX: false, tlsa: map[string][]string{"_25._tcp.mx.dane.test": {spkiRecord(other)}}}, mtasts.Lookup{},
			&tls.Config{Certificates: []tls.Certificate{cert}}, delivery.TLSOpportunistic, "no-policy-found:mx.dane.test:"},
		{"no TLSA: MTA-STS applies", &dnssecMap{secureMX: true}, stsEnforce,
			&tls.Config{Certificates: []tls.Certificate{cert}}, "", "sts:mx.dane.test:certificate-host-mismatch"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			ip := "127.0.4." + string(rune('1'+i))
			w.r.SetMX("dane.test", &net.MX{Host: "mx.dane.test", Pref: 10})
			w.r.SetIP("mx.dane.test", ip)
			f := w.mx(t, ip, tt.tlsCfg)
			w.d.AllowPlaintext = true
			w.d.DNSSEC = tt.m
			w.d.STS = fixedSTS{tt.sts}
			rec := &sessions{}
			w.d.Reports = rec
			res := w.d.Deliver(context.Background(), "a@example.com", []string{"b@dane.test"}, []byte(testMsg))
			if tt.wantTLS == "" {
				if de := deliveryErr(t, res[0]); !de.Temporary {
					t.Fatalf("want deferred, got %+v", de)
				}
				if len(f.Messages()) != 0 {
					t.Fatalf("delivered despite DANE")
				}
			} else if res[0].Err != nil || res[0].TLS != tt.wantTLS {
				t.Fatalf("result %+v, want tls %q", res[0], tt.wantTLS)
			}
			if got := strings.Join(rec.results(), ","); got != tt.wantRpt {
				t.Errorf("reported %q, want %q", got, tt.wantRpt)
			}
		})
	}
}

// TestPolicySessionsNotShared: a session opened under one policy is not
// reused for a route whose policy differs (a cached opportunistic session
// must not carry mail an enforce policy now covers).
func TestPolicySessionsNotShared(t *testing.T) {
	selfSigned, _ := testcert.New(t, "mx.sts.test")
	w := newWorld(t)
	w.r.SetMX("sts.test", &net.MX{Host: "mx.sts.test", Pref: 10})
	w.r.SetIP("mx.sts.test", "127.0.5.1")
	f := w.mx(t, "127.0.5.1", &tls.Config{Certificates: []tls.Certificate{selfSigned}})
	res := w.d.Deliver(context.Background(), "a@example.com", []string{"b@sts.test"}, []byte(testMsg))
	if res[0].Err != nil || res[0].TLS != delivery.TLSOpportunistic {
		t.Fatalf("first: %+v", res[0])
	}
	w.d.STS = fixedSTS{mtasts.Lookup{Policy: &mtasts.Policy{Mode: mtasts.ModeEnforce, MX: []string{"mx.sts.test"}, MaxAge: time.Hour}}}
	res = w.d.Deliver(context.Background(), "a@example.com", []string{"b@sts.test"}, []byte(testMsg))
	if res[0].Err == nil || len(f.Messages()) != 1 {
		t.Fatalf("the cached session carried mail the enforce policy refuses: %+v, %d messages", res[0], len(f.Messages()))
	}
}
