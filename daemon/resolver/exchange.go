package resolver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// Exchanger asks one DNS question and returns the whole answer. The lookups
// that need more than net.Resolver tells (the TTLs of DNS-list answers, the
// AD bit and TLSA records of DANE) go through it; everything else goes
// through a Resolver.
type Exchanger interface {
	// Exchange asks for name's records of qtype. The answer's Rcode is
	// the caller's to read; err is a failure to get any answer (timeout,
	// network). A response with the truncation bit is retried over TCP.
	Exchange(ctx context.Context, name string, qtype uint16) (*dns.Msg, error)
}

// NewExchanger returns an Exchanger that asks server ("host:port"), or the
// first nameserver of /etc/resolv.conf when server is empty (127.0.0.1:53
// when there is none). Each question has its own deadline, timeout (5s
// when zero). Questions carry EDNS0 and set the AD bit, so a validating
// resolver says whether it validated the answer (RFC 6840 §5.7); the bit is
// only as good as the path to that resolver, which is why DANE wants it on
// the same host.
func NewExchanger(server string, timeout time.Duration) Exchanger {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	if server == "" {
		server = "127.0.0.1:53"
		if cc, err := dns.ClientConfigFromFile("/etc/resolv.conf"); err == nil && len(cc.Servers) > 0 {
			server = net.JoinHostPort(cc.Servers[0], cmpOr(cc.Port, "53"))
		}
	}
	return &exchanger{server: server, timeout: timeout}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

type exchanger struct {
	server  string
	timeout time.Duration
}

// ednsSize is the UDP payload size announced (the DNS flag day 2020 value).
const ednsSize = 1232

func (e *exchanger) Exchange(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.RecursionDesired = true
	m.AuthenticatedData = true
	m.SetEdns0(ednsSize, false)
	c := &dns.Client{Net: "udp", UDPSize: ednsSize}
	r, _, err := c.ExchangeContext(ctx, m, e.server)
	if err == nil && r.Truncated {
		c.Net = "tcp"
		r, _, err = c.ExchangeContext(ctx, m, e.server)
	}
	if err != nil {
		return nil, &net.DNSError{Err: err.Error(), Name: name, Server: e.server, IsTimeout: isTimeout(err), IsTemporary: true}
	}
	if r.Id != m.Id || len(r.Question) != 1 || !strings.EqualFold(r.Question[0].Name, m.Question[0].Name) || r.Question[0].Qtype != qtype {
		return nil, &net.DNSError{Err: "answer does not match the question", Name: name, Server: e.server, IsTemporary: true}
	}
	return r, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}

// NegativeTTL is how long a "no such record" answer may be kept (RFC 2308
// §5: the lesser of the SOA record's TTL and its MINIMUM field), and false
// when the answer carries no SOA.
func NegativeTTL(m *dns.Msg) (uint32, bool) {
	for _, rr := range m.Ns {
		if soa, ok := rr.(*dns.SOA); ok {
			return min(soa.Hdr.Ttl, soa.Minttl), true
		}
	}
	return 0, false
}

// RcodeError describes an answer whose code says the server failed
// (SERVFAIL, REFUSED, …): the name's records are unknown, not absent.
func RcodeError(name string, m *dns.Msg) error {
	return &net.DNSError{Err: fmt.Sprintf("server answered %s", dns.RcodeToString[m.Rcode]), Name: name, IsTemporary: true}
}
