package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/hooks"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// TestQueuedHookRunRechecksItsHook: a hook run waiting for a free slot
// starts only if, once it has the slot, its hook and its mailbox are still
// the ones the mail fired (same identities, not just the same names). With
// one slot, held by a hook that waits on a FIFO the test controls, mail to
// alice's mailbox hk2 queues a run of her hook h; then h is deleted, or hk2
// is deleted and bob makes a mailbox hk2 with a hook h of his own; then the
// slot is freed. The run is recorded as dropped and nothing runs: not
// alice's deleted hook on her message, with MAILCTL_FILE pointing into what
// is now bob's mailbox. A run whose hook is untouched still runs after its
// wait. No sleeps: the slot is the test's until it writes to the FIFO.
func TestQueuedHookRunRechecksItsHook(t *testing.T) {
	testusers.RequireRoot(t) // hooks run as the mailbox owner, never as root
	alice := testusers.Create(t, "mcqa")
	bob := testusers.Create(t, "mcqb")
	td, addr, _ := startInbound(t, "[hook_rules]\nmax_concurrent = 1\n")
	bin := testusers.Executable(t)
	ca := startClient(t, bin, td.socket, principal{"alice", alice.UID, alice.GID})
	cb := startClient(t, bin, td.socket, principal{"bob", bob.UID, bob.GID})

	dir := testusers.SharedDir(t)
	os.Chmod(dir, 0o777)
	started, release, ran := filepath.Join(dir, "started"), filepath.Join(dir, "release"), filepath.Join(dir, "ran")
	for _, p := range []string{started, release} {
		if err := syscall.Mkfifo(p, 0o666); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, 0o666)
	}
	hook := func(mailbox, cmd string) protocol.Hook {
		t.Helper()
		var h protocol.Hook
		name := "h"
		if mailbox == "busy" {
			name = "blocker"
		}
		if err := td.call(t, protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: mailbox, Event: protocol.EventOnReceive, Name: name,
			Cmd: []string{"/bin/sh", "-c", cmd}, FireOnUntrusted: true}, &h); err != nil {
			t.Fatal(err)
		}
		return h
	}
	ca.must(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "busy"})
	ca.must(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "hk2"})
	hook("busy", "echo up > "+started+"; read x < "+release)
	// The subject is read from the environment by the shell, never put in argv.
	aliceCmd := `printf '%s %s\n' "$MAILCTL_SUBJECT" "$MAILCTL_FILE" >> ` + ran

	// within fails the test if op has not returned in a minute (a hook
	// that never started would leave the FIFO unopened).
	within := func(what string, op func() error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- op() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s: still blocked after a minute", what)
		}
	}
	mail := func(to, subject string) {
		t.Helper()
		if err := sendSMTP(t, addr, "x@sender.test", []string{to + "@example.test"},
			"From: x@sender.test\nTo: "+to+"@example.test\nSubject: "+subject+"\nMessage-ID: <"+subject+"@sender.test>\n\nbody\n"); err != nil {
			t.Fatal(err)
		}
	}
	// queued mails hk2 while the blocker holds the only slot (its run is
	// queued before the 250), makes change, then frees the slot.
	queued := func(subject string, change func()) {
		t.Helper()
		mail("busy", "blocker-for-"+subject)
		within("waiting for the blocker hook", func() error { _, err := os.ReadFile(started); return err })
		mail("hk2", subject)
		change()
		within("releasing the blocker hook", func() error { return os.WriteFile(release, []byte("go\n"), 0) })
		td.runner.Wait()
	}
	ranLines := func() string { b, _ := os.ReadFile(ran); return string(b) }
	runsOf := func(h protocol.Hook) []protocol.HookRun {
		return td.hookLog.List(func(r protocol.HookRun) bool { return r.HookID == h.ID }, 0)
	}
	wantDropped := func(h protocol.Hook, subject, why string) {
		t.Helper()
		if strings.Contains(ranLines(), subject) {
			t.Errorf("%s: the hook ran after its slot came free: %q", subject, ranLines())
		}
		var runs []protocol.HookRun
		for _, r := range runsOf(h) {
			if strings.HasSuffix(r.MessageID, "-"+subject) {
				runs = append(runs, r)
			}
		}
		if len(runs) != 1 || runs[0].ExitCode != -1 || runs[0].Error != "dropped before it started: "+why {
			t.Errorf("%s: runs of the hook %+v, want one dropped (%s)", subject, runs, why)
		}
	}

	// Untouched: the run waits, then runs.
	h1 := hook("hk2", aliceCmd)
	queued("kept", func() {})
	if got := ranLines(); !strings.HasPrefix(got, "kept ") {
		t.Fatalf("the untouched hook's run: %q, want it run after its wait", got)
	}
	if runs := runsOf(h1); len(runs) != 1 || runs[0].ExitCode != 0 {
		t.Fatalf("runs of the untouched hook: %+v", runs)
	}

	// The hook deleted while its run waits.
	queued("hook-deleted", func() {
		ca.must(t, protocol.VerbHookDelete, protocol.HookDeleteArgs{Name: "h", Mailbox: "hk2"})
	})
	wantDropped(h1, "hook-deleted", "the hook was deleted while the run waited")

	// The mailbox deleted while the run waits, and its name taken by bob
	// with a hook of the same name.
	h2 := hook("hk2", aliceCmd)
	var bobs protocol.Hook
	queued("mailbox-replaced", func() {
		ca.must(t, protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "hk2", Force: true})
		cb.must(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "hk2"})
		json.Unmarshal(cb.must(t, protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "hk2", Event: protocol.EventOnReceive, Name: "h",
			Cmd: []string{"/bin/sh", "-c", aliceCmd}}), &bobs)
	})
	wantDropped(h2, "mailbox-replaced", "its mailbox was deleted while the run waited")
	if bobs.ID == "" || bobs.ID == h2.ID || len(runsOf(bobs)) != 0 {
		t.Errorf("bob's hook %+v: runs %+v, want a new hook that never ran", bobs, runsOf(bobs))
	}
	if got := ranLines(); got != "kept "+strings.TrimPrefix(got, "kept ") || strings.Count(got, "\n") != 1 {
		t.Errorf("hook runs: %q, want the untouched one only", got)
	}
}

