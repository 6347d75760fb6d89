package remote

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/dane"
	"github.com/mailctl/mailctl/daemon/outbound/delivery"
	"github.com/mailctl/mailctl/daemon/outbound/mtasts"
	"github.com/mailctl/mailctl/daemon/outbound/tlsrpt"
)

// PolicySource finds a recipient domain's MTA-STS policy (mtasts.Source).
type PolicySource interface {
	Get(ctx context.Context, domain string) mtasts.Lookup
}

// SessionRecorder counts TLS sessions for the daily reports
// (tlsrpt.Recorder).
type SessionRecorder interface {
	Record(s tlsrpt.Session)
}

// tlsPolicy is what one MX route demands of TLS, and how its sessions are
// reported.
type tlsPolicy struct {
	kind   string // delivery.TLSDANE, TLSMTASTSEnforce, TLSMTASTSTesting or TLSOpportunistic
	domain string
	tlsa   []dane.Record
	// What RFC 8460 reports call the policy.
	rptType   string
	rptString []string
	rptMX     []string
}

// required reports whether the route may only be used over TLS whose
// certificate the policy accepts: never plaintext, never a downgrade.
func (p tlsPolicy) required() bool {
	return p.kind == delivery.TLSDANE || p.kind == delivery.TLSMTASTSEnforce
}

// name is the policy as the delivery log and errors name it.
func (p tlsPolicy) name() string {
	if p.kind == delivery.TLSDANE {
		return "DANE"
	}
	return "MTA-STS"
}

// key tells sessions made under different policies apart in the cache.
func (p tlsPolicy) key() string {
	if len(p.tlsa) == 0 {
		return p.kind
	}
	h := sha256.New()
	for _, r := range p.tlsa {
		h.Write([]byte(r.String()))
	}
	return p.kind + ":" + hex.EncodeToString(h.Sum(nil)[:8])
}

// domainPolicy is what a recipient domain publishes, looked up once per
// delivery: its MTA-STS policy and whether its MX records validate.
type domainPolicy struct {
	domain    string
	sts       mtasts.Lookup
	secureMX  bool
	stsLines  []string
	stsReport []string
}

func (d *Client) domainPolicy(ctx context.Context, domain string, fallback bool) domainPolicy {
	dp := domainPolicy{domain: domain}
	if d.STS != nil {
		dp.sts = d.STS.Get(ctx, domain)
		if p := dp.sts.Policy; p != nil {
			dp.stsLines, dp.stsReport = p.Lines(), p.MX
		}
		if dp.sts.Failure != "" {
			d.record(tlsrpt.Session{PolicyDomain: domain, PolicyType: tlsrpt.PolicySTS, Failure: dp.sts.Failure, Detail: dp.sts.Detail})
		}
	}
	if d.DNSSEC != nil && !fallback {
		lctx, cancel := context.WithTimeout(ctx, dnsTimeout)
		dp.secureMX = dane.SecureMX(lctx, d.DNSSEC, domain)
		cancel()
	}
	return dp
}

// hostPolicy decides how host may be used: DANE when its TLSA records are
// validated (DANE wins over MTA-STS, RFC 8461 §2), else the MTA-STS policy
// (a host an enforce policy does not name is not used), else opportunistic
// TLS. An error means the host cannot be used now.
func (d *Client) hostPolicy(ctx context.Context, dp domainPolicy, host string, port int) (tlsPolicy, *delivery.Error) {
	if dp.secureMX {
		lctx, cancel := context.WithTimeout(ctx, dnsTimeout)
		l, err := dane.LookupTLSA(lctx, d.DNSSEC, host, port)
		cancel()
		switch {
		case err != nil:
			// RFC 7672 §2.2: a signed MX whose TLSA records cannot be had
			// is not used until they can.
			d.record(tlsrpt.Session{PolicyDomain: dp.domain, PolicyType: tlsrpt.PolicyTLSA, MXHost: []string{host}, ReceivingMX: host,
				Failure: tlsrpt.ResultDNSSECInvalid, Detail: err.Error()})
			return tlsPolicy{}, &delivery.Error{Temporary: true, Code: 451, Enhanced: "4.4.3", Host: host,
				Message: fmt.Sprintf("the TLSA records of %s could not be looked up (%v); DANE forbids using the host without them", host, err)}
		case l.Secure && len(l.Records) > 0:
			p := tlsPolicy{kind: delivery.TLSDANE, domain: dp.domain, tlsa: l.Records, rptType: tlsrpt.PolicyTLSA, rptMX: []string{host}}
			for _, r := range l.Records {
				p.rptString = append(p.rptString, r.String())
			}
			return p, nil
		}
	}
	if sp := dp.sts.Policy; sp != nil {
		p := tlsPolicy{kind: delivery.TLSMTASTSTesting, domain: dp.domain, rptType: tlsrpt.PolicySTS, rptString: dp.stsLines, rptMX: dp.stsReport}
		if sp.Mode == mtasts.ModeEnforce {
			p.kind = delivery.TLSMTASTSEnforce
		}
		if !sp.Matches(host) {
			d.record(tlsrpt.Session{PolicyDomain: dp.domain, PolicyType: tlsrpt.PolicySTS, PolicyString: p.rptString, MXHost: p.rptMX,
				ReceivingMX: host, Failure: tlsrpt.ResultValidationFailure, Detail: "MX host not in the policy"})
			if p.kind == delivery.TLSMTASTSEnforce {
				return tlsPolicy{}, &delivery.Error{Temporary: true, Code: 451, Enhanced: "4.7.5", Host: host,
					Message: fmt.Sprintf("MX host %s is not one the MTA-STS policy of %s names (enforce): not used", host, dp.domain)}
			}
		}
		return p, nil
	}
	return tlsPolicy{kind: delivery.TLSOpportunistic, domain: dp.domain, rptType: tlsrpt.PolicyNone}, nil
}

