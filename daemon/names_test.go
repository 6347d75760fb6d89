package daemon

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/outbound"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/hooks"
	"github.com/mailctl/mailctl/internal/fakemx"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// TestNamesCarryNoHistory: a user deletes its hook and its mailbox; another
// user creates a mailbox and a hook with the same names. The newcomer sees
// none of the first user's hook runs (message ids, subjects, stderr), its
// new hook has no last run, and hook names are scoped to their mailbox, so
// neither a named nor an unnamed hook tells one user what another has.
// status counts only the caller's queued mail.
func TestNamesCarryNoHistory(t *testing.T) {
	td, c1, c2 := twoUsers(t, "mcn")

	// u2's history under the names "shared" and "h".
	c2.must(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "shared"})
	c2.must(t, protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "shared", Event: "on_receive", Name: "h",
		Cmd: []string{"/bin/sh", "-c", "echo u2-secret-stderr >&2; exit 3"}})
	td.fireHooks(protocol.EventOnReceive, "shared", "", hooks.Facts{Event: protocol.EventOnReceive, Mailbox: "shared",
		ID: "2026-01-01-000000-u2-private-subject", Subject: "u2 private subject", Trusted: "true"}, func() []byte { return []byte("x") })
	td.runner.Wait()
	if runs := c2.must(t, protocol.VerbHookRuns, protocol.HookRunsArgs{}); !strings.Contains(string(runs), "u2-secret-stderr") {
		t.Fatalf("u2 does not see its own run: %s", runs)
	}
	c2.must(t, protocol.VerbHookDelete, protocol.HookDeleteArgs{Name: "h"})
	c2.must(t, protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "shared", Force: true})

	// u1 takes both names.
	c1.must(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "shared"})
	c1.must(t, protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "shared", Event: "on_receive", Name: "h", Cmd: []string{"/bin/true"}})
	for _, verb := range []string{protocol.VerbHookRuns, protocol.VerbHookList} {
		var args any
		if verb == protocol.VerbHookRuns {
			args = protocol.HookRunsArgs{Name: "h"}
		}
		data := string(c1.must(t, verb, args))
		for _, secret := range []string{"u2-secret-stderr", "u2-private-subject", `"exit_code":3`, "last_run"} {
			if strings.Contains(data, secret) {
				t.Errorf("%s as u1 shows u2's history (%s): %s", verb, secret, data)
			}
		}
	}

	// Hook names are per mailbox: u2 holds "x" and an unnamed hook; u1 may
	// create the same on its own mailbox, and learns nothing from it.
	c2.must(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "u2box"})
	c2.must(t, protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "u2box", Event: "on_receive", Name: "x", Cmd: []string{"/bin/true"}})
	c2.must(t, protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "u2box", Event: "on_receive", Cmd: []string{"/usr/local/bin/u2-agent"}})
	c1.must(t, protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "shared", Event: "on_receive", Name: "x", Cmd: []string{"/bin/false"}})
	var h protocol.Hook
	json.Unmarshal(c1.must(t, protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "shared", Event: "on_receive", Cmd: []string{"/usr/local/bin/u2-agent"}}), &h)
	if h.Mailbox != "shared" || h.Cmd[0] != "/usr/local/bin/u2-agent" {
		t.Errorf("u1's unnamed hook: %+v", h)
	}
	// Deleting by name touches one's own hook only.
	c1.must(t, protocol.VerbHookDelete, protocol.HookDeleteArgs{Name: "x"})
	var l protocol.HookList
	json.Unmarshal(c2.must(t, protocol.VerbHookList, protocol.HookListArgs{Mailbox: "u2box"}), &l)
	if len(l.Hooks) != 2 {
		t.Errorf("u2's hooks after u1 deleted its own x: %+v", l.Hooks)
	}

	// status counts the caller's queue only.
	c2.must(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "u2box", To: []string{"a@remote.test"}, Subject: "held", Body: "b"})
	var st protocol.Status
	json.Unmarshal(c1.must(t, protocol.VerbStatus, nil), &st)
	if st.QueueDepth != 0 {
		t.Errorf("u1's status counts %d queued messages, all u2's", st.QueueDepth)
	}
	json.Unmarshal(c2.must(t, protocol.VerbStatus, nil), &st)
	if st.QueueDepth != 1 {
		t.Errorf("u2's status counts %d queued messages, want its 1", st.QueueDepth)
	}
}

