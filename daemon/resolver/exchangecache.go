package resolver

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// ExchangeCache wraps an Exchanger with a cache that keeps each answer for
// the time its records say (RFC 1035 §3.2.1: the least TTL among the
// answer's records; RFC 2308 §5 for "no such name" and "no such record",
// which are kept only when they carry an SOA to say how long). Outbound
// delivery asks whether a domain's MX records are signed (and, when they are,
// for TLSA records) once per message; the cache answers repeats to one
// destination without a round trip. Failures (no answer, SERVFAIL,
// REFUSED…) are never kept. An answer is kept at most MaxTTL, and at most
// Max answers are kept. What it returns is the caller's: a copy whose TTLs
// count down with the time spent in the cache.
type ExchangeCache struct {
	E      Exchanger
	MaxTTL time.Duration    // default 1h
	Max    int              // default 4096
	Now    func() time.Time // default time.Now

	mu      sync.Mutex
	entries map[exchangeKey]exchangeEntry
}

type exchangeKey struct {
	name  string
	qtype uint16
}

type exchangeEntry struct {
	msg     *dns.Msg
	stored  time.Time
	expires time.Time
}

func (c *ExchangeCache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Exchange implements Exchanger.
func (c *ExchangeCache) Exchange(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	k := exchangeKey{strings.ToLower(dns.Fqdn(name)), qtype}
	now := c.now()
	c.mu.Lock()
	if e, ok := c.entries[k]; ok {
		if now.Before(e.expires) && !now.Before(e.stored) {
			m := e.msg.Copy()
			c.mu.Unlock()
			age := uint32(now.Sub(e.stored) / time.Second)
			countDown(m, age)
			return m, nil
		}
		delete(c.entries, k)
	}
	c.mu.Unlock()
	m, err := c.E.Exchange(ctx, name, qtype)
	if err != nil {
		return nil, err
	}
	ttl, ok := keepFor(m)
	maxTTL := c.MaxTTL
	if maxTTL <= 0 {
		maxTTL = time.Hour
	}
	keep := min(time.Duration(ttl)*time.Second, maxTTL)
	if !ok || keep <= 0 {
		return m, nil
	}
	max := c.Max
	if max <= 0 {
		max = 4096
	}
	c.mu.Lock()
	c.entries = room(c.entries, max, func(e exchangeEntry) bool { return !now.Before(e.expires) })
	c.entries[k] = exchangeEntry{msg: m.Copy(), stored: now, expires: now.Add(keep)}
	c.mu.Unlock()
	return m, nil
}

// keepFor is how long, in seconds, an answer may be kept, and false for one
// that must not be: a failure, or a negative answer without an SOA.
func keepFor(m *dns.Msg) (uint32, bool) {
	switch m.Rcode {
	case dns.RcodeSuccess:
		if len(m.Answer) == 0 {
			return NegativeTTL(m) // "no such record"
		}
		ttl := m.Answer[0].Header().Ttl
		for _, rr := range m.Answer[1:] {
			ttl = min(ttl, rr.Header().Ttl)
		}
		return ttl, true
	case dns.RcodeNameError:
		return NegativeTTL(m)
	}
	return 0, false
}

// countDown takes age seconds off every TTL of m (not below zero), as a
// cache answering from what it kept does (RFC 1035 §7.3).
func countDown(m *dns.Msg, age uint32) {
	for _, rrs := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range rrs {
			h := rr.Header()
			if h.Rrtype == dns.TypeOPT {
				continue // its TTL field holds flags, not a time
			}
			h.Ttl -= min(h.Ttl, age)
		}
	}
}
