package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// TestDraftsCLI: a draft made with the CLI, edited on disk by a person, is
// sent as edited (the dev daemon captures it), and leaves drafts; a
// scheduled send is listed as scheduled, rescheduled and dropped.
func TestDraftsCLI(t *testing.T) {
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
	var d protocol.Draft
	if err := json.Unmarshal([]byte(run("drafts", "create", "agent", "--to", "pat@outside.example", "--subject", "Proposal", "--body", "draft by the agent", "--json")), &d); err != nil {
		t.Fatal(err)
	}
	if list := run("drafts", "list", "agent"); !strings.Contains(list, d.ID) || !strings.Contains(list, "Proposal") {
		t.Fatalf("drafts list:\n%s", list)
	}
	data, err := os.ReadFile(d.Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.Path, []byte(strings.Replace(string(data), "draft by the agent", "wording fixed by a person", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if show := run("drafts", "show", "agent", d.ID); !strings.Contains(show, "wording fixed by a person") {
		t.Fatalf("drafts show does not show the edit:\n%s", show)
	}
	run("drafts", "update", "agent", d.ID, "--subject", "Proposal v2")
	if out := run("drafts", "send", "agent", d.ID); !strings.Contains(out, "captured, not sent") {
		t.Fatalf("drafts send:\n%s", out)
	}
	if list := run("drafts", "list", "agent"); !strings.Contains(list, "no drafts") {
		t.Fatalf("the sent draft is still listed:\n%s", list)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := protocol.Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var l protocol.MessageList
	testwait.For(t, "the captured copy", func() bool {
		return c.Call(ctx, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "captured"}, &l) == nil && len(l.Messages) == 1
	})
	var m protocol.Message
	if err := c.Call(ctx, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "captured", ID: l.Messages[0].ID}, &m); err != nil {
		t.Fatal(err)
	}
	if m.Subject != "Proposal v2" || !strings.Contains(m.Body, "wording fixed by a person") {
		t.Fatalf("what arrived: %q %q", m.Subject, m.Body)
	}

	// Scheduled: listed with its time, rescheduled, then cancelled.
	var res protocol.SendResult
	json.Unmarshal([]byte(run("send", "--from", "agent", "--to", "pat@outside.example", "--subject", "Later", "--body", "b", "--send-at", "3h", "--json")), &res)
	if res.Status != "scheduled" || res.SendAt == nil || time.Until(*res.SendAt) < 2*time.Hour {
		t.Fatalf("send --send-at: %+v", res)
	}
	if q := run("queue", "list"); !strings.Contains(q, "scheduled") {
		t.Fatalf("queue list:\n%s", q)
	}
	var qi protocol.QueueItem
	when := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	json.Unmarshal([]byte(run("queue", "reschedule", res.ID, when.Format(time.RFC3339), "--json")), &qi)
	if !qi.Scheduled || qi.SendAt == nil || !qi.SendAt.Equal(when) {
		t.Fatalf("reschedule: %+v", qi)
	}
	if _, e, code := mailctl(t, env, "queue", "reschedule", res.ID, "2020-01-01T00:00:00Z"); code == 0 || !strings.Contains(e, "past") {
		t.Fatalf("reschedule into the past: exit %d: %s", code, e)
	}
	run("queue", "drop", res.ID)
}

// TestDraftsCLIPrintsInert: a draft's fields come from senders (a reply
// draft copies the subject and Reply-To of the message it answers) and
// from hand edits; drafts list and show, like mail list and read, print
// them with escape sequences, bidirectional overrides and invisible
// characters removed, and --json prints nothing but the JSON.
func TestDraftsCLIPrintsInert(t *testing.T) {
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
	var d protocol.Draft
	if err := json.Unmarshal([]byte(run("drafts", "create", "agent", "--to", "pat@outside.example", "--subject", "Proposal", "--body", "b", "--json")), &d); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(d.Path)
	if err != nil {
		t.Fatal(err)
	}
	hostile := `\u001b]52;c;cGF5bG9hZA==\u0007\u001b[2J\u202egnp.exe\u2066\u00ad\U000E0041\U000E0042`
	s := strings.Replace(string(data), `subject = "Proposal"`, `subject = "`+hostile+`"`, 1)
	s = strings.Replace(s, `"pat@outside.example"`, `"`+hostile+` <pat@outside.example>"`, 1)
	s = strings.Replace(s, "\n+++\n\nb", "\nlabels = [\""+hostile+"\"]\n+++\n\nbody \x1b[31mred\x1b[0m \u202e", 1)
	if err := os.WriteFile(d.Path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"drafts", "list", "agent"},
		{"drafts", "show", "agent", d.ID},
		{"mail", "list", "--mailbox", "agent", "--folder", "drafts"},
		{"mail", "read", d.ID, "--mailbox", "agent", "--folder", "drafts"},
	} {
		out := run(args...)
		if !strings.Contains(out, d.ID) {
			t.Errorf("%s does not show the draft:\n%s", strings.Join(args, " "), out)
		}
		for _, bad := range []string{"\x1b", "\a", "\u202e", "\u2066", "\u00ad", "\U000E0041", "cGF5bG9hZA"} {
			if strings.Contains(out, bad) {
				t.Errorf("%s prints %q:\n%q", strings.Join(args, " "), bad, out)
			}
		}
		out = run(append(args, "--json")...)
		if !json.Valid([]byte(out)) || strings.Contains(out, "\x1b") {
			t.Errorf("%s --json prints more than JSON:\n%q", strings.Join(args, " "), out)
		}
	}
}
