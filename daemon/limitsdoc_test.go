package daemon

import (
	"fmt"
	"os"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/ingest"
	"github.com/mailctl/mailctl/daemon/outbound/remote"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// TestFixedLimitsAreTheConstants keeps the limits docs/security.md says are
// fixed by design honest: each constant the paragraph names is one of the
// code's, and where the page gives its value right after its name
// ("`protocol.MaxFrame`, 48 MiB") that is the constant's value.
func TestFixedLimitsAreTheConstants(t *testing.T) {
	bytes := func(n int) string {
		for _, u := range []struct {
			shift int
			name  string
		}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
			if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
				return fmt.Sprintf("%d %s", n>>u.shift, u.name)
			}
		}
		return fmt.Sprintf("%d bytes", n)
	}
	count := func(n int) string {
		s := fmt.Sprint(n)
		for i := len(s) - 3; i > 0; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		return s
	}
	duration := func(d time.Duration) string {
		if w, ok := map[time.Duration]string{time.Minute: "one minute", time.Hour: "one hour", 24 * time.Hour: "one day"}[d]; ok {
			return w
		}
		return d.String()
	}
	// What the page writes after each name; "" for a name it gives no
	// value after (its value is elsewhere in the sentence, or a list).
	known := map[string]string{
		"store.DedupWindow":         duration(store.DedupWindow),
		"protocol.MaxFrame":         bytes(protocol.MaxFrame),
		"store.MaxFrontmatter":      bytes(store.MaxFrontmatter),
		"store.MaxDraftAttachments": count(store.MaxDraftAttachments),
		"store.MaxLabelLen":         bytes(store.MaxLabelLen),
		"store.MaxLabels":           count(store.MaxLabels),
		"store.MaxPurge":            count(store.MaxPurge),
		"remote.MaxReplyBytes":      bytes(remote.MaxReplyBytes),
		"remote.MaxMXTries":         count(remote.MaxMXTries),
		"ingest.MaxHeaderFields":    count(ingest.MaxHeaderFields),
		"ingest.MaxHeaderBytes":     bytes(ingest.MaxHeaderBytes),
		"ingest.MaxParams":          count(ingest.MaxParams),
		"ingest.DefaultMaxParts":    count(ingest.DefaultMaxParts),
		"ingest.MaxDepth":           count(ingest.MaxDepth),
		"ingest.MaxAddresses":       count(ingest.MaxAddresses),
		"ingest.MaxReferences":      count(ingest.MaxReferences),
		"config.RoleAddresses":      "",
		"store.PurgeFolder":         "",
	}
	if store.PurgeFolder != "trash" || len(config.RoleAddresses) == 0 {
		t.Fatalf("the purge folder is %q; role names %v", store.PurgeFolder, config.RoleAddresses)
	}
	doc, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, para, ok := strings.Cut(string(doc), "\nFixed by design: ")
	if !ok {
		t.Fatal("docs/security.md has no paragraph Fixed by design")
	}
	para, _, _ = strings.Cut(para, "\n\n")
	para = strings.Join(strings.Fields(para), " ")
	names := regexp.MustCompile("`((?:store|protocol|remote|config|ingest)\\.[A-Z]\\w*)`(, )?").FindAllStringSubmatchIndex(para, -1)
	if len(names) < len(known) {
		t.Errorf("the paragraph names %d constants, the test knows %d: has its wording changed?", len(names), len(known))
	}
	for _, m := range names {
		name := para[m[2]:m[3]]
		want, ok := known[name]
		switch {
		case !ok:
			t.Errorf("security.md names %s as fixed: add it to this test with the value it gives", name)
		case want != "" && (m[4] < 0 || !regexp.MustCompile(`^`+regexp.QuoteMeta(want)+`([ ,;)]|$)`).MatchString(para[m[5]:])):
			t.Errorf("security.md: %s is %s, but the page says %q", name, want, para[m[3]:min(len(para), m[3]+30)])
		}
	}
}

// TestMemoryLimitIsDocumented holds docs/security.md's "aims at this plus
// N MiB" for control.request_memory to what the daemon sets: the garbage
// collector's memory limit is request_memory plus memoryHeadroom.
func TestMemoryLimitIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("\\| `control.request_memory` \\|[^\\n]*aims at this plus (\\d+) MiB").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/security.md's control.request_memory row no longer says what the collector aims at")
	}
	if want := fmt.Sprintf("%d", memoryHeadroom>>20); string(m[1]) != want || memoryHeadroom%(1<<20) != 0 {
		t.Errorf("the page says plus %s MiB; memoryHeadroom is %d bytes", m[1], memoryHeadroom)
	}
	t.Setenv("GOMEMLIMIT", "")
	old := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(old)
	cfg, err := config.Parse([]byte("hostname = \"mx.example.test\"\ndomains = [\"example.test\"]\n[control]\nrequest_memory = 314572800\nrequest_memory_per_uid = 104857600\n"))
	if err != nil {
		t.Fatal(err)
	}
	setMemoryLimit(cfg)
	if got, want := debug.SetMemoryLimit(-1), cfg.Control.RequestMemory+memoryHeadroom; got != want {
		t.Errorf("memory limit %d, want request_memory plus the headroom, %d", got, want)
	}
}
