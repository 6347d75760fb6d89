package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

func deliverTo(t *testing.T, td *testDaemon, mailbox, subject string, at time.Time, atts []store.AttachmentData) string {
	t.Helper()
	id, _, err := td.store.Deliver(mailbox, "inbox", &store.Message{MessageID: "<" + subject + "@example.net>", From: "a@example.net",
		Subject: subject, ReceivedAt: at, Trusted: "none"}, "body of "+subject, []byte("Subject: "+subject+"\r\n\r\nbody\r\n"), atts)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func listIDs(t *testing.T, td *testDaemon, a protocol.MessageListArgs) []string {
	t.Helper()
	var l protocol.MessageList
	if err := td.call(t, protocol.VerbMessageList, a, &l); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range l.Messages {
		ids = append(ids, m.ID)
	}
	return ids
}

// Labels and the star go through the daemon, filter listings, and survive
// a restart of the daemon that also lost its index.
func TestMessageLabelsSurviveReindex(t *testing.T) {
	td := startDaemon(t, "")
	td.ensureMine(t, "alice")
	now := time.Now().UTC()
	a := deliverTo(t, td, "alice", "invoice march", now.Add(-3*time.Minute), nil)
	b := deliverTo(t, td, "alice", "invoice april", now.Add(-2*time.Minute), nil)
	c := deliverTo(t, td, "alice", "lunch", now.Add(-time.Minute), nil)

	var res protocol.MessageLabeled
	if err := td.call(t, protocol.VerbMessageLabel, protocol.MessageLabelArgs{Mailbox: "alice", IDs: []string{a, b, "nope"}, Add: []string{"Invoices"}}, &res); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Changed, []string{a, b}) || !slices.Equal(res.NotFound, []string{"nope"}) {
		t.Fatalf("label: %+v", res)
	}
	if err := td.call(t, protocol.VerbMessageLabel, protocol.MessageLabelArgs{Mailbox: "alice", IDs: []string{b}, Star: ptrTo(true)}, nil); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		for _, tc := range []struct {
			args protocol.MessageListArgs
			want []string
		}{
			{protocol.MessageListArgs{Mailbox: "alice", Label: "invoices"}, []string{b, a}},
			{protocol.MessageListArgs{Mailbox: "alice", Starred: ptrTo(true)}, []string{b}},
			{protocol.MessageListArgs{Mailbox: "alice", Starred: ptrTo(false)}, []string{c, a}},
			{protocol.MessageListArgs{Mailbox: "alice", Label: "INVOICES", Starred: ptrTo(false)}, []string{a}},
			{protocol.MessageListArgs{Mailbox: "alice", Label: "lunch"}, nil},
		} {
			if got := listIDs(t, td, tc.args); !slices.Equal(got, tc.want) {
				t.Errorf("%s: list label %q starred %v: %v, want %v", when, tc.args.Label, tc.args.Starred, got, tc.want)
			}
		}
		var m protocol.Message
		if err := td.call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "alice", ID: b}, &m); err != nil || !m.Starred || !slices.Equal(m.Labels, []string{"Invoices"}) {
			t.Errorf("%s: read %s: starred %v labels %v (%v)", when, b, m.Starred, m.Labels, err)
		}
	}
	check("live")

	// Restart without the index: the frontmatter is the truth.
	td.stop()
	if err := os.Remove(td.cfg.Paths.IndexFile()); err != nil {
		t.Fatalf("no index to delete: %v", err)
	}
	td = runTestDaemon(t, td.cfg, td.dir, Options{})
	check("after a reindex")

	// Refusals.
	for _, bad := range []protocol.MessageLabelArgs{
		{Mailbox: "alice", IDs: []string{a}},
		{Mailbox: "alice", IDs: []string{a}, Add: []string{"a,b"}},
		{Mailbox: "alice", IDs: []string{a}, Add: []string{"a\u2028b"}},
		{Mailbox: "alice", IDs: []string{a}, Add: []string{"\uff49\uff4e\uff56\uff4f\uff49\uff43\uff45\uff53"}},
		{Mailbox: "alice", IDs: []string{a}, Remove: []string{"a\ufe50b"}},
		{Mailbox: "alice", IDs: []string{a}, Add: []string{"x"}, Remove: []string{"X"}},
		{Mailbox: "alice", IDs: nil, Add: []string{"x"}},
		{Mailbox: "alice", IDs: []string{"../x"}, Add: []string{"x"}},
		{Mailbox: "alice", Folder: "spam", IDs: []string{a}, Add: []string{"x"}},
	} {
		if err := td.call(t, protocol.VerbMessageLabel, bad, nil); protocol.CodeOf(err) != protocol.CodeInvalidInput {
			t.Errorf("%+v: %v, want invalid_input", bad, err)
		}
	}
	if err := td.call(t, protocol.VerbMessageLabel, protocol.MessageLabelArgs{Mailbox: "alice", IDs: []string{"nope"}, Star: ptrTo(true)}, nil); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Errorf("only unknown ids: %v", err)
	}
}

