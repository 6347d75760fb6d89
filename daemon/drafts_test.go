package daemon

import (
	"bytes"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-msgauth/dkim"

	dkimkeys "github.com/mailctl/mailctl/daemon/outbound/dkim"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// startSender is a daemon that delivers to a fake MX for remote.test and
// signs with its dev keys.
func startSender(t *testing.T, opts Options) (*testDaemon, *fakeMX) {
	t.Helper()
	mx := startFakeMX(t)
	_, port, _ := net.SplitHostPort(mx.addr)
	dns := &resolver.Map{}
	dns.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	dns.SetIP("mx.remote.test", "127.0.0.1")
	opts.Resolver = dns
	td := startDaemonWith(t, "[delivery]\nport = "+port+"\n", opts)
	if err := EnsureDevKeys(td.cfg.Paths.DKIMDir); err != nil {
		t.Fatal(err)
	}
	if err := td.out.loadKeys(); err != nil {
		t.Fatal(err)
	}
	td.ensureMine(t, "alice")
	return td, mx
}

// verifyDKIM checks every signature of data against the daemon's keys.
func verifyDKIM(t *testing.T, td *testDaemon, data []byte) {
	t.Helper()
	keys, _ := dkimkeys.LoadKeys(td.cfg.Paths.DKIMDir)
	txt := map[string]string{}
	for _, k := range keys {
		txt[k.Selector+"._domainkey.example.test"] = k.TXTValue()
	}
	verifs, err := dkim.VerifyWithOptions(bytes.NewReader(data), &dkim.VerifyOptions{LookupTXT: func(d string) ([]string, error) { return []string{txt[d]}, nil }})
	if err != nil || len(verifs) != 2 {
		t.Fatalf("verify: %v, %d signatures", err, len(verifs))
	}
	for _, v := range verifs {
		if v.Err != nil {
			t.Errorf("signature %s: %v", v.Domain, v.Err)
		}
	}
}

func (mx *fakeMX) received() []fakeMsg {
	mx.mu.Lock()
	defer mx.mu.Unlock()
	return append([]fakeMsg(nil), mx.msgs...)
}

func errCode(err error) string {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// A person edits the agent's draft on disk; what goes out is the edit, and
// it is DKIM-valid; the draft becomes the sent copy.
func TestDraftEditedOnDiskThenSent(t *testing.T) {
	td, mx := startSender(t, Options{})
	var dr protocol.Draft
	if err := td.call(t, protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "alice", To: []string{"friend@remote.test"},
		Subject: "Plan", Body: "the agent's first version\n"}, &dr); err != nil {
		t.Fatal(err)
	}
	if dr.ID == "" || !strings.HasSuffix(dr.Path, "/drafts/"+dr.ID+".md") {
		t.Fatalf("draft %+v", dr)
	}
	var l protocol.MessageList
	td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "alice", Folder: protocol.FolderDrafts}, &l)
	if len(l.Messages) != 1 || l.Messages[0].ID != dr.ID || l.Messages[0].Subject != "Plan" {
		t.Fatalf("drafts: %+v", l.Messages)
	}
	// The person's edit, made with an editor on the file.
	data, err := os.ReadFile(dr.Path)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(data), `subject = "Plan"`, `subject = "Plan, reviewed"`, 1)
	edited = strings.Replace(edited, "the agent's first version", "the version a person approved", 1)
	if edited == string(data) {
		t.Fatalf("draft file not as expected:\n%s", data)
	}
	if err := os.WriteFile(dr.Path, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	var m protocol.Message
	td.call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "alice", Folder: protocol.FolderDrafts, ID: dr.ID}, &m)
	if m.Subject != "Plan, reviewed" || !strings.Contains(m.Body, "a person approved") {
		t.Fatalf("the agent does not see the edit: %q %q", m.Subject, m.Body)
	}

	var res protocol.SendResult
	if err := td.call(t, protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "alice", ID: dr.ID}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Status != "delivered" {
		t.Fatalf("send: %+v", res)
	}
	got := mx.received()
	if len(got) != 1 {
		t.Fatalf("fake MX got %d messages", len(got))
	}
	raw := string(got[0].data)
	if !strings.Contains(raw, "Subject: Plan, reviewed") || !strings.Contains(raw, "a person approved") || strings.Contains(raw, "first version") {
		t.Fatalf("what arrived is not the edit:\n%s", raw)
	}
	verifyDKIM(t, td, got[0].data)

	td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "alice", Folder: protocol.FolderDrafts}, &l)
	if len(l.Messages) != 0 {
		t.Fatalf("the sent draft is still in drafts: %+v", l.Messages)
	}
	var sent protocol.Message
	if err := td.call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "alice", Folder: protocol.FolderSent, ID: res.ID}, &sent); err != nil {
		t.Fatal(err)
	}
	if sent.Subject != "Plan, reviewed" || !sent.Outbound {
		t.Fatalf("sent copy: %+v", sent.MessageSummary)
	}
	if _, err := os.Stat(dr.Path); !os.IsNotExist(err) {
		t.Fatalf("draft file still there: %v", err)
	}
}

