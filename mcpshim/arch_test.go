package mcpshim

import (
	"os/exec"
	"strings"
	"testing"
)

// The shim runs as the user and must only speak the protocol: it may not link
// the store, the daemon or the hooks (DESIGN.md §2).
func TestArchitectureImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/mailctl/mailctl/mcpshim").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if !strings.HasPrefix(dep, "github.com/mailctl/mailctl/") {
			continue
		}
		switch dep {
		case "github.com/mailctl/mailctl/mcpshim", "github.com/mailctl/mailctl/protocol":
			continue
		}
		for _, banned := range []string{"/store", "/daemon", "/hooks"} {
			if strings.HasPrefix(strings.TrimPrefix(dep, "github.com/mailctl/mailctl"), banned) {
				t.Errorf("mcpshim depends on %s", dep)
			}
		}
		t.Errorf("mcpshim depends on %s; it may import only protocol", dep)
	}
}