// tlsFailure is a TLS session that did not meet the route's policy, with
// the RFC 8460 result type it is reported as.
type tlsFailure struct {
	result string
	err    error
}

func (f *tlsFailure) Error() string { return f.err.Error() }
func (f *tlsFailure) Unwrap() error { return f.err }

// checkPolicy applies the route's policy to a finished handshake whose
// certificate verify judged (verr nil: valid for the host name).
func (d *Client) checkPolicy(tc *tls.Conn, rt route, verr error) error {
	switch rt.pol.kind {
	case delivery.TLSDANE:
		certs := tc.ConnectionState().PeerCertificates
		if err := dane.Verify(certs, rt.pol.tlsa, []string{rt.host}, d.now()); err != nil {
			return &tlsFailure{tlsrpt.ResultTLSAInvalid, fmt.Errorf("DANE: the certificate of %s: %w", rt.host, err)}
		}
	case delivery.TLSMTASTSEnforce:
		if verr != nil {
			return &tlsFailure{certResult(verr), fmt.Errorf("MTA-STS: the certificate of %s is not valid for its name: %w", rt.host, verr)}
		}
	}
	return nil
}

// certResult is the RFC 8460 result type of a certificate that did not
// verify.
func certResult(err error) string {
	var host x509.HostnameError
	var inv x509.CertificateInvalidError
	var unknown x509.UnknownAuthorityError
	switch {
	case errors.As(err, &host):
		return tlsrpt.ResultCertHostMismatch
	case errors.As(err, &inv) && inv.Reason == x509.Expired:
		return tlsrpt.ResultCertExpired
	case errors.As(err, &unknown):
		return tlsrpt.ResultCertNotTrusted
	}
	return tlsrpt.ResultValidationFailure
}

// reportSession counts one TLS negotiation with rt: tlsErr nil and plain
// false is a success.
func (d *Client) reportSession(rt route, plain bool, tlsErr error) {
	if rt.relay || d.Reports == nil {
		return
	}
	s := tlsrpt.Session{PolicyDomain: rt.pol.domain, PolicyType: rt.pol.rptType, PolicyString: rt.pol.rptString, MXHost: rt.pol.rptMX,
		ReceivingMX: rt.host}
	if ip, _, err := net.SplitHostPort(rt.addr); err == nil {
		s.ReceivingIP = ip
	}
	var tf *tlsFailure
	switch {
	case errors.As(tlsErr, &tf):
		s.Failure, s.Detail = tf.result, tf.err.Error()
	case tlsErr != nil:
		s.Failure, s.Detail = tlsrpt.ResultValidationFailure, tlsErr.Error()
	case plain:
		s.Failure = tlsrpt.ResultSTARTTLSNotSupported
	}
	d.record(s)
}

func (d *Client) record(s tlsrpt.Session) {
	if d.Reports != nil && s.PolicyDomain != "" {
		d.Reports.Record(s)
	}
}

func (d *Client) now() time.Time {
	if d.Clock != nil {
		return d.Clock()
	}
	return time.Now()
}

// errNoSTARTTLS is a host that does not offer STARTTLS on a route whose
// policy requires it.
func errNoSTARTTLS(rt route) error {
	return &tlsFailure{tlsrpt.ResultSTARTTLSNotSupported, fmt.Errorf("%s does not offer STARTTLS, which the %s policy of %s requires", rt.host, rt.pol.name(), rt.pol.domain)}
}
