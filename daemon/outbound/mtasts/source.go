package mtasts

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/safeio"
)

// Lookup is what a Source found for a recipient domain.
type Lookup struct {
	// Policy is the policy in force (enforce or testing); nil when the
	// domain has none, or its policy's mode is none.
	Policy *Policy
	ID     string
	// Failure, when the policy could not be had and none was cached, is
	// the RFC 8460 result type (sts-policy-fetch-error,
	// sts-policy-invalid, sts-webpki-invalid) and Detail what went wrong.
	Failure, Detail string
}

// Source finds recipient domains' MTA-STS policies: it reads the
// _mta-sts TXT record, fetches the policy over HTTPS when the record's id
// is new, keeps policies in Dir for their max_age, and fetches again once
// half the max_age (at most a day) has passed, at the next use, so that a
// policy in use never lapses. A policy that cannot be fetched leaves the
// cached one in force (RFC 8461 §5.1).
type Source struct {
	Resolver resolver.Resolver // the TXT record and the policy host's addresses
	// Dir keeps the policies, one JSON file per domain; root-owned. Empty:
	// in memory only.
	Dir string
	// RootCAs verify the policy host's certificate; nil: the system roots.
	RootCAs *x509.CertPool
	// Dial connects to the policy host (tests); nil: net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Port is the HTTPS port, 443 when zero (tests use another).
	Port int
	// Timeout bounds one fetch, connecting to reading the body; 20s when zero.
	Timeout time.Duration
	Now     func() time.Time
	Logger  *slog.Logger

	mu  sync.Mutex
	mem map[string]*entry
	// fetches holds one lock per domain being fetched or pruned, and
	// only while someone holds or waits for it: one fetch per domain at
	// a time, and no prune of a file a fetch may be replacing.
	fetches map[string]*domainLock
	// pruneRead, in tests, is called after Prune read an expired
	// policy's file and before it removes it.
	pruneRead func(domain string)
}

type domainLock struct {
	sync.Mutex
	users int // holders and waiters, counted under Source.mu
}

// entry is one cached policy, as kept on disk.
type entry struct {
	Domain  string    `json:"domain"`
	ID      string    `json:"id"`
	Text    string    `json:"policy"`
	Fetched time.Time `json:"fetched"`
	Expires time.Time `json:"expires"`
	policy  Policy
	// used is when a lookup last had it, under Source.mu; stored, that
	// its file holds it, so Prune may drop it from memory.
	used   time.Time
	stored bool
}

func (s *Source) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Source) log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

// refreshAfter is how long a cached policy is used before it is fetched
// again: half its max_age, at most a day.
func refreshAfter(maxAge time.Duration) time.Duration { return min(maxAge/2, 24*time.Hour) }

// Get finds domain's policy.
func (s *Source) Get(ctx context.Context, domain string) Lookup {
	domain = strings.ToLower(strings.TrimSuffix(domain, "."))
	if !validPattern(domain) || strings.HasPrefix(domain, "*.") {
		return Lookup{}
	}
	now := s.now()
	cached := s.cached(domain, now)
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	txts, err := s.Resolver.LookupTXT(lctx, "_mta-sts."+domain)
	cancel()
	id := ""
	if err == nil {
		id, err = ParseTXTRecords(txts)
	}
	if err != nil {
		// No record (or a DNS failure): a policy still cached stays in
		// force until it expires, so removing the record (or blocking
		// DNS) does not downgrade.
		return cached.lookup()
	}
	if cached != nil && cached.ID == id && now.Before(cached.Fetched.Add(refreshAfter(cached.policy.MaxAge))) {
		return cached.lookup()
	}
	unlock := s.lockDomain(domain)
	defer unlock()
	if again := s.cached(domain, now); again != nil && again.ID == id && again != cached {
		return again.lookup() // fetched meanwhile by another delivery
	}
	e, failure, ferr := s.fetch(ctx, domain, id)
	if ferr != nil {
		s.log().Info("MTA-STS policy fetch failed", "domain", domain, "result", failure, "err", ferr, "cached", cached != nil)
		if cached != nil {
			return cached.lookup()
		}
		return Lookup{Failure: failure, Detail: ferr.Error()}
	}
	s.keep(e)
	return e.lookup()
}

func (e *entry) lookup() Lookup {
	if e == nil {
		return Lookup{}
	}
	l := Lookup{ID: e.ID}
	if e.policy.Mode != ModeNone {
		p := e.policy
		l.Policy = &p
	}
	return l
}

// lockDomain takes domain's fetch lock and gives what releases it; the
// lock leaves the map when its last user releases it, so the map holds
// the domains being fetched now, not every domain ever fetched.
func (s *Source) lockDomain(domain string) (unlock func()) {
	s.mu.Lock()
	if s.fetches == nil {
		s.fetches = map[string]*domainLock{}
	}
	l := s.fetches[domain]
	if l == nil {
		l = &domainLock{}
		s.fetches[domain] = l
	}
	l.users++
	s.mu.Unlock()
	l.Lock()
	return s.unlocker(domain, l)
}

// tryLockDomain is lockDomain when no one holds or waits for domain's
// lock, and nil, without waiting, when someone does.
func (s *Source) tryLockDomain(domain string) (unlock func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fetches[domain] != nil {
		return nil
	}
	if s.fetches == nil {
		s.fetches = map[string]*domainLock{}
	}
	l := &domainLock{users: 1}
	l.Lock()
	s.fetches[domain] = l
	return s.unlocker(domain, l)
}

func (s *Source) unlocker(domain string, l *domainLock) func() {
	return func() {
		l.Unlock()
		s.mu.Lock()
		if l.users--; l.users == 0 {
			delete(s.fetches, domain)
		}
		s.mu.Unlock()
	}
}

