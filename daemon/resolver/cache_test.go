package resolver

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

type countingResolver struct {
	Map
	calls atomic.Int32
}

func (r *countingResolver) LookupTXT(ctx context.Context, name string) ([]string, error) {
	r.calls.Add(1)
	return r.Map.LookupTXT(ctx, name)
}

func TestCacheAnswersRepeatsAndExpires(t *testing.T) {
	r := &countingResolver{}
	r.SetTXT("example.test", "v=spf1 -all")
	now := time.Unix(1000, 0)
	c := &Cache{R: r, TTL: time.Minute, NegativeTTL: 10 * time.Second, Now: func() time.Time { return now }}
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		v, err := c.LookupTXT(ctx, "Example.test.")
		if err != nil || len(v) != 1 {
			t.Fatalf("lookup %d: %v %v", i, v, err)
		}
	}
	if n := r.calls.Load(); n != 1 {
		t.Fatalf("%d upstream lookups for 3 identical questions, want 1", n)
	}
	// A missing name is remembered briefly, as missing.
	if _, err := c.LookupTXT(ctx, "missing.test"); !IsNotFound(err) {
		t.Fatalf("missing: %v", err)
	}
	c.LookupTXT(ctx, "missing.test")
	if n := r.calls.Load(); n != 2 {
		t.Fatalf("negative answer not cached: %d lookups", n)
	}
	now = now.Add(11 * time.Second)
	c.LookupTXT(ctx, "missing.test")
	if n := r.calls.Load(); n != 3 {
		t.Fatalf("negative answer outlived NegativeTTL: %d lookups", n)
	}
	now = now.Add(time.Minute)
	c.LookupTXT(ctx, "example.test")
	if n := r.calls.Load(); n != 4 {
		t.Fatalf("answer outlived TTL: %d lookups", n)
	}
}

func TestCacheNeverKeepsTemporaryFailures(t *testing.T) {
	r := &countingResolver{}
	r.Fail = map[string]bool{"flaky.test": true}
	c := NewCache(r)
	for i := 0; i < 2; i++ {
		if _, err := c.LookupTXT(context.Background(), "flaky.test"); !isTemporary(err) {
			t.Fatalf("want a temporary error, got %v", err)
		}
	}
	if n := r.calls.Load(); n != 2 {
		t.Fatalf("temporary failure was cached: %d lookups", n)
	}
	var _ Resolver = c
}

func TestCacheIsBounded(t *testing.T) {
	r := &countingResolver{}
	c := &Cache{R: r, Max: 10}
	for i := 0; i < 100; i++ {
		c.LookupTXT(context.Background(), string(rune('a'+i%26))+".test"+string(rune('0'+i/26)))
	}
	if len(c.entries) > 10 {
		t.Fatalf("%d entries, max 10", len(c.entries))
	}
}

// A configured server that never answers costs one timeout per lookup, not
// whatever /etc/resolv.conf says about timeouts and attempts.
func TestConfiguredServerLookupIsBounded(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0") // a server that reads and never answers
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	r := New(pc.LocalAddr().String(), 300*time.Millisecond)
	start := time.Now()
	_, err = r.LookupTXT(context.Background(), "example.test")
	if err == nil || !isTemporary(err) {
		t.Fatalf("want a temporary error, got %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("lookup against a silent server took %v with a 300ms timeout", d)
	}
}

// isTemporary reports whether err is a lookup failure worth retrying.
func isTemporary(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && !de.IsNotFound
}