func TestDraftUpdateDeleteAndValidation(t *testing.T) {
	td, _ := startSender(t, Options{})
	var dr protocol.Draft
	if err := td.call(t, protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "alice", Subject: "Half done",
		Attachments: []protocol.SendAttachment{{Filename: "a.txt", Data: []byte("one")}}}, &dr); err != nil {
		t.Fatal(err)
	}
	// A draft may lack recipients; sending it says what is missing.
	err := td.call(t, protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "alice", ID: dr.ID}, nil)
	if errCode(err) != protocol.CodeInvalidInput || !strings.Contains(err.Error(), "no recipient") {
		t.Fatalf("send without recipients: %v", err)
	}
	to, body := []string{"friend@remote.test"}, "now complete"
	atts := []protocol.SendAttachment{{Filename: "b.txt", Data: []byte("two")}}
	if err := td.call(t, protocol.VerbDraftUpdate, protocol.DraftUpdateArgs{Mailbox: "alice", ID: dr.ID, To: &to, Body: &body, Attachments: &atts}, &dr); err != nil {
		t.Fatal(err)
	}
	var m protocol.Message
	td.call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "alice", Folder: protocol.FolderDrafts, ID: dr.ID}, &m)
	if len(m.To) != 1 || m.Subject != "Half done" || !strings.Contains(m.Body, "now complete") || len(m.AttachmentList) != 1 || m.AttachmentList[0].Filename != "b.txt" {
		t.Fatalf("after update: to %v subject %q body %q attachments %+v", m.To, m.Subject, m.Body, m.AttachmentList)
	}
	var res protocol.SendResult
	if err := td.call(t, protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "alice", ID: dr.ID, DryRun: true}, &res); err != nil || res.Status != "dry_run" {
		t.Fatalf("dry run: %+v %v", res, err)
	}

	bad := []struct {
		name string
		verb string
		args any
	}{
		{"bad address", protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "alice", To: []string{"not an address"}}},
		{"header injection", protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "alice", Subject: "a\r\nBcc: x@y.test"}},
		{"path-like attachment", protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "alice", Attachments: []protocol.SendAttachment{{Filename: "../x", Data: []byte("x")}}}},
		{"send_at in the past", protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "alice", SendAt: ptrTo(time.Now().Add(-time.Hour))}},
		{"send_at two years out", protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "alice", SendAt: ptrTo(time.Now().Add(2 * 365 * 24 * time.Hour))}},
		{"bad update", protocol.VerbDraftUpdate, protocol.DraftUpdateArgs{Mailbox: "alice", ID: dr.ID, Cc: &[]string{"nope"}}},
		{"bad id", protocol.VerbDraftDelete, protocol.DraftIDArgs{Mailbox: "alice", ID: "../inbox/x"}},
		{"send send_at in the past", protocol.VerbSend, protocol.SendArgs{FromMailbox: "alice", To: to, Subject: "x", SendAt: ptrTo(time.Now().Add(-time.Hour))}},
	}
	for _, b := range bad {
		if err := td.call(t, b.verb, b.args, nil); errCode(err) != protocol.CodeInvalidInput {
			t.Errorf("%s: %v, want invalid_input", b.name, err)
		}
	}

	var del protocol.DraftDeleted
	if err := td.call(t, protocol.VerbDraftDelete, protocol.DraftIDArgs{Mailbox: "alice", ID: dr.ID}, &del); err != nil || !del.Deleted {
		t.Fatalf("delete: %+v %v", del, err)
	}
	if err := td.call(t, protocol.VerbDraftDelete, protocol.DraftIDArgs{Mailbox: "alice", ID: dr.ID}, nil); errCode(err) != protocol.CodeNotFound {
		t.Fatalf("second delete: %v, want not_found", err)
	}
	if _, err := os.Stat(dr.Path); !os.IsNotExist(err) {
		t.Fatalf("draft file left behind: %v", err)
	}
}

