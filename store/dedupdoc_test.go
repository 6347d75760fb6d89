package store

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestDedupBoundsAreDocumented: docs/security.md gives the de-duplication
// window and how many deliveries are remembered; both are the code's.
func TestDedupBoundsAreDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	keep := fmt.Sprint(dedupKeep)
	for i := len(keep) - 3; i > 0; i -= 3 {
		keep = keep[:i] + "," + keep[i:]
	}
	if DedupWindow.String() != "1h0m0s" {
		t.Fatalf("DedupWindow is %v: change what security.md says of it, and this test", DedupWindow)
	}
	text := strings.Join(strings.Fields(string(doc)), " ")
	for _, want := range []string{"`store.DedupWindow` (one hour, at most " + keep + " deliveries remembered", "(`store.DedupWindow`, one hour, " + keep + " deliveries)"} {
		if !strings.Contains(text, want) {
			t.Errorf("security.md does not say %q", want)
		}
	}
}
