// Package dane implements the sending side of DANE for SMTP (RFC 7672):
// TLSA records of an MX host, looked up through a validating resolver that
// says so with the AD bit, and the check of the host's certificate against
// them. Validation is the resolver's job: mailctl trusts the AD bit, so the
// resolver must be one the host trusts on a path no one else can answer on
// (a local unbound, say); doctor checks that it validates.
package dane

import (
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/mailctl/mailctl/daemon/resolver"
)

// Record is one TLSA record (RFC 6698 §2.1).
type Record struct {
	Usage, Selector, MatchingType uint8
	Data                          []byte
}

// Usages, selectors and matching types mailctl uses (RFC 7218 names).
const (
	UsageDANETA  = 2
	UsageDANEEE  = 3
	SelectorCert = 0
	SelectorSPKI = 1
	MatchFull    = 0
	MatchSHA256  = 1
	MatchSHA512  = 2
)

func (r Record) String() string {
	return fmt.Sprintf("%d %d %d %s", r.Usage, r.Selector, r.MatchingType, hex.EncodeToString(r.Data))
}

// Usable reports whether r can authenticate an SMTP server (RFC 7672
// §3.1.3): DANE-TA or DANE-EE, with a known selector and matching type of
// the right length. PKIX-TA and PKIX-EE records are not for SMTP.
func (r Record) Usable() bool {
	if r.Usage != UsageDANETA && r.Usage != UsageDANEEE || r.Selector > SelectorSPKI {
		return false
	}
	switch r.MatchingType {
	case MatchFull:
		return len(r.Data) > 0
	case MatchSHA256:
		return len(r.Data) == sha256.Size
	case MatchSHA512:
		return len(r.Data) == sha512.Size
	}
	return false
}

// Lookup is what the resolver said about an MX host's TLSA records.
type Lookup struct {
	// Secure is true when the answer (records, or their absence) was
	// validated (AD); only then does DANE apply.
	Secure  bool
	Records []Record
}

// ErrLookup is a TLSA lookup that failed (SERVFAIL, timeout): for an MX
// whose records are signed that means the host cannot be used for now (RFC
// 7672 §2.2), not that it has none.
var ErrLookup = errors.New("TLSA lookup failed")

// SecureMX reports whether domain's MX records validate (AD): DANE applies
// only to MX hosts named in a validated MX RRset (RFC 7672 §2.2.1), since
// an attacker who can change an unsigned MX can name a host of its own.
func SecureMX(ctx context.Context, ex resolver.Exchanger, domain string) bool {
	m, err := ex.Exchange(ctx, domain, dns.TypeMX)
	return err == nil && m.Rcode == dns.RcodeSuccess && m.AuthenticatedData
}

// LookupTLSA asks for _<port>._tcp.<host> TLSA. An authenticated answer
// with no records (NXDOMAIN or no data) is Secure with none: DANE does not
// apply to that host.
func LookupTLSA(ctx context.Context, ex resolver.Exchanger, host string, port int) (Lookup, error) {
	name := "_" + strconv.Itoa(port) + "._tcp." + strings.TrimSuffix(host, ".")
	m, err := ex.Exchange(ctx, name, dns.TypeTLSA)
	if err != nil {
		return Lookup{}, fmt.Errorf("%w: %s: %v", ErrLookup, name, err)
	}
	return ParseTLSA(name, m)
}

// ParseTLSA reads the answer to a TLSA question for name.
func ParseTLSA(name string, m *dns.Msg) (Lookup, error) {
	switch m.Rcode {
	case dns.RcodeSuccess, dns.RcodeNameError:
	default:
		return Lookup{}, fmt.Errorf("%w: %s: %s", ErrLookup, name, dns.RcodeToString[m.Rcode])
	}
	l := Lookup{Secure: m.AuthenticatedData}
	if m.Rcode == dns.RcodeNameError {
		return l, nil
	}
	owner := dns.Fqdn(name)
	for range 8 { // a CNAME chain in the answer
		next := ""
		for _, rr := range m.Answer {
			if c, ok := rr.(*dns.CNAME); ok && strings.EqualFold(c.Hdr.Name, owner) {
				next = c.Target
			}
		}
		if next == "" {
			break
		}
		owner = next
	}
	for _, rr := range m.Answer {
		t, ok := rr.(*dns.TLSA)
		if !ok || !strings.EqualFold(t.Hdr.Name, owner) {
			continue
		}
		data, err := hex.DecodeString(t.Certificate)
		if err != nil {
			continue
		}
		if len(l.Records) == maxRecords {
			break
		}
		l.Records = append(l.Records, Record{Usage: t.Usage, Selector: t.Selector, MatchingType: t.MatchingType, Data: data})
	}
	return l, nil
}

// maxRecords bounds the records kept from one answer.
const maxRecords = 32

// ErrNoMatch is a certificate chain that no usable TLSA record matches.
var ErrNoMatch = errors.New("the certificate matches no TLSA record")

// Verify checks the chain an MX host presented (leaf first) against its
// TLSA records (RFC 7672 §3.1): a DANE-EE record matches the leaf itself,
// with no name or expiry check; a DANE-TA record matches a certificate of
// the chain, which must then issue a chain to the leaf that is valid now
// for one of names (the MX host name, RFC 7672 §3.2.2). Records that are
// not Usable are skipped; with none usable there is nothing to verify and
// Verify fails (the caller still requires TLS).
func Verify(chain []*x509.Certificate, records []Record, names []string, now time.Time) error {
	if len(chain) == 0 {
		return errors.New("the server sent no certificate")
	}
	usable := 0
	for _, r := range records {
		if !r.Usable() {
			continue
		}
		usable++
		switch r.Usage {
		case UsageDANEEE:
			if Match(r, chain[0]) {
				return nil
			}
		case UsageDANETA:
			for i, c := range chain {
				if Match(r, c) && chainsTo(chain, i, names, now) {
					return nil
				}
			}
		}
	}
	if usable == 0 {
		return errors.New("no usable TLSA record (DANE-TA or DANE-EE)")
	}
	return ErrNoMatch
}

// chainsTo reports whether chain[ta] issues a valid chain to the leaf for
// one of names.
func chainsTo(chain []*x509.Certificate, ta int, names []string, now time.Time) bool {
	roots := x509.NewCertPool()
	roots.AddCert(chain[ta])
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	for _, n := range names {
		if _, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: strings.TrimSuffix(n, "."),
			CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err == nil {
			return true
		}
	}
	return false
}

// Match reports whether record r matches certificate c: the selected part
// (the whole certificate or its SubjectPublicKeyInfo), compared in full or
// by its SHA-256 or SHA-512 digest, in constant time.
func Match(r Record, c *x509.Certificate) bool {
	var sel []byte
	switch r.Selector {
	case SelectorCert:
		sel = c.Raw
	case SelectorSPKI:
		sel = c.RawSubjectPublicKeyInfo
	default:
		return false
	}
	var got []byte
	switch r.MatchingType {
	case MatchFull:
		got = sel
	case MatchSHA256:
		h := sha256.Sum256(sel)
		got = h[:]
	case MatchSHA512:
		h := sha512.Sum512(sel)
		got = h[:]
	default:
		return false
	}
	return len(got) == len(r.Data) && subtle.ConstantTimeCompare(got, r.Data) == 1
}