// A scheduled send and a scheduled draft are accepted by a daemon that is
// then killed with SIGKILL; the restarted daemon holds them until their
// times and sends each at its time, DKIM-valid.
func TestScheduledSendSurvivesKillNine(t *testing.T) {
	clk := testclock.New()
	clk.Advance(time.Since(clk.Now())) // the child daemon runs on the wall clock
	td, mx := startSender(t, Options{Clock: clk.Now})
	cfg, dir, socket := td.cfg, td.dir, td.socket
	td.stop()

	cmd := startDaemonProcess(t, cfg.File, socket)
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	inAnHour, inTwo := time.Now().Add(time.Hour).UTC().Truncate(time.Second), time.Now().Add(2*time.Hour).UTC().Truncate(time.Second)
	var res protocol.SendResult
	if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "alice", To: []string{"first@remote.test"}, Subject: "In an hour",
		Body: "b", SendAt: &inAnHour}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Status != "scheduled" || res.SendAt == nil || !res.SendAt.Equal(inAnHour) {
		t.Fatalf("scheduled send answered %+v", res)
	}
	var dr protocol.Draft
	if err := td.call(t, protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "alice", To: []string{"second@remote.test"}, Subject: "In two hours",
		Body: "b", SendAt: &inTwo}, &dr); err != nil {
		t.Fatal(err)
	}
	var res2 protocol.SendResult
	if err := td.call(t, protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "alice", ID: dr.ID}, &res2); err != nil {
		t.Fatal(err)
	}
	if res2.Status != "scheduled" || res2.SendAt == nil || !res2.SendAt.Equal(inTwo) {
		t.Fatalf("scheduled draft answered %+v", res2)
	}
	cmd.Process.Signal(os.Kill)
	cmd.Wait()
	killed = true

	td2 := runTestDaemon(t, cfg, dir, Options{Resolver: td.opts.Resolver, Clock: clk.Now})
	var ql protocol.QueueList
	td2.call(t, protocol.VerbQueueList, nil, &ql)
	if len(ql.Items) != 2 {
		t.Fatalf("after kill -9 the queue has %d items, want 2", len(ql.Items))
	}
	for _, it := range ql.Items {
		if !it.Scheduled || it.SendAt == nil {
			t.Fatalf("listed as %+v, want scheduled with its time", it)
		}
	}
	clk.Advance(time.Hour + time.Minute)
	td2.out.queue.Kick()
	testwait.For(t, "the first scheduled message at the fake MX", func() bool { return len(mx.received()) >= 1 })
	// Both items were looked at in that pass; the later one was not due.
	if it, err := td2.out.queue.Get("alice." + res2.ID); err != nil || !it.Scheduled() || it.Attempts != 0 {
		t.Fatalf("the draft's queue item went early: %+v %v", it, err)
	}
	first := mx.received()
	if len(first) != 1 || !strings.Contains(string(first[0].data), "Subject: In an hour") {
		t.Fatalf("at one hour the MX has %d messages", len(first))
	}
	verifyDKIM(t, td2, first[0].data)
	clk.Advance(time.Hour)
	td2.out.queue.Kick()
	testwait.For(t, "the scheduled draft at the fake MX", func() bool { return len(mx.received()) == 2 })
	verifyDKIM(t, td2, mx.received()[1].data)

	// Rescheduling and its bounds, through the queue verb.
	var res3 protocol.SendResult
	later := clk.Now().Add(24 * time.Hour)
	if err := td2.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "alice", To: []string{"third@remote.test"}, Subject: "Tomorrow", Body: "b", SendAt: &later}, &res3); err != nil {
		t.Fatal(err)
	}
	qid := "alice." + res3.ID
	var qi protocol.QueueItem
	if err := td2.call(t, protocol.VerbQueueReschedule, protocol.QueueRescheduleArgs{ID: qid, SendAt: later.Add(time.Hour)}, &qi); err != nil || !qi.Scheduled || !qi.SendAt.Equal(later.Add(time.Hour)) {
		t.Fatalf("reschedule: %+v %v", qi, err)
	}
	if err := td2.call(t, protocol.VerbQueueReschedule, protocol.QueueRescheduleArgs{ID: qid, SendAt: clk.Now().Add(-time.Hour)}, nil); errCode(err) != protocol.CodeInvalidInput {
		t.Fatalf("reschedule into the past: %v", err)
	}
	if err := td2.call(t, protocol.VerbQueueDrop, protocol.QueueIDArgs{ID: qid}, nil); err != nil {
		t.Fatalf("cancel by drop: %v", err)
	}
}
