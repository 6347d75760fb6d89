package trust

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/mailctl/mailctl/daemon/resolver"
)

// The SPF, DKIM and DMARC libraries type-assert *net.DNSError to tell a
// temporary failure from a missing record; the budget must hand them exactly
// that type, whatever the resolver returned.
func TestBudgetErrors(t *testing.T) {
	m := &resolver.Map{}
	m.SetTXT("a.test", "x")
	m.Fail = map[string]bool{"down.test": true}
	b := newBudget(context.Background(), m, 3)

	if v, err := b.LookupTXT(context.Background(), "a.test"); err != nil || len(v) != 1 {
		t.Fatalf("LookupTXT = %v, %v", v, err)
	}
	_, err := b.LookupTXT(context.Background(), "missing.test")
	if de, ok := err.(*net.DNSError); !ok || !de.IsNotFound || de.Temporary() {
		t.Errorf("missing name: %#v, want a not-found *net.DNSError", err)
	}
	_, err = b.LookupMX(context.Background(), "down.test")
	if de, ok := err.(*net.DNSError); !ok || de.IsNotFound || !de.Temporary() {
		t.Errorf("failing name: %#v, want a temporary *net.DNSError", err)
	}
	// The budget of 3 is spent: the next lookup is refused permanently.
	_, err = b.LookupTXT(context.Background(), "a.test")
	if de, ok := err.(*net.DNSError); !ok || de.IsNotFound || de.Temporary() {
		t.Errorf("over budget: %#v, want a permanent *net.DNSError", err)
	}

	if de, ok := normalize("x", fmt.Errorf("wrapped: %w", errors.New("odd"))).(*net.DNSError); !ok || !de.Temporary() {
		t.Errorf("unknown errors must count as temporary, got %#v", de)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b = newBudget(ctx, m, 10)
	_, err = b.LookupIPAddr(ctx, "a.test")
	if de, ok := err.(*net.DNSError); !ok || !de.Temporary() {
		t.Errorf("after the deadline: %#v, want temporary", err)
	}
}
