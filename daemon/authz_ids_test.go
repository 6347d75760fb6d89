package daemon

import (
	"encoding/json"
	"fmt"
	"os/user"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/control"
	"github.com/mailctl/mailctl/daemon/outbound"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// idObjects are the things of one kind a verb can name: a mailbox and, in
// it, a message in the inbox and one in trash, a thread, a label, a draft,
// a sent message, its queue item, hooks (Hook, Hook+"2", Hook+"3") and a
// listing cursor.
type idObjects struct {
	Mailbox, MsgID, Trashed, Thread, Label, DraftID, SentID, QueueID, Hook, Cursor string
}

// fields lists the objects' values with a placeholder each, longest value
// first (a queue id holds its mailbox's name).
func (o idObjects) fields() [][2]string {
	f := [][2]string{{o.Mailbox, "<MAILBOX>"}, {o.MsgID, "<MSGID>"}, {o.Trashed, "<TRASHED>"}, {o.Thread, "<THREAD>"}, {o.Label, "<LABEL>"},
		{o.DraftID, "<DRAFT>"}, {o.SentID, "<SENT>"}, {o.QueueID, "<QUEUE>"}, {o.Hook, "<HOOK>"}, {o.Cursor, "<CURSOR>"}}
	sort.SliceStable(f, func(i, j int) bool { return len(f[i][0]) > len(f[j][0]) })
	return f
}

// normal is a reply with every value of o the request could have echoed
// replaced by its placeholder: what is left must not depend on whether the
// object exists elsewhere.
func (o idObjects) normal(r clientOutcome) string {
	s := r.Code + "\n" + r.Msg + "\n" + string(r.Data)
	for _, f := range o.fields() {
		if f[0] == "" {
			continue
		}
		s = strings.ReplaceAll(s, fmt.Sprintf("%.40q", f[0]), f[1]) // a cursor is quoted cut to 40 characters
		s = strings.ReplaceAll(s, f[0], f[1])
	}
	return s
}

// idCase is one request that names something; args builds it for one set of
// objects and mine is the caller's own, for the parts that stay its own.
type idCase struct {
	name string
	verb string
	args func(o, mine idObjects) any
	// sameForOwn: the caller's own object may answer like an unknown one
	// (a filter that finds nothing, a root-only verb).
	sameForOwn bool
}

// noIDVerbs take no id or name of anything: nothing to compare.
var noIDVerbs = map[string]bool{protocol.VerbVersion: true, protocol.VerbStatus: true, protocol.VerbMailboxList: true, protocol.VerbQueueList: true,
	protocol.VerbIndexRebuild: true}

// idCases is every way a verb names a mailbox, message, thread, label,
// draft, sent message, queue item, hook or cursor. Requests that change
// the caller's own objects for good come last.
func idCases() []idCase {
	inbox := func(o idObjects) []string { return []string{o.MsgID} }
	return []idCase{
		{"show", protocol.VerbMailboxShow, func(o, _ idObjects) any { return protocol.NameArgs{Name: o.Mailbox} }, false},
		{"update", protocol.VerbMailboxUpdate, func(o, _ idObjects) any {
			return protocol.MailboxUpdateArgs{Name: o.Mailbox, DisplayName: ptrTo("Renamed")}
		}, false},
		{"delete without force", protocol.VerbMailboxDelete, func(o, _ idObjects) any { return protocol.MailboxDeleteArgs{Name: o.Mailbox} }, false},
		{"list", protocol.VerbMessageList, func(o, _ idObjects) any { return protocol.MessageListArgs{Mailbox: o.Mailbox} }, false},
		{"list by label", protocol.VerbMessageList, func(o, m idObjects) any { return protocol.MessageListArgs{Mailbox: m.Mailbox, Label: o.Label} }, false},
		{"list by thread", protocol.VerbMessageList, func(o, m idObjects) any { return protocol.MessageListArgs{Mailbox: m.Mailbox, ThreadID: o.Thread} }, false},
		{"list with cursor", protocol.VerbMessageList, func(o, m idObjects) any {
			return protocol.MessageListArgs{Mailbox: m.Mailbox, Limit: 1, Cursor: o.Cursor}
		}, false},
		{"read", protocol.VerbMessageRead, func(o, _ idObjects) any { return protocol.MessageReadArgs{Mailbox: o.Mailbox, ID: o.MsgID} }, false},
		{"read id in mine", protocol.VerbMessageRead, func(o, m idObjects) any { return protocol.MessageReadArgs{Mailbox: m.Mailbox, ID: o.MsgID} }, false},
		{"mark", protocol.VerbMessageMark, func(o, _ idObjects) any {
			return protocol.MessageMarkArgs{Mailbox: o.Mailbox, IDs: inbox(o), Read: true}
		}, false},
		{"mark id in mine", protocol.VerbMessageMark, func(o, m idObjects) any {
			return protocol.MessageMarkArgs{Mailbox: m.Mailbox, IDs: inbox(o), Read: false}
		}, false},
		{"label", protocol.VerbMessageLabel, func(o, _ idObjects) any {
			return protocol.MessageLabelArgs{Mailbox: o.Mailbox, IDs: inbox(o), Add: []string{"seen"}}
		}, false},
		{"label id in mine", protocol.VerbMessageLabel, func(o, m idObjects) any {
			return protocol.MessageLabelArgs{Mailbox: m.Mailbox, IDs: inbox(o), Add: []string{"again"}}
		}, false},
		{"remove a label", protocol.VerbMessageLabel, func(o, m idObjects) any {
			return protocol.MessageLabelArgs{Mailbox: m.Mailbox, IDs: inbox(m), Remove: []string{o.Label}}
		}, false},
		{"send from", protocol.VerbSend, func(o, _ idObjects) any {
			return protocol.SendArgs{FromMailbox: o.Mailbox, To: []string{"x@remote.test"}, Subject: "s", Body: "b", DryRun: true}
		}, false},
		{"send reply to", protocol.VerbSend, func(o, m idObjects) any {
			return protocol.SendArgs{FromMailbox: m.Mailbox, ReplyToID: o.MsgID, Body: "b", DryRun: true}
		}, false},
		{"send status", protocol.VerbSendStatus, func(o, _ idObjects) any { return protocol.SendStatusArgs{Mailbox: o.Mailbox, ID: o.SentID} }, false},
		{"send status id in mine", protocol.VerbSendStatus, func(o, m idObjects) any {
			return protocol.SendStatusArgs{Mailbox: m.Mailbox, ID: o.SentID}
		}, false},
		{"draft create", protocol.VerbDraftCreate, func(o, _ idObjects) any { return protocol.DraftArgs{Mailbox: o.Mailbox, Subject: "d"} }, false},
		{"draft reply to", protocol.VerbDraftCreate, func(o, m idObjects) any { return protocol.DraftArgs{Mailbox: m.Mailbox, ReplyToID: o.MsgID} }, false},
		{"draft update", protocol.VerbDraftUpdate, func(o, _ idObjects) any {
			return protocol.DraftUpdateArgs{Mailbox: o.Mailbox, ID: o.DraftID, Subject: ptrTo("changed")}
		}, false},
		{"draft update id in mine", protocol.VerbDraftUpdate, func(o, m idObjects) any {
			return protocol.DraftUpdateArgs{Mailbox: m.Mailbox, ID: o.DraftID, Subject: ptrTo("changed again")}
		}, false},
		{"draft send", protocol.VerbDraftSend, func(o, _ idObjects) any {
			return protocol.DraftSendArgs{Mailbox: o.Mailbox, ID: o.DraftID, DryRun: true}
		}, false},
		{"draft send id in mine", protocol.VerbDraftSend, func(o, m idObjects) any {
			return protocol.DraftSendArgs{Mailbox: m.Mailbox, ID: o.DraftID, DryRun: true}
		}, false},
		{"hook create", protocol.VerbHookCreate, func(o, _ idObjects) any {
			return protocol.HookCreateArgs{Mailbox: o.Mailbox, Event: "on_receive", Cmd: []string{"/bin/true"}, Name: "another"}
		}, false},
		{"hook create untrusted", protocol.VerbHookCreate, func(o, _ idObjects) any {
			return protocol.HookCreateArgs{Mailbox: o.Mailbox, Event: "on_receive", Cmd: []string{"/bin/true"}, FireOnUntrusted: true}
		}, false},
		{"hook list", protocol.VerbHookList, func(o, _ idObjects) any { return protocol.HookListArgs{Mailbox: o.Mailbox} }, false},
		// No hook ran: the caller's own runs are none either.
		{"hook runs", protocol.VerbHookRuns, func(o, _ idObjects) any { return protocol.HookRunsArgs{Name: o.Hook} }, true},
		{"watch", protocol.VerbWatch, func(o, _ idObjects) any { return protocol.WatchArgs{Mailboxes: []string{o.Mailbox}} }, false},
		{"queue show", protocol.VerbQueueShow, func(o, _ idObjects) any { return protocol.QueueIDArgs{ID: o.QueueID} }, false},
		{"queue retry", protocol.VerbQueueRetry, func(o, _ idObjects) any { return protocol.QueueIDArgs{ID: o.QueueID} }, false},
		// Root's alone: the caller's own item is refused as well.
		{"queue approve", protocol.VerbQueueApprove, func(o, _ idObjects) any { return protocol.QueueIDArgs{ID: o.QueueID} }, true},
		{"queue flush by mailbox", protocol.VerbQueueFlush, func(o, _ idObjects) any { return protocol.QueueFilter{Mailbox: o.Mailbox} }, false},
		{"queue drop by mailbox", protocol.VerbQueueDropMatching, func(o, _ idObjects) any {
			return protocol.QueueFilter{Mailbox: o.Mailbox, OlderThan: "1000d"}
		}, false},
		{"queue summary by mailbox", protocol.VerbQueueSummary, func(o, _ idObjects) any {
			return protocol.QueueSummaryArgs{QueueFilter: protocol.QueueFilter{Mailbox: o.Mailbox}}
		}, false},
		{"prune", protocol.VerbMailboxPrune, func(o, _ idObjects) any { return protocol.MailboxPruneArgs{Mailbox: o.Mailbox, DryRun: true} }, true},
		{"queue reschedule", protocol.VerbQueueReschedule, func(o, _ idObjects) any {
			return protocol.QueueRescheduleArgs{ID: o.QueueID, SendAt: time.Now().Add(time.Hour).UTC().Truncate(time.Second)}
		}, false},
		// The caller's own objects go from here on.
		{"hook delete by name", protocol.VerbHookDelete, func(o, _ idObjects) any { return protocol.HookDeleteArgs{Name: o.Hook} }, false},
		{"hook delete", protocol.VerbHookDelete, func(o, _ idObjects) any { return protocol.HookDeleteArgs{Name: o.Hook + "2", Mailbox: o.Mailbox} }, false},
		{"hook delete name in mine", protocol.VerbHookDelete, func(o, m idObjects) any {
			return protocol.HookDeleteArgs{Name: o.Hook + "3", Mailbox: m.Mailbox}
		}, false},
		{"queue drop", protocol.VerbQueueDrop, func(o, _ idObjects) any { return protocol.QueueIDArgs{ID: o.QueueID} }, false},
		{"draft delete id in mine", protocol.VerbDraftDelete, func(o, m idObjects) any { return protocol.DraftIDArgs{Mailbox: m.Mailbox, ID: o.DraftID} }, false},
		{"draft delete", protocol.VerbDraftDelete, func(o, _ idObjects) any { return protocol.DraftIDArgs{Mailbox: o.Mailbox, ID: o.DraftID} }, false},
		{"move", protocol.VerbMessageMove, func(o, _ idObjects) any {
			return protocol.MessageMoveArgs{Mailbox: o.Mailbox, ID: o.MsgID, To: "trash"}
		}, false},
		{"purge", protocol.VerbMessagePurge, func(o, _ idObjects) any { return protocol.MessagePurgeArgs{Mailbox: o.Mailbox, IDs: inbox(o)} }, false},
		{"purge id in mine", protocol.VerbMessagePurge, func(o, m idObjects) any {
			return protocol.MessagePurgeArgs{Mailbox: m.Mailbox, IDs: []string{o.Trashed}}
		}, false},
		{"purge before", protocol.VerbMessagePurge, func(o, _ idObjects) any {
			return protocol.MessagePurgeArgs{Mailbox: o.Mailbox, Before: ptrTo(time.Now().Add(time.Hour))}
		}, false},
	}
}

// TestForeignIDsAnswerAsUnknown: for every verb and every id or name it
// takes, another user's existing object answers byte for byte as one that
// does not exist (once the value the caller sent is set aside), and the
// caller's own object is found. Run as real uids: the caller owns one set
// of objects, another user the same kinds; a third set exists nowhere.
// mailbox.create is the one exception, by design: a mailbox name is an
// address, which SMTP answers for anyone, so a taken one is a conflict;
// that answer names nothing but the name.
func TestForeignIDsAnswerAsUnknown(t *testing.T) {
	td, foreignUser, caller := twoUsers(t, "mcid")
	objects := func(c *clientProc, mailbox string) idObjects {
		t.Helper()
		c.must(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: mailbox})
		o := idObjects{Mailbox: mailbox, Label: mailbox + "-label", Hook: mailbox + "-hook"}
		var ids []string
		for i := range 3 {
			mid := fmt.Sprintf("%s-%d@example.test", mailbox, i)
			id, _, err := td.store.Deliver(mailbox, "inbox", &store.Message{MessageID: mid, From: "a@example.net", Subject: mailbox + " private",
				ThreadID: store.ThreadID(mid, nil, "", "", time.Time{}, ""), ReceivedAt: time.Now().Add(time.Duration(i) * time.Second)},
				"hello", []byte("Subject: x\r\n\r\nhello\r\n"), nil)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		o.MsgID, o.Trashed = ids[2], ids[0]
		var m protocol.Message
		json.Unmarshal(c.must(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: mailbox, ID: o.MsgID}), &m)
		o.Thread = m.ThreadID
		c.must(t, protocol.VerbMessageLabel, protocol.MessageLabelArgs{Mailbox: mailbox, IDs: []string{o.MsgID}, Add: []string{o.Label}})
		var l protocol.MessageList
		json.Unmarshal(c.must(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: mailbox, Limit: 1}), &l)
		o.Cursor = l.NextCursor
		var d protocol.Draft
		json.Unmarshal(c.must(t, protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: mailbox, To: []string{"x@remote.test"}, Subject: mailbox + " draft"}), &d)
		o.DraftID = d.ID
		var sent protocol.SendResult
		json.Unmarshal(c.must(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: mailbox, To: []string{"x@remote.test"}, Subject: mailbox + " held", Body: "b"}), &sent)
		o.SentID, o.QueueID = sent.ID, outbound.QueueID(mailbox, sent.ID)
		for _, h := range []string{o.Hook, o.Hook + "2", o.Hook + "3"} {
			c.must(t, protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: mailbox, Event: "on_receive", Cmd: []string{"/bin/true"}, Name: h})
		}
		c.must(t, protocol.VerbMessageMove, protocol.MessageMoveArgs{Mailbox: mailbox, ID: o.Trashed, To: "trash"})
		if o.Thread == "" || o.Cursor == "" || o.DraftID == "" || sent.Status != "held" {
			t.Fatalf("fixture of %s incomplete: %+v (send %+v)", mailbox, o, sent)
		}
		return o
	}
	foreign := objects(foreignUser, "theirbox")
	mine := objects(caller, "mybox")
	unknown := idObjects{Mailbox: "nobox", MsgID: "2026-01-01-000000-nothing", Trashed: "2026-01-01-000000-notrash", Thread: "0123456789abcdef", Label: "nolabel",
		DraftID: "2026-01-01-000000-nodraft", SentID: "2026-01-01-000000-nosent", Hook: "nohook", Cursor: "AAAA.bm90aXNzdWVk"}
	unknown.QueueID = outbound.QueueID(unknown.Mailbox, unknown.SentID)

	cases := idCases()
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.verb] = true
	}
	covered[protocol.VerbMailboxCreate] = true // below
	for _, v := range control.Verbs() {
		if !covered[v] && !noIDVerbs[v] {
			t.Errorf("verb %s has no case in TestForeignIDsAnswerAsUnknown: add one for each id or name it takes, or list it in noIDVerbs", v)
		}
	}
	for _, c := range cases {
		f := caller.do(t, c.verb, c.args(foreign, mine))
		u := caller.do(t, c.verb, c.args(unknown, mine))
		own := caller.do(t, c.verb, c.args(mine, mine))
		if fn, un := foreign.normal(f), unknown.normal(u); fn != un {
			t.Errorf("%s (%s): another user's object answers\n%s\nan unknown one\n%s", c.name, c.verb, fn, un)
		}
		if on := mine.normal(own); !c.sameForOwn && on == unknown.normal(u) {
			t.Errorf("%s (%s): the caller's own object answers as an unknown one, so the comparison shows nothing:\n%s", c.name, c.verb, on)
		}
	}

	// The exception: a taken name is a conflict, and says nothing of whose.
	o := caller.do(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: foreign.Mailbox})
	if o.Code != protocol.CodeConflict {
		t.Fatalf("creating another user's mailbox name: %+v, want conflict", o)
	}
	owner, err := user.LookupId(fmt.Sprint(foreignUser.p.uid))
	if err != nil {
		t.Fatal(err)
	}
	if rest := foreign.normal(o); strings.Contains(rest, owner.Username) || strings.Contains(rest, fmt.Sprint(foreignUser.p.uid)) || strings.Contains(rest, "private") {
		t.Errorf("the conflict tells about the mailbox: %s", rest)
	}
}
