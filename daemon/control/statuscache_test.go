package control

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/protocol"
)

// countingBackend counts the host checks run.
type countingBackend struct {
	fakeBackend
	runs int
}

func (b *countingBackend) Health(context.Context) []protocol.Finding {
	b.runs++
	return []protocol.Finding{{ID: "host.check", Severity: "info", Message: "ran"}}
}

// Users' status calls share the host checks' findings for healthTTL, so a
// user calling status in a loop runs them at most once per healthTTL;
// root's calls run them afresh, and a clock stepped back runs them again.
func TestStatusSharesTheHostChecksAmongUsers(t *testing.T) {
	reg, _, err := registry.Open(filepath.Join(t.TempDir(), "registry"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := &countingBackend{}
	s := New(Options{Registry: reg, Backend: b, Now: func() time.Time { return now }})
	status := func(who Caller) {
		t.Helper()
		res, err := handleStatus(context.Background(), s, &call{caller: who}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if f := res.(protocol.Status).Findings; len(f) != 1 || f[0].ID != "host.check" {
			t.Fatalf("findings %+v", f)
		}
	}
	user, other, root := Caller{UID: 1001, GID: 1001}, Caller{UID: 1002, GID: 1002}, Caller{}
	for range 5 {
		status(user)
		status(other)
	}
	if b.runs != 1 {
		t.Errorf("ten users' calls within %v ran the checks %d times, want 1", healthTTL, b.runs)
	}
	status(root)
	status(root)
	if b.runs != 3 {
		t.Errorf("root's two calls: %d runs in all, want 3", b.runs)
	}
	now = now.Add(healthTTL)
	status(user)
	if b.runs != 4 {
		t.Errorf("a user's call %v later: %d runs, want 4", healthTTL, b.runs)
	}
	now = now.Add(-time.Hour)
	status(user)
	if b.runs != 5 {
		t.Errorf("a user's call after the clock stepped back: %d runs, want 5", b.runs)
	}
}