// Purge removes a message of trash with its raw copy and attachments, by
// id or by date; nothing outside trash can be purged.
func TestMessagePurge(t *testing.T) {
	td := startDaemon(t, "")
	td.ensureMine(t, "alice")
	now := time.Now().UTC()
	att := []store.AttachmentData{{Filename: "report.pdf", ContentType: "application/pdf", Data: []byte("%PDF-1.4")}}
	old := deliverTo(t, td, "alice", "old", now.Add(-48*time.Hour), att)
	one := deliverTo(t, td, "alice", "one", now.Add(-2*time.Hour), att)
	two := deliverTo(t, td, "alice", "two", now.Add(-time.Hour), nil)
	kept := deliverTo(t, td, "alice", "kept", now, att)
	for _, id := range []string{old, one, two} {
		if err := td.call(t, protocol.VerbMessageMove, protocol.MessageMoveArgs{Mailbox: "alice", ID: id, To: "trash"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	trash := filepath.Join(td.store.Path("alice"), "trash")
	inboxBefore := dirNames(t, filepath.Join(td.store.Path("alice"), "inbox"))

	// Not from the inbox, not an inbox message named in trash.
	err := td.call(t, protocol.VerbMessagePurge, protocol.MessagePurgeArgs{Mailbox: "alice", Folder: "inbox", IDs: []string{kept}}, nil)
	if protocol.CodeOf(err) != protocol.CodeInvalidInput || !strings.Contains(err.Error(), "only messages in trash") {
		t.Errorf("purge from inbox: %v", err)
	}
	if err := td.call(t, protocol.VerbMessagePurge, protocol.MessagePurgeArgs{Mailbox: "alice", IDs: []string{kept}}, nil); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Errorf("purge of an inbox message: %v", err)
	}
	for _, bad := range []protocol.MessagePurgeArgs{{Mailbox: "alice"}, {Mailbox: "alice", IDs: []string{one}, Before: &now}, {Mailbox: "alice", IDs: []string{"../inbox/" + kept}}} {
		if err := td.call(t, protocol.VerbMessagePurge, bad, nil); protocol.CodeOf(err) != protocol.CodeInvalidInput {
			t.Errorf("%+v: %v, want invalid_input", bad, err)
		}
	}

	var res protocol.MessagePurged
	if err := td.call(t, protocol.VerbMessagePurge, protocol.MessagePurgeArgs{Mailbox: "alice", Before: ptrTo(now.Add(-24 * time.Hour))}, &res); err != nil || !slices.Equal(res.Purged, []string{old}) {
		t.Fatalf("purge before: %+v %v", res, err)
	}
	if err := td.call(t, protocol.VerbMessagePurge, protocol.MessagePurgeArgs{Mailbox: "alice", Folder: "trash", IDs: []string{one, two, old}}, &res); err != nil ||
		!slices.Equal(res.Purged, []string{one, two}) || !slices.Equal(res.NotFound, []string{old}) {
		t.Fatalf("purge ids: %+v %v", res, err)
	}
	if left := dirNames(t, trash); len(left) != 0 {
		t.Errorf("left behind in trash: %v", left)
	}
	if got := listIDs(t, td, protocol.MessageListArgs{Mailbox: "alice", Folder: "trash"}); len(got) != 0 {
		t.Errorf("trash lists %v", got)
	}
	if got := dirNames(t, filepath.Join(td.store.Path("alice"), "inbox")); !slices.Equal(got, inboxBefore) {
		t.Errorf("inbox changed: %v, was %v", got, inboxBefore)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// A batch that names only unknown ids is not_found however often it names
// them: the store reports each missing id once.
func TestBatchOfRepeatedUnknownIDsIsNotFound(t *testing.T) {
	td := startDaemon(t, "")
	td.ensureMine(t, "alice")
	ids := []string{"nope", "nope"}
	for _, c := range []struct {
		verb string
		args any
	}{
		{protocol.VerbMessageMark, protocol.MessageMarkArgs{Mailbox: "alice", IDs: ids, Read: true}},
		{protocol.VerbMessageLabel, protocol.MessageLabelArgs{Mailbox: "alice", IDs: ids, Star: ptrTo(true)}},
		{protocol.VerbMessagePurge, protocol.MessagePurgeArgs{Mailbox: "alice", IDs: ids}},
	} {
		if err := td.call(t, c.verb, c.args, nil); protocol.CodeOf(err) != protocol.CodeNotFound {
			t.Errorf("%s of %v: %v, want not_found", c.verb, ids, err)
		}
	}
}

// TestRequestBoundsAreTheDocumentedOnes: docs/security.md's fixed bounds on
// one request, at their edges: message.label takes 20 label changes and
// 1,000 ids, not one more; message.read returns 20,000 characters unless
// asked for more, and never more than 200,000 (protocol/README.md).
func TestRequestBoundsAreTheDocumentedOnes(t *testing.T) {
	td := startDaemon(t, "")
	td.ensureMine(t, "alice")
	a := deliverTo(t, td, "alice", "bounds", time.Now().UTC(), nil)
	labels := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("l%d", i))
		}
		return out
	}
	ids := func(n int) []string {
		out := []string{a}
		for i := range n - 1 {
			out = append(out, fmt.Sprintf("nope%d", i))
		}
		return out
	}
	for _, tt := range []struct {
		name string
		args protocol.MessageLabelArgs
		want string // a word of the refusal; "" for success
	}{
		{"20 labels", protocol.MessageLabelArgs{Add: labels(10), Remove: []string{"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9"}}, ""},
		{"21 labels", protocol.MessageLabelArgs{Add: labels(11), Remove: []string{"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9"}}, "at most 20"},
		{"1000 ids", protocol.MessageLabelArgs{IDs: ids(1000), Star: ptrTo(true)}, ""},
		{"1001 ids", protocol.MessageLabelArgs{IDs: ids(1001), Star: ptrTo(true)}, "between 1 and 1000"},
	} {
		args := tt.args
		args.Mailbox = "alice"
		if args.IDs == nil {
			args.IDs = []string{a}
		}
		var res protocol.MessageLabeled
		err := td.call(t, protocol.VerbMessageLabel, args, &res)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want == "" && !slices.Equal(res.Changed, []string{a}):
			t.Errorf("%s: changed %v, want %s", tt.name, res.Changed, a)
		case tt.want != "" && (protocol.CodeOf(err) != protocol.CodeInvalidInput || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want invalid_input saying %q", tt.name, err, tt.want)
		}
	}

	body := strings.Repeat("é", 250_000)
	id, _, err := td.store.Deliver("alice", "inbox", &store.Message{MessageID: "<long@example.net>", From: "a@example.net",
		Subject: "long", ReceivedAt: time.Now().UTC(), Trusted: "none"}, body, []byte("Subject: long\r\n\r\nbody\r\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ ask, want int }{{0, 20_000}, {150_000, 150_000}, {200_000, 200_000}, {300_000, 200_000}} {
		var m protocol.Message
		if err := td.call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "alice", ID: id, MaxChars: tt.ask}, &m); err != nil {
			t.Fatal(err)
		}
		if got := utf8.RuneCountInString(m.Body); got != tt.want || !m.Truncated || m.BodyChars < 250_000 {
			t.Errorf("max_chars %d: %d characters (of %d, truncated %v), want %d", tt.ask, got, m.BodyChars, m.Truncated, tt.want)
		}
	}
}
