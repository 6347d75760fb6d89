package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/protocol"
)

// The bulk queue commands against a dev daemon: scheduled sends wait in the
// queue, the summary counts them per domain, a flush by domain leaves a
// scheduled one its time and says so, the same flush naming scheduled items
// sends it now, a drop by domain removes the others, and each says how many.
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
	// The summary's filters apply (they were parsed into a copy it never sent).
	s = protocol.QueueSummary{}
	if err := json.Unmarshal([]byte(run("queue", "summary", "--json", "--domain", "one.example")), &s); err != nil {
		t.Fatal(err)
	}
	if s.Total.Items != 1 || len(s.Domains) != 1 || s.Domains[0].Domain != "one.example" {
		t.Fatalf("summary --domain one.example: %+v", s)
	}
	if out := run("queue", "flush", "--domain", "one.example"); !strings.Contains(out, "flushed 0 item(s) (0 recipient(s)) of 1 matched") ||
		!strings.Contains(out, "1 scheduled item(s) keep their time: `--state scheduled` sends them now") {
		t.Fatalf("flush of a scheduled item:\n%s", out)
	}
	if out := run("queue", "flush", "--domain", "one.example", "--state", "scheduled"); !strings.Contains(out, "flushed 1 item(s) (1 recipient(s)) of 1 matched") {
		t.Fatalf("flush --state scheduled:\n%s", out)
	}
	if out := run("queue", "drop", "--domain", "two.example", "--state", "scheduled"); !strings.Contains(out, "dropped 2 item(s) (2 recipient(s)) of 2 matched") {
		t.Fatalf("drop:\n%s", out)
	}
	// Nothing to act on without a filter or --all; a bad filter is refused
	// before the daemon is asked.
	for _, args := range [][]string{{"queue", "drop"}, {"queue", "flush", "--state", "stuck"}, {"queue", "drop", "--older-than", "soon"}, {"queue", "summary", "--state", "stuck"}} {
		if out, e, code := mailctl(t, env, args...); code != 2 {
			t.Errorf("mailctl %s: exit %d, want 2: %s%s", strings.Join(args, " "), code, out, e)
		}
	}
}

// Quota and retention from the command line: root sets a quota, the list
// shows usage against it, and a prune dry run says what it would do.
func TestMailboxQuotaAndPruneCLI(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("setting a quota and pruning are root's: run as root")
	}
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
	if out := run("mailboxes", "set", "agent", "--quota-bytes", "1GiB", "--quota-messages", "500"); !strings.Contains(out, "/1.0 GiB") || !strings.Contains(out, "/500 [mailbox]") {
		t.Fatalf("set quota:\n%s", out)
	}
	if out := run("mailboxes", "list"); !strings.Contains(out, "USAGE") || !strings.Contains(out, "/1.0 GiB, ") {
		t.Fatalf("list:\n%s", out)
	}
	if out := run("mailboxes", "prune", "--dry-run"); !strings.Contains(out, "nothing is past its folder's retention") {
		t.Fatalf("prune --dry-run:\n%s", out)
	}
	if out, e, code := mailctl(t, env, "mailboxes", "set", "agent", "--quota-bytes", "lots"); code != 2 || !strings.Contains(e, "not a size") {
		t.Fatalf("a bad size: exit %d %s%s", code, out, e)
	}
}
