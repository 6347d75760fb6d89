package store

import (
	"strings"
	"testing"
	"time"
)

func TestThreadID(t *testing.T) {
	d := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	a := ThreadID("x@h", []string{"root@h", "mid@h"}, "mid@h", "", d, "")
	if a != ThreadID("root@h", nil, "", "other", d, "s") {
		t.Error("thread id must come from the first References entry")
	}
	if ThreadID("x@h", nil, "parent@h", "", d, "") != ThreadID("parent@h", nil, "", "", d, "") {
		t.Error("thread id must fall back to In-Reply-To")
	}
	if len(a) != 16 || strings.Trim(a, "0123456789abcdef") != "" {
		t.Errorf("thread id %q is not 16 hex characters", a)
	}
	// Without ids the hash is stable and depends on from, date and subject.
	n1 := ThreadID("", nil, "", "a@h", d, "s")
	if n1 != ThreadID("", nil, "", "a@h", d, "s") || n1 == ThreadID("", nil, "", "a@h", d, "t") {
		t.Error("id-less thread id not derived from from+date+subject")
	}
}
