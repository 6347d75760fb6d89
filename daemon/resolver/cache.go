package resolver

import (
	"context"
	"net"
	"sync"
	"time"
)

// Cache wraps a Resolver with a small time-bounded cache. Inbound mail from
// one domain asks the same SPF and DMARC questions for every message; the
// cache answers repeats without a round trip. Answers live for TTL (the
// records' own TTLs are not visible through net.Resolver, so this is kept
// short); "no such record" is remembered for NegativeTTL; temporary failures
// are never cached. At most Max entries are kept.
type Cache struct {
	R           Resolver
	TTL         time.Duration // default 60s
	NegativeTTL time.Duration // default 15s
	Max         int           // default 10000
	Now         func() time.Time

	mu      sync.Mutex
	entries map[cacheKey]cacheEntry
}

type cacheKey struct{ kind, name string }

type cacheEntry struct {
	val     any
	err     error
	expires time.Time
}

// NewCache returns a cache in front of r with the default limits.
func NewCache(r Resolver) *Cache { return &Cache{R: r} }

func (c *Cache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func lookup[T any](c *Cache, kind, name string, f func() (T, error)) (T, error) {
	k := cacheKey{kind, key(name)}
	now := c.now()
	c.mu.Lock()
	if e, ok := c.entries[k]; ok && now.Before(e.expires) {
		c.mu.Unlock()
		v, _ := e.val.(T)
		return v, e.err
	}
	c.mu.Unlock()
	v, err := f()
	ttl := c.TTL
	if ttl <= 0 {
		ttl = time.Minute
	}
	if err != nil {
		if !IsNotFound(err) {
			return v, err
		}
		ttl = c.NegativeTTL
		if ttl <= 0 {
			ttl = 15 * time.Second
		}
	}
	max := c.Max
	if max <= 0 {
		max = 10000
	}
	c.mu.Lock()
	c.entries = room(c.entries, max, func(e cacheEntry) bool { return !now.Before(e.expires) })
	c.entries[k] = cacheEntry{val: v, err: err, expires: now.Add(ttl)}
	c.mu.Unlock()
	return v, err
}

// room returns m (a new map when m is nil) with space for one more entry
// under max: when it is full, the expired entries are dropped, and when
// that is not enough, all of them.
func room[K comparable, V any](m map[K]V, max int, expired func(V) bool) map[K]V {
	if m == nil {
		return map[K]V{}
	}
	if len(m) < max {
		return m
	}
	for k, v := range m {
		if expired(v) {
			delete(m, k)
		}
	}
	if len(m) >= max {
		return map[K]V{}
	}
	return m
}

// LookupTXT implements Resolver.
func (c *Cache) LookupTXT(ctx context.Context, name string) ([]string, error) {
	return lookup(c, "txt", name, func() ([]string, error) { return c.R.LookupTXT(ctx, name) })
}

// LookupMX implements Resolver.
func (c *Cache) LookupMX(ctx context.Context, name string) ([]*net.MX, error) {
	return lookup(c, "mx", name, func() ([]*net.MX, error) { return c.R.LookupMX(ctx, name) })
}

// LookupIPAddr implements Resolver.
func (c *Cache) LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error) {
	return lookup(c, "ip", host, func() ([]net.IPAddr, error) { return c.R.LookupIPAddr(ctx, host) })
}

// LookupAddr implements Resolver.
func (c *Cache) LookupAddr(ctx context.Context, addr string) ([]string, error) {
	return lookup(c, "ptr", addr, func() ([]string, error) { return c.R.LookupAddr(ctx, addr) })
}
