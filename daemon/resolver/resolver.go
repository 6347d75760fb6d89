// Package resolver is mailctl's one DNS seam. Trust checks (SPF, DKIM, DMARC),
// MX delivery and doctor's DNS checks all look names up through a Resolver, so
// tests substitute a Map and operators may point the daemon at a resolver of
// their choice.
package resolver

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"time"
)

// Resolver looks up the records mailctl needs.
type Resolver interface {
	LookupTXT(ctx context.Context, name string) ([]string, error)
	LookupMX(ctx context.Context, name string) ([]*net.MX, error)
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
	LookupAddr(ctx context.Context, addr string) ([]string, error)
}

// New returns a resolver that asks server ("host:port", e.g. "127.0.0.1:53"),
// or the system's resolver when server is empty.
func New(server string, timeout time.Duration) Resolver {
	if server == "" {
		return &net.Resolver{}
	}
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	return &bounded{timeout: timeout, r: &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			d := net.Dialer{Timeout: timeout}
			return d.DialContext(ctx, network, server)
		},
	}}
}

// bounded gives every lookup its own deadline: Go's resolver otherwise takes
// its timeout and retry count from /etc/resolv.conf even when the operator
// named another server.
type bounded struct {
	timeout time.Duration
	r       *net.Resolver
}

func (b *bounded) LookupTXT(ctx context.Context, name string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.r.LookupTXT(ctx, name)
}

func (b *bounded) LookupMX(ctx context.Context, name string) ([]*net.MX, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.r.LookupMX(ctx, name)
}

func (b *bounded) LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.r.LookupIPAddr(ctx, host)
}

func (b *bounded) LookupAddr(ctx context.Context, addr string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.r.LookupAddr(ctx, addr)
}

// IsNotFound reports whether err means the name or record does not exist
// (NXDOMAIN or no data), as opposed to a temporary failure.
func IsNotFound(err error) bool {
	var de *net.DNSError
	if errors.As(err, &de) {
		return de.IsNotFound
	}
	return errors.Is(err, ErrNotFound)
}

// IsTemporary reports whether err is a lookup failure worth retrying.
func IsTemporary(err error) bool {
	if err == nil || IsNotFound(err) {
		return false
	}
	var de *net.DNSError
	if errors.As(err, &de) {
		return de.IsTemporary || de.IsTimeout || !de.IsNotFound
	}
	return errors.Is(err, ErrTemporary)
}

// ErrNotFound and ErrTemporary are what Map returns; real lookups return
// *net.DNSError, which IsNotFound and IsTemporary also understand.
var (
	ErrNotFound  = errors.New("no such record")
	ErrTemporary = errors.New("temporary DNS failure")
)

// Map is an in-memory Resolver for tests. Names are matched case-insensitively
// without a trailing dot. A name listed in Fail answers ErrTemporary for every type.
type Map struct {
	mu   sync.RWMutex
	TXT  map[string][]string
	MX   map[string][]*net.MX
	IP   map[string][]net.IPAddr
	PTR  map[string][]string
	Fail map[string]bool
}

func key(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) }

func (m *Map) check(name string) error {
	if m.Fail[key(name)] {
		return &net.DNSError{Err: "server misbehaving", Name: name, IsTemporary: true}
	}
	return nil
}

func notFound(name string) error {
	return &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
}

// SetTXT, SetMX and SetIP add records; they make a Map easy to build in tests.
func (m *Map) SetTXT(name string, vals ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.TXT == nil {
		m.TXT = map[string][]string{}
	}
	m.TXT[key(name)] = vals
}

// SetMX sets the MX records of name.
func (m *Map) SetMX(name string, mx ...*net.MX) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.MX == nil {
		m.MX = map[string][]*net.MX{}
	}
	m.MX[key(name)] = mx
}

// SetIP sets the addresses of host.
func (m *Map) SetIP(host string, ips ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.IP == nil {
		m.IP = map[string][]net.IPAddr{}
	}
	var addrs []net.IPAddr
	for _, s := range ips {
		addrs = append(addrs, net.IPAddr{IP: net.ParseIP(s)})
	}
	m.IP[key(host)] = addrs
}

// LookupTXT implements Resolver.
func (m *Map) LookupTXT(_ context.Context, name string) ([]string, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if err := m.check(name); err != nil {
		return nil, err
	}
	if v, ok := m.TXT[key(name)]; ok {
		return v, nil
	}
	return nil, notFound(name)
}

// LookupMX implements Resolver.
func (m *Map) LookupMX(_ context.Context, name string) ([]*net.MX, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if err := m.check(name); err != nil {
		return nil, err
	}
	if v, ok := m.MX[key(name)]; ok {
		return v, nil
	}
	return nil, notFound(name)
}

// LookupIPAddr implements Resolver.
func (m *Map) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if err := m.check(host); err != nil {
		return nil, err
	}
	if ip := net.ParseIP(host); ip != nil {
		return []net.IPAddr{{IP: ip}}, nil
	}
	if v, ok := m.IP[key(host)]; ok {
		return v, nil
	}
	return nil, notFound(host)
}

// LookupAddr implements Resolver.
func (m *Map) LookupAddr(_ context.Context, addr string) ([]string, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if v, ok := m.PTR[addr]; ok {
		return v, nil
	}
	return nil, notFound(addr)
}