// cached is domain's unexpired policy from memory or disk, or nil.
func (s *Source) cached(domain string, now time.Time) *entry {
	s.mu.Lock()
	e := s.mem[domain]
	if e != nil {
		e.used = now
	}
	s.mu.Unlock()
	if e == nil && s.Dir != "" {
		e = s.load(domain)
		if e != nil {
			s.mu.Lock()
			if s.mem == nil {
				s.mem = map[string]*entry{}
			}
			if cur := s.mem[domain]; cur != nil && !cur.Fetched.Before(e.Fetched) {
				e = cur // a fetch kept a newer one meanwhile
			} else {
				s.mem[domain] = e
			}
			e.used = now
			s.mu.Unlock()
		}
	}
	if e == nil || !now.Before(e.Expires) {
		return nil
	}
	return e
}

// load reads a cached policy from Dir; a file that does not parse is
// ignored (and replaced by the next fetch).
func (s *Source) load(domain string) *entry {
	e, _ := readEntry(filepath.Join(s.Dir, domain+".json"), domain)
	return e
}

// maxEntryBytes bounds a cached policy's file: the policy and its JSON
// escaping.
const maxEntryBytes = 2 * MaxPolicyBytes

// readEntry reads the policy file at path, which must be domain's, without
// blocking on a FIFO or following a link, and never more than
// maxEntryBytes.
func readEntry(path, domain string) (*entry, error) {
	b, err := safeio.ReadRegular(path, maxEntryBytes)
	if err != nil {
		return nil, err
	}
	var e entry
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, err
	}
	if e.Domain != domain {
		return nil, fmt.Errorf("%s holds the policy of %q", path, e.Domain)
	}
	p, err := ParsePolicy([]byte(e.Text))
	if err != nil {
		return nil, err
	}
	e.policy, e.stored = p, true
	return &e, nil
}

// keep records e in memory and on disk.
func (s *Source) keep(e *entry) {
	s.mu.Lock()
	if s.mem == nil {
		s.mem = map[string]*entry{}
	}
	e.used = e.Fetched
	s.mem[e.Domain] = e
	s.mu.Unlock()
	if s.Dir == "" {
		return
	}
	b, _ := json.Marshal(e)
	err := os.MkdirAll(s.Dir, 0o700)
	if err == nil {
		err = safeio.WriteFile(filepath.Join(s.Dir, e.Domain+".json"), b)
	}
	if err != nil {
		// Kept in memory only: Prune leaves it there until it expires.
		s.log().Warn("MTA-STS policy not kept on disk", "domain", e.Domain, "err", err)
		return
	}
	s.mu.Lock()
	e.stored = true
	s.mu.Unlock()
}

// Result types of RFC 8460 for a policy that could not be had.
const (
	FailFetch   = "sts-policy-fetch-error"
	FailInvalid = "sts-policy-invalid"
	FailWebPKI  = "sts-webpki-invalid"
)

var errRedirect = errors.New("the policy host redirected: MTA-STS forbids following redirects (RFC 8461 §3.3)")

// fetch gets https://mta-sts.<domain>/.well-known/mta-sts.txt with a
// verified certificate, no redirects, bounded in size and time.
func (s *Source) fetch(ctx context.Context, domain, id string) (*entry, string, error) {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = 20 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	host := "mta-sts." + domain
	port := strconv.Itoa(443)
	if s.Port != 0 {
		port = strconv.Itoa(s.Port)
	}
	tr := &http.Transport{
		Proxy:                  nil,
		DialContext:            s.dialResolved,
		TLSClientConfig:        &tls.Config{RootCAs: s.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    timeout,
		DisableKeepAlives:      true,
		MaxResponseHeaderBytes: 16 << 10,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return errRedirect }}
	authority := host
	if port != "443" {
		authority = net.JoinHostPort(host, port)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+authority+"/.well-known/mta-sts.txt", nil)
	if err != nil {
		return nil, FailFetch, err
	}
	resp, err := client.Do(req)
	if err != nil {
		var ce *tls.CertificateVerificationError
		if errors.As(err, &ce) {
			return nil, FailWebPKI, fmt.Errorf("the certificate of %s does not verify: %w", host, ce.Err)
		}
		return nil, FailFetch, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, FailFetch, fmt.Errorf("%s answered %s", host, resp.Status)
	}
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err != nil || mt != "text/plain" {
		return nil, FailInvalid, fmt.Errorf("%s served the policy as %q, not text/plain", host, resp.Header.Get("Content-Type"))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxPolicyBytes+1))
	if err != nil {
		return nil, FailFetch, err
	}
	if len(body) > MaxPolicyBytes {
		return nil, FailInvalid, fmt.Errorf("the policy of %s is larger than %d bytes", domain, MaxPolicyBytes)
	}
	p, err := ParsePolicy(body)
	if err != nil {
		return nil, FailInvalid, err
	}
	now := s.now()
	return &entry{Domain: domain, ID: id, Text: string(body), Fetched: now, Expires: now.Add(p.MaxAge), policy: p}, "", nil
}

// dialResolved connects to the policy host at an address the configured
// resolver gives, the one mail delivery uses, not the system's.
func (s *Source) dialResolved(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ips, err := s.Resolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, err
	}
	dial := s.Dial
	if dial == nil {
		dial = new(net.Dialer).DialContext
	}
	var last error = fmt.Errorf("%s has no address", host)
	for _, ip := range ips {
		c, err := dial(ctx, "tcp", net.JoinHostPort(ip.IP.String(), port))
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}