// TestQueueAndIdempotencyCarryNoHistory: a user queues mail (held) with
// an idempotency key from mailbox "reused", then deletes the mailbox;
// another user creates "reused". The newcomer sees none of the old queue
// items and cannot act on them, and a send with the same idempotency key
// sends the newcomer's own message instead of answering with the old one.
func TestQueueAndIdempotencyCarryNoHistory(t *testing.T) {
	_, c1, c2 := twoUsers(t, "mcq")
	send := protocol.SendArgs{FromMailbox: "reused", To: []string{"x@remote.test"}, Subject: "u2 private subject", Body: "b", IdempotencyKey: "key-1"}
	c2.must(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "reused"})
	var old protocol.SendResult
	json.Unmarshal(c2.must(t, protocol.VerbSend, send), &old)
	oldQueueID := "reused." + old.ID
	c2.must(t, protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "reused", Force: true})

	c1.must(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "reused"})
	if data := string(c1.must(t, protocol.VerbQueueList, nil)); strings.Contains(data, old.ID) || strings.Contains(data, "u2 private") {
		t.Errorf("u1's queue list shows u2's mail: %s", data)
	}
	for _, verb := range []string{protocol.VerbQueueShow, protocol.VerbQueueRetry, protocol.VerbQueueDrop} {
		if o := c1.do(t, verb, protocol.QueueIDArgs{ID: oldQueueID}); o.Code != protocol.CodeNotFound {
			t.Errorf("%s of u2's item as u1: %q %s, want not_found", verb, o.Code, o.Msg)
		}
	}
	send.Subject = "u1's own"
	var mine protocol.SendResult
	json.Unmarshal(c1.must(t, protocol.VerbSend, send), &mine)
	if mine.Duplicate || mine.MessageID == old.MessageID || mine.ID == "" {
		t.Errorf("u1's send with the same idempotency key answered with u2's message: %+v", mine)
	}
	var l protocol.QueueList
	json.Unmarshal(c1.must(t, protocol.VerbQueueList, nil), &l)
	if len(l.Items) != 1 || l.Items[0].MessageID != mine.MessageID {
		t.Errorf("u1's queue: %+v, want its own held message only", l.Items)
	}
}

// TestRateLimitsCarryNoHistory: a user sends up to its per-minute limit
// from mailbox "rl" (one send scheduled) and deletes it. Created again by
// the same user, "rl" keeps its counts: deleting a mailbox does not reset
// its owner's limit. Created by another user, it starts at zero: mailbox.show
// counts no sends and both of the newcomer's sends go through.
func TestRateLimitsCarryNoHistory(t *testing.T) {
	_, c1, c2 := twoUsersWith(t, "mcr", "per_minute = 2\n")
	later := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
	send := protocol.SendArgs{FromMailbox: "rl", To: []string{"x@remote.test"}, Subject: "s", Body: "b"}
	scheduled := send
	scheduled.SendAt = &later
	c2.must(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "rl"})
	c2.must(t, protocol.VerbSend, send)
	c2.must(t, protocol.VerbSend, scheduled)
	c2.must(t, protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "rl", Force: true})

	c2.must(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "rl"})
	if o := c2.do(t, protocol.VerbSend, send); o.Code != protocol.CodeRateLimited {
		t.Errorf("u2's send from its re-created mailbox: %q %s, want rate_limited", o.Code, o.Msg)
	}
	c2.must(t, protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "rl", Force: true})

	c1.must(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "rl"})
	var mb protocol.Mailbox
	json.Unmarshal(c1.must(t, protocol.VerbMailboxShow, protocol.NameArgs{Name: "rl"}), &mb)
	if mb.Send == nil || len(mb.Send.Rate) == 0 {
		t.Fatalf("mailbox.show as u1 has no send rates: %+v", mb.Send)
	}
	for _, r := range mb.Send.Rate {
		if r.Used != 0 || r.Remaining != r.Limit {
			t.Errorf("mailbox.show as u1 counts u2's sends: %+v", r)
		}
	}
	for i := range 2 {
		if o := c1.do(t, protocol.VerbSend, send); o.Code != "" {
			t.Errorf("u1's send %d from its new mailbox: %q %s", i+1, o.Code, o.Msg)
		}
	}
}

