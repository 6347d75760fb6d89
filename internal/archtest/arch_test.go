// Package archtest guards the import edges of DESIGN.md §2: a forbidden edge
// fails the build's tests, not a code review.
package archtest

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/mailctl/mailctl"

func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", module+"/"+pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

func TestImportEdges(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go tool is not on PATH")
	}
	rules := []struct {
		pkg     string
		allowed func(dep string) bool
		why     string
	}{
		{"protocol", func(d string) bool { return d == module+"/protocol" },
			"protocol is imported by every client and must stay standard-library only"},
		{"mcpshim", func(d string) bool {
			if !strings.HasPrefix(d, module+"/") {
				return true
			}
			return d == module+"/protocol" || d == module+"/mcpshim"
		}, "the MCP shim runs as the agent's user and may only talk to the daemon through protocol"},
		{"store", func(d string) bool {
			return strings.HasPrefix(d, "github.com/BurntSushi/toml") ||
				strings.HasPrefix(d, "golang.org/x/sys") || d == module+"/store" ||
				d == module+"/internal/tomlkeys" || d == module+"/internal/safeio"
		}, "store depends on the standard library, toml, x/sys and its internal leaves only"},
		{"hooks", func(d string) bool {
			if !strings.HasPrefix(d, module+"/") {
				return strings.HasPrefix(d, "golang.org/x/sys")
			}
			return d == module+"/protocol" || d == module+"/hooks" || d == module+"/internal/safeio"
		}, "hooks may use protocol types and the durable-write leaf at most"},
	}
	for _, r := range rules {
		for _, d := range deps(t, r.pkg) {
			if !r.allowed(d) {
				t.Errorf("%s imports %s: %s", r.pkg, d, r.why)
			}
		}
	}
}

// TestRuleCatchesForbiddenEdge makes sure the listing the rules rely on really
// reports module packages: daemon must be seen importing store.
func TestRuleCatchesForbiddenEdge(t *testing.T) {
	found := false
	for _, d := range deps(t, "daemon") {
		if d == module+"/store" {
			found = true
		}
	}
	if !found {
		t.Fatal("go list -deps of daemon does not show store; the edge rules would pass vacuously")
	}
}
