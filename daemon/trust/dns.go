package trust

import (
	"context"
	"net"
	"sync/atomic"

	"github.com/mailctl/mailctl/daemon/resolver"
)

// budget wraps the resolver seam for one stage of a check. It caps the number
// of lookups the stage may make, stops at the check's deadline, and turns every
// error into a *net.DNSError, because the SPF, DKIM and DMARC libraries tell a
// temporary failure from a missing record by type-asserting that exact type:
// a wrapped error would silently turn a DNS outage into a permanent failure.
type budget struct {
	ctx  context.Context
	r    resolver.Resolver
	left atomic.Int64
}

func newBudget(ctx context.Context, r resolver.Resolver, n int) *budget {
	b := &budget{ctx: ctx, r: r}
	b.left.Store(int64(n))
	return b
}

// take spends one lookup. Running out is a permanent error (neither temporary
// nor not-found): a sender whose records need more lookups than any honest
// configuration does gets permerror, not a retry.
func (b *budget) take(name string) error {
	if b.left.Add(-1) < 0 {
		return &net.DNSError{Err: "DNS lookup limit reached", Name: name}
	}
	if err := b.ctx.Err(); err != nil {
		return &net.DNSError{Err: "check deadline exceeded", Name: name, IsTimeout: true, IsTemporary: true}
	}
	return nil
}

func normalize(name string, err error) error {
	switch {
	case err == nil:
		return nil
	case resolver.IsNotFound(err):
		return &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
	}
	// Anything else, including errors we do not recognise, is treated as
	// temporary: a failure we cannot classify must never become a "fail".
	return &net.DNSError{Err: err.Error(), Name: name, IsTemporary: true}
}

// lookup spends one lookup on name and asks f with the check's context.
func lookup[T any](b *budget, name string, f func(context.Context, string) (T, error)) (T, error) {
	if err := b.take(name); err != nil {
		var zero T
		return zero, err
	}
	v, err := f(b.ctx, name)
	return v, normalize(name, err)
}

func (b *budget) LookupTXT(_ context.Context, name string) ([]string, error) {
	return lookup(b, name, b.r.LookupTXT)
}

func (b *budget) LookupMX(_ context.Context, name string) ([]*net.MX, error) {
	return lookup(b, name, b.r.LookupMX)
}

func (b *budget) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	return lookup(b, host, b.r.LookupIPAddr)
}

func (b *budget) LookupAddr(_ context.Context, addr string) ([]string, error) {
	return lookup(b, addr, b.r.LookupAddr)
}

// lookupTXT has the shape the DKIM and DMARC libraries take.
func (b *budget) lookupTXT(name string) ([]string, error) {
	return b.LookupTXT(b.ctx, name)
}
