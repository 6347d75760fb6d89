package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/protocol"
)

// The bulk queue commands against a dev daemon: scheduled sends wait in the
// queue, the summary counts them per domain, a flush by domain sends one
// now, a drop by domain removes the other, and each says how many.
func TestQueueBulkCLI(t *testing.T) {
	_, _, sock := startDev(t, t.TempDir())
	env := []string{"MAILCTL_SOCKET=" + sock}
	run := func(args ...string) string {
		t.Helper()
		out, e, code := mailctl(t, env, args...)
		if code != 0 {
			t.Fatalf("mailctl %s: exit %d: %s%s", strings.Join(args, " "), code, e, out)
		}
		return out
	}
	for _, to := range []string{"pat@one.example", "sam@two.example", "kim@two.example"} {
		run("send", "--from", "agent", "--to", to, "--subject", "Later", "--body", "b", "--send-at", "3h")
	}
	var s protocol.QueueSummary
	if err := json.Unmarshal([]byte(run("queue", "summary", "--json")), &s); err != nil {
		t.Fatal(err)
	}
	if s.Total.Items != 3 || len(s.Domains) != 2 || s.Domains[0].Domain != "two.example" || s.Domains[0].Items != 2 || s.Domains[0].Buckets[0] != 2 {
		t.Fatalf("summary: %+v", s)
	}
	if out := run("queue", "summary"); !strings.Contains(out, "two.example") || !strings.Contains(out, "1280+") {
		t.Fatalf("summary table:\n%s", out)
	}
	if out := run("queue", "flush", "--domain", "one.example"); !strings.Contains(out, "flushed 1 item(s) (1 recipient(s)) of 1 matched") {
		t.Fatalf("flush:\n%s", out)
	}
	if out := run("queue", "drop", "--domain", "two.example", "--state", "scheduled"); !strings.Contains(out, "dropped 2 item(s) (2 recipient(s)) of 2 matched") {
		t.Fatalf("drop:\n%s", out)
	}
	// Nothing to act on without a filter or --all; a bad filter is refused
	// before the daemon is asked.
	for _, args := range [][]string{{"queue", "drop"}, {"queue", "flush", "--state", "stuck"}, {"queue", "drop", "--older-than", "soon"}} {
		if out, e, code := mailctl(t, env, args...); code != 2 {
			t.Errorf("mailctl %s: exit %d, want 2: %s%s", strings.Join(args, " "), code, out, e)
		}
	}
}
