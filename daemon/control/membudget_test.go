package control

import (
	"testing"

	"github.com/mailctl/mailctl/daemon/config"
)

func TestMemBudgetShares(t *testing.T) {
	lim := config.Control{RequestMemory: 100, RequestMemoryPerUID: 40}
	var b memBudget
	u1, u2, u3, root := Caller{UID: 1001}, Caller{UID: 1002}, Caller{UID: 1003}, Caller{UID: 0}
	if b.take(u1, 40, lim) != nil || b.take(u1, 1, lim) == nil {
		t.Fatal("a user's share is 40")
	}
	if b.take(u2, 20, lim) != nil || b.take(u3, 1, lim) == nil {
		t.Fatal("users together get 60 (100 less one share kept for root)")
	}
	if b.take(root, 40, lim) != nil || b.take(root, 1, lim) == nil {
		t.Fatal("root gets what is left of the 100")
	}
	b.give(u1, 40)
	b.give(u2, 20)
	b.give(root, 40)
	if h, total := b.byUID[u1.UID], b.total; h != 0 || total != 0 || len(b.byUID) != 0 {
		t.Errorf("after giving everything back: %d %d %v", h, total, b.byUID)
	}
	if b.peak != 100 {
		t.Errorf("peak %d, want 100", b.peak)
	}
}
