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
				d == "golang.org/x/text/unicode/norm" || d == "golang.org/x/text/transform" ||
				d == module+"/internal/tomlkeys" || d == module+"/internal/safeio"
		}, "store depends on the standard library, toml, x/sys, x/text's normalization and its internal leaves only"},
		{"hooks", func(d string) bool {
			if !strings.HasPrefix(d, module+"/") {
				return strings.HasPrefix(d, "golang.org/x/sys")
			}
			return d == module+"/protocol" || d == module+"/hooks" || d == module+"/internal/safeio"
		}, "hooks may use protocol types and the durable-write leaf at most"},
		{"internal/wal", func(d string) bool {
			return d == module+"/internal/wal" || d == module+"/internal/safeio"
		}, "the journal file both queues keep is a standard-library leaf"},
		{"internal/crashpoint", func(d string) bool { return d == module+"/internal/crashpoint" },
			"the crash points tests arm are a standard-library leaf"},
	}
	for _, r := range rules {
		for _, d := range deps(t, r.pkg) {
			if !r.allowed(d) {
				t.Errorf("%s imports %s: %s", r.pkg, d, r.why)
			}
		}
	}
	// Key tools and the queue stay clear of the SMTP client and of the
	// Markdown renderer: a tool that only reads or writes DKIM keys must not
	// carry a mail client, and the queue only sees delivery results.
	for _, pkg := range []string{"daemon/setup", "daemon/doctor", "daemon/outbound/dkim", "daemon/outbound/queue", "daemon/outbound/delivery", "daemon/outbound/policy"} {
		for _, d := range deps(t, pkg) {
			for _, bad := range heavy {
				if d == bad || strings.HasPrefix(d, bad+"/") {
					t.Errorf("%s imports %s: key tools and the queue must not depend on the SMTP client, SASL, MIME writing or goldmark", pkg, d)
				}
			}
		}
	}
}

// heavy are the send pipeline's parts that only sending needs.
var heavy = []string{
	"github.com/emersion/go-smtp",
	"github.com/emersion/go-sasl",
	"github.com/yuin/goldmark",
	"github.com/emersion/go-message",
	module + "/daemon/outbound/remote",
	module + "/daemon/outbound/compose",
}

// TestRuleCatchesForbiddenEdge makes sure the listing the rules rely on really
// reports module packages and libraries: daemon must be seen importing store,
// and the send pipeline every heavy dependency the key tools must avoid.
func TestRuleCatchesForbiddenEdge(t *testing.T) {
	want := map[string]bool{module + "/store": false}
	for _, h := range heavy {
		want[h] = false
	}
	for _, d := range deps(t, "daemon") {
		for h := range want {
			if d == h || strings.HasPrefix(d, h+"/") {
				want[h] = true
			}
		}
	}
	for h, seen := range want {
		if !seen {
			t.Errorf("go list -deps of daemon does not show %s; the edge rules would pass vacuously", h)
		}
	}
}

// TestPureGo: no package of the module uses cgo or unsafe, so the binary is
// static and pure Go (CGO_ENABLED=0 builds it, test/e2e
// TestBinaryIsStaticPureGo checks the result), and nothing reaches into
// another package's memory behind its API.
func TestPureGo(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go tool is not on PATH")
	}
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{len .CgoFiles}} {{join .Imports \" \"}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := 0
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		pkgs++
		if f[1] != "0" {
			t.Errorf("%s has cgo files", f[0])
		}
		for _, imp := range f[2:] {
			if imp == "unsafe" || imp == "C" {
				t.Errorf("%s imports %s", f[0], imp)
			}
		}
	}
	if pkgs < 10 {
		t.Fatalf("go list saw %d packages; the check would pass vacuously", pkgs)
	}
}
