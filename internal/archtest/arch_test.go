// Package archtest guards the import edges docs/architecture.md lists: a forbidden edge
// fails the build's tests, not a code review.
package archtest

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
				d == module+"/internal/tomlkeys" || d == module+"/internal/safeio" || d == module+"/internal/identtext" ||
				d == module+"/internal/formats" || indexEngine(d)
		}, "store depends on the standard library, toml, x/sys, x/text's normalization, the index engine (modernc.org/sqlite) and its internal leaves only"},
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
	// The registry is a store of files: it knows protocol's hook type and the
	// durable-write leaf, nothing of the daemon around it.
	for _, d := range deps(t, "daemon/registry") {
		if strings.HasPrefix(d, module+"/") && d != module+"/daemon/registry" && d != module+"/protocol" && d != module+"/internal/safeio" {
			t.Errorf("daemon/registry imports %s: the registry may use protocol and internal/safeio only", d)
		}
	}
	// The inbound journal knows the store it writes into and its leaves,
	// nothing of the SMTP server or the daemon that feed it.
	for _, d := range deps(t, "daemon/intake") {
		if strings.HasPrefix(d, module+"/") && !slices.Contains([]string{"daemon/intake", "store", "internal/wal", "internal/crashpoint",
			"internal/safeio", "internal/tomlkeys", "internal/identtext", "internal/formats"}, strings.TrimPrefix(d, module+"/")) {
			t.Errorf("daemon/intake imports %s: the inbound journal may use store and its internal leaves only", d)
		}
	}
	// The control API asks the daemon for health checks, listeners and the
	// send pipeline through its Backend; it never reaches into the inbound
	// path, the SMTP client, doctor or setup itself.
	for _, d := range deps(t, "daemon/control") {
		for _, bad := range []string{"daemon", "daemon/smtpin", "daemon/ingest", "daemon/doctor", "daemon/setup", "daemon/outbound/remote"} {
			if d == module+"/"+bad {
				t.Errorf("daemon/control imports %s: the control API reaches the rest of the daemon through control.Backend", d)
			}
		}
	}
	// The send pipeline and the receive pipeline meet only in the daemon's
	// wiring and in what both take from store: outbound never reaches into
	// the inbound parser or the SMTP server.
	for _, pkg := range []string{"daemon/outbound", "daemon/outbound/queue", "daemon/outbound/remote", "daemon/outbound/compose"} {
		for _, d := range deps(t, pkg) {
			for _, bad := range []string{module + "/daemon/ingest", module + "/daemon/smtpin", module + "/daemon/trust"} {
				if d == bad {
					t.Errorf("%s imports %s: outbound and inbound share code through store, not through each other", pkg, d)
				}
			}
		}
	}
	// Backup archives are read by `mailctl restore` with the daemon
	// stopped: the reader knows the store's names, the registry's
	// identities and the formats of the queue's journal and the send log
	// (policy's codec, which brings the config's send policy type),
	// nothing of the running daemon.
	for _, d := range deps(t, "daemon/backup") {
		switch strings.TrimPrefix(d, module+"/") {
		case "daemon/backup", "store", "daemon/registry", "daemon/outbound/queue", "daemon/outbound/delivery",
			"daemon/outbound/policy", "daemon/config", "protocol",
			"internal/safeio", "internal/tomlkeys", "internal/identtext", "internal/formats", "internal/wal", "internal/crashpoint":
			continue
		}
		if strings.HasPrefix(d, module+"/") {
			t.Errorf("daemon/backup imports %s: the archive code may use store, daemon/registry, the queue's journal, the send log's codec and protocol only", d)
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

// indexEngine reports whether d is the index engine, modernc.org/sqlite, or
// one of the packages it brings.
func indexEngine(d string) bool {
	return strings.HasPrefix(d, "modernc.org/") || d == "github.com/dustin/go-humanize" ||
		d == "github.com/google/uuid" || d == "github.com/remyoudompheng/bigfft" ||
		d == "github.com/mattn/go-isatty" || d == "github.com/ncruces/go-strftime"
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

// TestArchitecturePageNamesEveryPackage keeps docs/architecture.md, the page
// a newcomer reads first, from drifting: every product package of the module
// (not the test helpers, end-to-end suites or benchmarks) has its row there.
func TestArchitecturePageNamesEveryPackage(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go tool is not on PATH")
	}
	page, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "list", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		if rel == "" || strings.HasPrefix(rel, "internal/") || strings.HasPrefix(rel, "test/") || strings.HasPrefix(rel, "bench/") {
			continue
		}
		if !strings.Contains(string(page), "`"+rel+"`") {
			t.Errorf("docs/architecture.md has no row for package %s: say what it owns and what it may import", rel)
		}
	}
}

// TestDocsNameTestsThatExist: the docs point at the test that shows each
// claim ("Attacked by `TestX`"); a test renamed or removed leaves the claim
// with nothing behind it. Every Test, Fuzz or Benchmark name in a Markdown
// page of the repository is a function in some _test.go file (a name
// followed by * stands for the tests it begins).
func TestDocsNameTestsThatExist(t *testing.T) {
	root := "../.."
	defined := map[string]bool{}
	var pages []string
	funcRE := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark)\w*)\(`)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(path, "_test.go"):
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range funcRE.FindAllSubmatch(b, -1) {
				defined[string(m[1])] = true
			}
		case strings.HasSuffix(path, ".md"):
			pages = append(pages, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(defined) < 100 || len(pages) < 10 {
		t.Fatalf("found %d tests and %d pages; the check would pass vacuously", len(defined), len(pages))
	}
	nameRE := regexp.MustCompile(`\b(?:Test|Fuzz|Benchmark)[A-Z]\w*\*?`)
	named := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range nameRE.FindAllString(string(b), -1) {
			named++
			if prefix, ok := strings.CutSuffix(name, "*"); ok {
				found := false
				for d := range defined {
					found = found || strings.HasPrefix(d, prefix)
				}
				if !found {
					t.Errorf("%s names %s, but no test begins %s", page, name, prefix)
				}
				continue
			}
			if !defined[name] {
				t.Errorf("%s names %s, which no _test.go file defines: name the test that shows the claim now, or write it", page, name)
			}
		}
	}
	if named == 0 {
		t.Fatal("no page names a test; the check would pass vacuously")
	}
}