// TestQueuedHookRunRechecksADeclaredHook: a hook declared in config.toml
// keeps its identity across reloads, so the check that a waiting run makes
// also compares what the hook is: one whose command a reload changed, or
// that a reload removed, is not the hook the mail fired, and neither is a
// run as another owner than the mailbox's.
func TestQueuedHookRunRechecksADeclaredHook(t *testing.T) {
	testusers.RequireRoot(t)
	u := testusers.Create(t, "mcqd")
	mbox := fmt.Sprintf("[[mailboxes]]\nname = \"ops\"\nowner = %q\n", u.Name)
	hook := "[[hooks]]\nname = \"opshook\"\nmailbox = \"ops\"\nevent = \"on_receive\"\ncmd = [%q]\n"
	td := startDaemon(t, mbox+fmt.Sprintf(hook, "/bin/true"))
	path := td.cfg.File
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var fired protocol.Hook
	for _, h := range td.allHooks() {
		if h.Name == "opshook" {
			fired = h
		}
	}
	owner := hooks.Owner{UID: u.UID, GID: u.GID}
	f := hooks.Facts{Event: protocol.EventOnReceive, Mailbox: "ops", ID: "x"}
	if err := td.hookStillCurrent(fired, owner, f); err != nil {
		t.Fatalf("the declared hook as it is: %v", err)
	}
	if err := td.hookStillCurrent(fired, hooks.Owner{UID: u.UID + 1}, f); err == nil || !strings.Contains(err.Error(), "mailbox") {
		t.Errorf("a run as another owner: %v, want refused", err)
	}
	reload := func(text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := td.Reload(path); err != nil {
			t.Fatal(err)
		}
	}
	reload(strings.Replace(string(orig), `"/bin/true"`, `"/bin/false"`, 1))
	if err := td.hookStillCurrent(fired, owner, f); err == nil || err.Error() != "the hook was changed while the run waited" {
		t.Errorf("after a reload changed its command: %v", err)
	}
	reload(strings.Replace(string(orig), fmt.Sprintf(hook, "/bin/true"), "", 1))
	if err := td.hookStillCurrent(fired, owner, f); err == nil || err.Error() != "the hook was deleted while the run waited" {
		t.Errorf("after a reload removed it: %v", err)
	}
}