// TestWatchIsBoundToTheMailboxNotItsName: a watch on a mailbox gets no
// event of a mailbox created later under the same name.
func TestWatchIsBoundToTheMailboxNotItsName(t *testing.T) {
	td := startDaemon(t, "")
	for _, name := range []string{"w", "sentinel"} {
		if err := td.call(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: name}, nil); err != nil {
			t.Fatal(err)
		}
	}
	ctx, events := td.watch(t, "w", "sentinel")
	if err := td.call(t, protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "w", Force: true}, nil); err != nil {
		t.Fatal(err)
	}
	if err := td.call(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "w"}, nil); err != nil {
		t.Fatal(err)
	}
	// Events reach one watch in order: the deletion of w, then the
	// sentinel's, which comes next only if the new mailbox's was not sent.
	td.ctl.Emit(protocol.Event{Type: protocol.EventNewMail, Mailbox: "w", ID: "of-the-new-mailbox"}, "")
	td.ctl.Emit(protocol.Event{Type: protocol.EventNewMail, Mailbox: "sentinel", ID: "sentinel"}, "")
	for _, want := range []protocol.Event{{Type: protocol.EventMailboxDeleted, Mailbox: "w"}, {Type: protocol.EventNewMail, Mailbox: "sentinel", ID: "sentinel"}} {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the watch ended before %+v: it still names sentinel", want)
			}
			if ev.Type != want.Type || ev.Mailbox != want.Mailbox || ev.ID != want.ID {
				t.Errorf("the watch on the deleted mailbox got %+v, want %+v", ev, want)
			}
		case <-ctx.Done():
			t.Fatal("no event")
		}
	}

	// Once the last mailbox it names is deleted, the watch ends.
	if err := td.call(t, protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "sentinel", Force: true}, nil); err != nil {
		t.Fatal(err)
	}
	var got []string
	for ev := range events {
		got = append(got, ev.Type+" "+ev.Mailbox)
	}
	if len(got) != 1 || got[0] != protocol.EventMailboxDeleted+" sentinel" {
		t.Errorf("the watch's last events: %q, want the deletion of sentinel, then its end", got)
	}
}

// TestDeleteDropsMailInFlight: a mailbox is deleted while its message is
// in the middle of a delivery attempt, which then ends with a temporary
// failure. The message is not left queued, to be sent for days after the
// mailbox (and perhaps its name) is gone: it is dropped as soon as the
// attempt ends.
func TestDeleteDropsMailInFlight(t *testing.T) {
	td, _, _, qid, gate := deleteInFlight(t)
	gate <- struct{}{}
	queued := func() bool {
		for _, it := range td.out.queue.List() {
			if it.ID == qid {
				return true
			}
		}
		return false
	}
	testwait.For(t, "the deleted mailbox's message to leave the queue", func() bool { return !queued() })
	it, err := td.out.queue.Get(qid)
	if err != nil {
		t.Fatal(err)
	}
	if r := it.Recipients[0]; r.Status != queue.StatusFailed || r.Detail != queue.DetailDropped || r.Attempts != 1 {
		t.Errorf("recipient after the attempt: %+v, want failed (dropped) after its one attempt", r)
	}
}

// TestDeleteDropsMailInFlightAcrossACrash: as TestDeleteDropsMailInFlight,
// but the daemon is killed (kill -9, power lost) after the delete answered
// and before the attempt ended. The mark to drop the message was only in
// memory, so the restart found it queued and retried it for days for a
// mailbox that is gone; the mark is in the queue journal now, and the
// restart drops the message without an attempt.
func TestDeleteDropsMailInFlightAcrossACrash(t *testing.T) {
	td, mx, dns, qid, gate := deleteInFlight(t)
	// What a kill -9 now leaves of the journal: every record appended so
	// far (the kernel holds them), and the drop never made.
	journal := filepath.Join(td.cfg.Paths.QueueDir(), queue.JournalName)
	image, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}
	gate <- struct{}{}
	td.stop()
	if err := os.WriteFile(journal, image, 0o600); err != nil {
		t.Fatal(err)
	}

	td = runTestDaemon(t, td.cfg, td.dir, Options{Resolver: dns})
	for _, it := range td.out.queue.List() {
		if it.ID == qid {
			t.Fatalf("after the restart the deleted mailbox's message is still queued: %+v", it.Recipients)
		}
	}
	it, err := td.out.queue.Get(qid)
	if err != nil {
		t.Fatal(err)
	}
	if r := it.Recipients[0]; r.Status != queue.StatusFailed || r.Detail != queue.DetailDropped {
		t.Errorf("recipient after the restart: %+v, want failed (dropped)", r)
	}
	if n := len(mx.Messages()); n != 0 {
		t.Errorf("the MX accepted %d messages", n)
	}
}

