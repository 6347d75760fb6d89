package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A second `mailctl dev` in the folder of one that runs stops before it
// writes anything: the running instance's config.toml (which SIGHUP and
// mailctl reload re-read) keeps the running instance's flags.
func TestDevConfigLeavesARunningInstanceAlone(t *testing.T) {
	dir := t.TempDir()
	o := DevOptions{Dir: dir, SMTP: "127.0.0.1:2525", Domain: "mailctl.test", Mailbox: "agent", Trusted: []string{"*@mailctl.test"}}
	cfg, err := DevConfig(o)
	if err != nil {
		t.Fatal(err)
	}
	lock, err := acquireLock(cfg.Paths.Socket) // the running instance
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	before, err := os.ReadFile(filepath.Join(dir, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	o.SMTP, o.Domain, o.Trusted = "127.0.0.1:2599", "other.test", []string{"*@other.test"}
	if _, err := DevConfig(o); err == nil || !strings.Contains(err.Error(), "another mailctl daemon is running") {
		t.Fatalf("DevConfig with the folder's daemon running: %v, want the lock's refusal", err)
	}
	after, err := os.ReadFile(filepath.Join(dir, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Fatalf("a refused dev start rewrote the running instance's config:\n%s", after)
	}
	lock.Close()
	if _, err := DevConfig(o); err != nil {
		t.Fatalf("DevConfig once the instance stopped: %v", err)
	}
}
