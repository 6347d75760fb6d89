// Package dnsbl asks DNS block- and allow-lists (RFC 5782) about a client at
// connect, as Postfix's postscreen does: each list has a weight (negative
// for an allow-list) and the reply addresses that count as a listing; the
// weights of the lists that list the client add up to a score that is
// compared with a threshold. Answers are kept for their TTL; a list that
// does not answer in time counts as not listing the client, and says so in
// the log.
package dnsbl

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/logsum"
)

// List is one DNS list: its zone, its weight (negative for an allow-list)
// and the replies that count as a listing (DefaultReplies when empty).
type List struct {
	Zone    string
	Weight  int
	Replies []Range
}

// Hit is one list that listed the client.
type Hit struct {
	Zone   string
	Weight int
	Reply  netip.Addr
}

func (h Hit) String() string {
	return fmt.Sprintf("%s=%s weight %d", h.Zone, h.Reply, h.Weight)
}

// Verdict is what the lists say about a client.
type Verdict struct {
	Score int
	Hits  []Hit // in the order of the lists
	// Refuse is true when Score is at or above the threshold.
	Refuse bool
	// Failed are the lists that did not answer (timeout, SERVFAIL).
	Failed []string
}

// Blocking names the lists with a positive weight that listed the client,
// for the reply: "bl1.example, bl2.example".
func (v Verdict) Blocking() string {
	var z []string
	for _, h := range v.Hits {
		if h.Weight > 0 {
			z = append(z, h.Zone)
		}
	}
	return strings.Join(z, ", ")
}

// Checker asks the lists. Its fields are set once, before use.
type Checker struct {
	Lists     []List
	Threshold int
	// Timeout bounds each question (default 2s); a list that has not
	// answered by then counts as not listing the client.
	Timeout time.Duration
	DNS     resolver.Exchanger
	Now     func() time.Time
	Logger  *slog.Logger
	// Summarizer, when set, folds repeated failures of one list into one
	// line per window.
	Summarizer *logsum.Summarizer

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	ans     Answer
	expires time.Time
}

// Cache bounds: answers are kept for their TTL, but never longer than
// maxTTL (a list may delist) and at least minTTL (a zero TTL would make
// every connection ask again); an answer without a TTL is kept defaultTTL.
// At most maxEntries are kept.
const (
	minTTL     = 10 * time.Second
	maxTTL     = time.Hour
	defaultTTL = time.Minute
	maxEntries = 100_000
)

func (c *Checker) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Check asks every list about ip at once and adds up the weights of those
// that list it.
func (c *Checker) Check(ctx context.Context, ip netip.Addr) Verdict {
	answers := make([]Answer, len(c.Lists))
	errs := make([]error, len(c.Lists))
	var wg sync.WaitGroup
	for i, l := range c.Lists {
		wg.Go(func() { answers[i], errs[i] = c.ask(ctx, QueryName(ip, l.Zone)) })
	}
	wg.Wait()
	var v Verdict
	for i, l := range c.Lists {
		if errs[i] != nil {
			v.Failed = append(v.Failed, l.Zone)
			c.logFailure(l.Zone, ip, errs[i])
			continue
		}
		replies := l.Replies
		if len(replies) == 0 {
			replies = DefaultReplies
		}
		if m := answers[i].Matching(replies); len(m) > 0 {
			v.Hits = append(v.Hits, Hit{Zone: l.Zone, Weight: l.Weight, Reply: m[0]})
			v.Score += l.Weight
		}
	}
	v.Refuse = len(c.Lists) > 0 && v.Score >= c.Threshold
	return v
}

func (c *Checker) logFailure(zone string, ip netip.Addr, err error) {
	if c.Logger == nil {
		return
	}
	n := 0
	if c.Summarizer != nil {
		var ok bool
		if ok, n = c.Summarizer.Allow("dnsbl failed " + zone); !ok {
			return
		}
	}
	c.Logger.Warn("DNS list did not answer: counted as not listed", "zone", zone, "client", ip.String(), "err", err, "repeats", n)
}

// ask answers qname from the cache or from the list.
func (c *Checker) ask(ctx context.Context, qname string) (Answer, error) {
	now := c.now()
	c.mu.Lock()
	if e, ok := c.cache[qname]; ok && now.Before(e.expires) {
		c.mu.Unlock()
		return e.ans, nil
	}
	c.mu.Unlock()
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m, err := c.DNS.Exchange(ctx, qname, dns.TypeA)
	if err != nil {
		return Answer{}, err
	}
	ans, err := ParseReply(qname, m)
	if err != nil {
		return Answer{}, err
	}
	ttl := defaultTTL
	if ans.HasTTL {
		ttl = min(max(time.Duration(ans.TTL)*time.Second, minTTL), maxTTL)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cache == nil {
		c.cache = map[string]cached{}
	}
	if len(c.cache) >= maxEntries {
		for k, e := range c.cache {
			if !now.Before(e.expires) {
				delete(c.cache, k)
			}
		}
		if len(c.cache) >= maxEntries {
			c.cache = map[string]cached{}
		}
	}
	c.cache[qname] = cached{ans: ans, expires: now.Add(ttl)}
	return ans, nil
}

// Summary lists the hits as the frontmatter records them, sorted.
func (v Verdict) Summary() []string {
	out := make([]string, 0, len(v.Hits))
	for _, h := range v.Hits {
		out = append(out, h.String())
	}
	sort.Strings(out)
	return out
}
