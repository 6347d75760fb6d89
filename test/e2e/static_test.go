package e2e

import (
	"debug/elf"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestBinaryIsStaticPureGo: the mailctl under test, built as every build
// script builds it, is one static pure-Go binary: built with CGO_ENABLED=0,
// no ELF interpreter (nothing for the dynamic loader to do) and no shared
// library needed, so it runs on any Linux of its architecture and `mailctl
// mcp` loads nothing of the host's.
func TestBinaryIsStaticPureGo(t *testing.T) {
	if strings.Contains(os.Getenv("MAILCTL_BUILDFLAGS"), "-race") {
		t.Skip("a -race build needs cgo; it is a test build, not the shipped binary")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go tool is not on PATH")
	}
	out, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m %s: %v\n%s", bin, err, out)
	}
	if !strings.Contains(string(out), "\tCGO_ENABLED=0\n") {
		t.Errorf("%s was not built with CGO_ENABLED=0:\n%s", bin, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s has a %v program header: it is dynamically linked", bin, p.Type)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v (%v)", bin, libs, err)
	}
}
