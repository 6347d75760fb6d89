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
	if err == nil {
		return nil
	}
	if resolver.IsNotFound(err) {
		return &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
	}
	// Anything else, including errors we do not recognise, is treated as
	// temporary: a failure we cannot classify must never become a "fail".
	return &net.DNSError{Err: err.Error(), Name: name, IsTemporary: true}
}

func (b *budget) LookupTXT(_ context.Context, name string) ([]string, error) {
	if err := b.take(name); err != nil {
		return nil, err
	}
	v, err := b.r.LookupTXT(b.ctx, name)
	return v, normalize(name, err)
}

func (b *budget) LookupMX(_ context.Context, name string) ([]*net.MX, error) {
	if err := b.take(name); err != nil {
		return nil, err
	}
	v, err := b.r.LookupMX(b.ctx, name)
	return v, normalize(name, err)
}

func (b *budget) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	if err := b.take(host); err != nil {
		return nil, err
	}
	v, err := b.r.LookupIPAddr(b.ctx, host)
	return v, normalize(host, err)
}

func (b *budget) LookupAddr(_ context.Context, addr string) ([]string, error) {
	if err := b.take(addr); err != nil {
		return nil, err
	}
	v, err := b.r.LookupAddr(b.ctx, addr)
	return v, normalize(addr, err)
}

// lookupTXT has the shape the DKIM and DMARC libraries take.
func (b *budget) lookupTXT(name string) ([]string, error) {
	return b.LookupTXT(b.ctx, name)
}
