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
	return &bounded{server: server, timeout: timeout, r: &net.Resolver{
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
	server  string
	timeout time.Duration
	r       *net.Resolver
}

// within runs one lookup under the resolver's own deadline. Go's resolver
// names the servers of /etc/resolv.conf in its errors even though Dial sent
// the query to b.server: the error is made to name the server asked.
func within[T any](b *bounded, ctx context.Context, lookup func(context.Context, string) (T, error), name string) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	v, err := lookup(ctx, name)
	var de *net.DNSError
	if errors.As(err, &de) && de.Server != "" {
		de.Server = b.server
	}
	return v, err
}

func (b *bounded) LookupTXT(ctx context.Context, name string) ([]string, error) {
	return within(b, ctx, b.r.LookupTXT, name)
}

func (b *bounded) LookupMX(ctx context.Context, name string) ([]*net.MX, error) {
	return within(b, ctx, b.r.LookupMX, name)
}

func (b *bounded) LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error) {
	return within(b, ctx, b.r.LookupIPAddr, host)
}

func (b *bounded) LookupAddr(ctx context.Context, addr string) ([]string, error) {
	return within(b, ctx, b.r.LookupAddr, addr)
}

// IsNotFound reports whether err means the name or record does not exist
// (NXDOMAIN or no data), as opposed to a temporary failure.
func IsNotFound(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}

// Map is an in-memory Resolver for tests. Names are matched case-insensitively
// without a trailing dot. A name listed in Fail answers a temporary failure for
// every type.
type Map struct {
	mu   sync.RWMutex
	TXT  map[string][]string
	MX   map[string][]*net.MX
	IP   map[string][]net.IPAddr
	PTR  map[string][]string
	Fail map[string]bool
}

func key(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) }

// set stores vals under name in the table *t, making the table on first use.
func set[T any](m *Map, t *map[string][]T, name string, vals []T) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if *t == nil {
		*t = map[string][]T{}
	}
	(*t)[key(name)] = vals
}

// SetTXT, SetMX and SetIP add records; they make a Map easy to build in tests.
func (m *Map) SetTXT(name string, vals ...string) { set(m, &m.TXT, name, vals) }

// SetMX sets the MX records of name.
func (m *Map) SetMX(name string, mx ...*net.MX) { set(m, &m.MX, name, mx) }

// SetIP sets the addresses of host.
func (m *Map) SetIP(host string, ips ...string) {
	var addrs []net.IPAddr
	for _, s := range ips {
		addrs = append(addrs, net.IPAddr{IP: net.ParseIP(s)})
	}
	set(m, &m.IP, host, addrs)
}

// get answers name from table t: a temporary failure for a name in Fail, the
// records when there are some, and not-found otherwise.
func get[T any](m *Map, t map[string][]T, name string) ([]T, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.Fail[key(name)] {
		return nil, &net.DNSError{Err: "server misbehaving", Name: name, IsTemporary: true}
	}
	if v, ok := t[key(name)]; ok {
		return v, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
}

// LookupTXT implements Resolver.
func (m *Map) LookupTXT(_ context.Context, name string) ([]string, error) {
	return get(m, m.TXT, name)
}

// LookupMX implements Resolver.
func (m *Map) LookupMX(_ context.Context, name string) ([]*net.MX, error) {
	return get(m, m.MX, name)
}

// LookupIPAddr implements Resolver. An address literal answers itself.
func (m *Map) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	if ip := net.ParseIP(host); ip != nil {
		return []net.IPAddr{{IP: ip}}, nil
	}
	return get(m, m.IP, host)
}

// LookupAddr implements Resolver. PTR records are keyed by the address as given.
func (m *Map) LookupAddr(_ context.Context, addr string) ([]string, error) {
	return get(m, m.PTR, addr)
}
