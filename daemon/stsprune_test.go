package daemon

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/testclock"
)

// TestSTSPruneOnTheDaemonsClock: the daemon's hourly prune of the MTA-STS
// cache removes, from <state_dir>/mta-sts, the policies expired on the
// daemon's clock and keeps the ones still in force.
func TestSTSPruneOnTheDaemonsClock(t *testing.T) {
	clk := testclock.New()
	td := startDaemonWith(t, "", Options{Resolver: &resolver.Map{}, Clock: clk.Now})
	if td.out.sts == nil {
		t.Fatal("no MTA-STS source with delivery.mta_sts on")
	}
	dir := filepath.Join(td.cfg.Paths.StateDir, "mta-sts")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(domain string, fetched time.Time) {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"domain": domain, "id": "1",
			"policy":  "version: STSv1\nmode: enforce\nmx: mx." + domain + "\nmax_age: 86400\n",
			"fetched": fetched, "expires": fetched.Add(24 * time.Hour)})
		if err := os.WriteFile(filepath.Join(dir, domain+".json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("old.test", clk.Now().Add(-25*time.Hour))
	write("new.test", clk.Now().Add(-23*time.Hour))
	td.out.pruneSTSOnce()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if !slices.Equal(left, []string{"new.test.json"}) {
		t.Errorf("left %v, want only the unexpired policy", left)
	}
}
