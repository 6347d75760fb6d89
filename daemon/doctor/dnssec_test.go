package doctor

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/mailctl/mailctl/daemon/config"
)

// adResolver answers every question with the AD bit it is told to set, or
// an error.
type adResolver struct {
	ad    bool
	rcode int
	err   error
	asked []string
}

func (a *adResolver) Exchange(_ context.Context, name string, qtype uint16) (*dns.Msg, error) {
	a.asked = append(a.asked, name)
	if a.err != nil {
		return nil, a.err
	}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	m := new(dns.Msg)
	m.SetReply(q)
	m.AuthenticatedData, m.Rcode = a.ad, a.rcode
	return m, nil
}

// TestDNSSECFinding: doctor says whether the resolver validates, from the
// AD bit of its answer for the probe name.
func TestDNSSECFinding(t *testing.T) {
	for _, tc := range []struct {
		name     string
		r        *adResolver
		dane     bool
		sev, has string
	}{
		{"validates", &adResolver{ad: true}, true, OK, "validates DNSSEC"},
		{"does not validate", &adResolver{}, true, Warn, "does not validate"},
		{"SERVFAIL", &adResolver{rcode: dns.RcodeServerFailure}, true, Warn, "SERVFAIL"},
		{"unreachable", &adResolver{err: errors.New("connection refused")}, true, Warn, "connection refused"},
		{"DANE off", &adResolver{}, false, Info, "DANE is off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte("[dns]\ndnssec_probe = \"signed.test\"\n"))
			if err != nil {
				t.Fatal(err)
			}
			*cfg.Delivery.DANE = tc.dane
			var f findings
			checkDNSSEC(context.Background(), &f, cfg, Env{DNSSEC: tc.r})
			if len(f) != 1 || f[0].ID != "dns.dnssec" || f[0].Severity != tc.sev || !strings.Contains(f[0].Message, tc.has) {
				t.Fatalf("findings %+v, want one dns.dnssec %s saying %q", f, tc.sev, tc.has)
			}
			if tc.dane && (len(tc.r.asked) != 1 || tc.r.asked[0] != "signed.test") {
				t.Errorf("asked %v, want the probe name", tc.r.asked)
			}
		})
	}
}