// TestQueuedMailOfAnUndeclaredMailboxIsHeldUntilDeclaredAgain: a declared
// mailbox is taken out of config.toml while the daemon is down, its mail
// waiting in the queue. The restart, which does not serve the mailbox,
// neither drops the mail (only a delete does) nor sends it, signed, in the
// name of a mailbox the operator withdrew: its attempt is deferred without
// a connection to the MX. Once the declaration is back (another restart),
// the mail goes out: nothing was lost.
func TestQueuedMailOfAnUndeclaredMailboxIsHeldUntilDeclaredAgain(t *testing.T) {
	mx, dns, delivery := deferringMX(t)
	td := startDaemonWith(t, delivery+declaration(myName(t)), Options{Resolver: dns})
	qid := sendDeferred(t, td, "decl", "withdrawn")
	td.stop()

	cfg, err := config.Load(rewriteConfig(t, td, declaration(myName(t)), undeclared))
	if err != nil {
		t.Fatal(err)
	}
	mx.SetDataErr(nil)
	conns := mx.Conns()
	td = runTestDaemon(t, cfg, td.dir, Options{Resolver: dns})
	if _, ok := td.lookupMailbox("decl"); ok {
		t.Fatal("decl is still served after its declaration was taken out")
	}
	retryHeld(t, td, qid)
	if n, c := len(mx.Messages()), mx.Conns(); n != 0 || c != conns {
		t.Errorf("the MX accepted %d messages over %d new connections, want none", n, c-conns)
	}
	td.stop()

	cfg, err = config.Load(rewriteConfig(t, td, undeclared, declaration(myName(t))))
	if err != nil {
		t.Fatal(err)
	}
	td = runTestDaemon(t, cfg, td.dir, Options{Resolver: dns})
	if err := td.out.queue.Retry(qid); err != nil {
		t.Fatal(err)
	}
	requireDelivered(t, td, qid)
	if got := subjects(mx); len(got) != 1 || got[0] != "withdrawn" {
		t.Errorf("the MX accepted %q, want the held message", got)
	}
}

// deferringMX is a fake MX for remote.test that answers DATA with 451, the
// resolver that names it, and the daemon's [delivery] table that sends
// there at once.
func deferringMX(t *testing.T) (*fakemx.Server, *resolver.Map, string) {
	t.Helper()
	mx := fakemx.New(t, "127.0.0.1", nil)
	_, port, _ := net.SplitHostPort(mx.Addr)
	dns := &resolver.Map{}
	dns.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	dns.SetIP("mx.remote.test", "127.0.0.1")
	mx.SetDataErr(&smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "try again later"})
	return mx, dns, "[delivery]\nport = " + port + "\nfirst_attempt_wait = \"1ms\"\n"
}

// deleteInFlight sends from a new mailbox "going" to a deferringMX, holds
// the attempt at DATA and deletes the mailbox meanwhile. The attempt goes
// on (and is deferred) once the test sends on gate.
func deleteInFlight(t *testing.T) (td *testDaemon, mx *fakemx.Server, dns *resolver.Map, qid string, gate chan<- struct{}) {
	t.Helper()
	mx, dns, delivery := deferringMX(t)
	td = startDaemonWith(t, delivery, Options{Resolver: dns})
	if err := td.call(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "going"}, nil); err != nil {
		t.Fatal(err)
	}
	gate = mx.Gate()
	var res protocol.SendResult
	if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "going", To: []string{"x@remote.test"}, Subject: "s", Body: "b"}, &res); err != nil {
		t.Fatal(err)
	}
	qid = outbound.QueueID("going", res.ID)
	testwait.For(t, "the attempt to be held at DATA", func() bool { return mx.Waiting() == 1 })
	if err := td.call(t, protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "going", Force: true}, nil); err != nil {
		t.Fatal(err)
	}
	return td, mx, dns, qid, gate
}
