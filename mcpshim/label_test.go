package mcpshim

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/protocol"
)

// email_label puts labels and a star on messages, and email_list filters
// by them.
func TestEmailLabelAndListFilters(t *testing.T) {
	e := newEnv(t)
	a := e.deliver("agent", testdaemon.Message{Subject: "invoice 1", Body: "pay"})
	b := e.deliver("agent", testdaemon.Message{Subject: "invoice 2", Body: "pay"})
	c := e.deliver("agent", testdaemon.Message{Subject: "lunch", Body: "eat"})

	var lab LabelData
	e.ok("email_label", map[string]any{"mailbox": "agent", "ids": []string{a, b, "ghost"}, "labels_add": []string{"Invoices", "todo"}}, &lab)
	if !slices.Equal(lab.Changed, []string{a, b}) || lab.Status != "partial" || len(lab.Issues) != 1 || lab.Issues[0].ID != "ghost" {
		t.Fatalf("email_label: %+v", lab)
	}
	e.ok("email_label", map[string]any{"mailbox": "agent", "id": b, "labels_remove": []string{"TODO"}, "star": true}, &lab)
	if !slices.Equal(lab.Changed, []string{b}) || lab.Status != "ok" {
		t.Fatalf("email_label remove and star: %+v", lab)
	}
	list := func(args map[string]any) []ListRow {
		t.Helper()
		args["mailbox"] = "agent"
		var out EmailListData
		e.ok("email_list", args, &out)
		return out.Messages
	}
	ids := func(rows []ListRow) []string {
		var out []string
		for _, r := range rows {
			out = append(out, r.ID)
		}
		return out
	}
	if got := ids(list(map[string]any{"label": "invoices"})); !slices.Equal(got, []string{b, a}) {
		t.Errorf("label invoices: %v", got)
	}
	if got := ids(list(map[string]any{"label": "todo"})); !slices.Equal(got, []string{a}) {
		t.Errorf("label todo: %v", got)
	}
	rows := list(map[string]any{"starred": true})
	if got := ids(rows); !slices.Equal(got, []string{b}) || !rows[0].Starred || !slices.Equal(rows[0].Labels, []string{"Invoices"}) {
		t.Errorf("starred: %+v", rows)
	}
	if got := ids(list(map[string]any{"starred": false})); !slices.Equal(got, []string{c, a}) {
		t.Errorf("unstarred: %v", got)
	}
	e.fail("email_label", map[string]any{"mailbox": "agent", "id": a}, protocol.CodeInvalidInput)
	e.fail("email_label", map[string]any{"mailbox": "agent", "id": a, "labels_add": []string{"a,b"}}, protocol.CodeInvalidInput)
	e.fail("email_label", map[string]any{"mailbox": "agent", "id": "ghost", "star": true}, protocol.CodeNotFound)
}

// email_purge is opt-in (the organize preset); it empties trash for good and
// cannot reach a message anywhere else.
func TestEmailPurge(t *testing.T) {
	d := testdaemon.Start(t)
	if names := connect(t, d.Socket).toolNames(); slices.Contains(names, "email_purge") || !slices.Contains(names, "email_label") {
		t.Fatalf("default tools: %v", names)
	}
	e := connect(t, d.Socket, func(o *Options) { o.Tools = []string{"basic", "organize"} })
	e.d = d
	mb := d.Mailbox(t, "agent")
	keep := e.deliver("agent", testdaemon.Message{Subject: "keep", Body: "k"})
	gone := e.deliver("agent", testdaemon.Message{Subject: "gone", Body: "g",
		Attachments: []testdaemon.Attachment{{Filename: "a.pdf", ContentType: "application/pdf", Data: []byte("%PDF-1.4")}}})
	e.ok("email_move", map[string]any{"mailbox": "agent", "id": gone, "action": "trash"}, nil)

	e.fail("email_purge", map[string]any{"mailbox": "agent", "id": keep}, protocol.CodeNotFound)
	e.fail("email_purge", map[string]any{"mailbox": "agent"}, protocol.CodeInvalidInput)
	// The refusal names the argument the call gave (id), not only ids.
	if sc := e.fail("email_purge", map[string]any{"mailbox": "agent", "id": gone, "before": "2026-01-01"}, protocol.CodeInvalidInput); !strings.Contains(fmt.Sprint(sc["message"]), "give id (or ids) or before") {
		t.Errorf("id with before: %v", sc["message"])
	}
	var out PurgeData
	e.ok("email_purge", map[string]any{"mailbox": "agent", "ids": []string{gone}}, &out)
	if !slices.Equal(out.Purged, []string{gone}) {
		t.Fatalf("email_purge: %+v", out)
	}
	if left, _ := os.ReadDir(filepath.Join(mb.Path, "trash")); len(left) != 0 {
		t.Errorf("left in trash: %v", left)
	}
	if _, err := os.Stat(filepath.Join(mb.Path, "inbox", keep+".md")); err != nil {
		t.Errorf("inbox message: %v", err)
	}
}

func (e *env) toolNames() []string {
	e.t.Helper()
	res, err := e.cs.ListTools(e.ctx, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names
}

// The next page of a filtered listing repeats its filters: a cursor is good
// only with them.
func TestEmailListNextPageKeepsFilters(t *testing.T) {
	e := newEnv(t)
	var ids []string
	for i := range 3 {
		ids = append(ids, e.deliver("agent", testdaemon.Message{Subject: "invoice " + string(rune('a'+i)), Body: "pay"}))
	}
	e.ok("email_label", map[string]any{"mailbox": "agent", "ids": ids, "labels_add": []string{"invoices"}}, nil)
	sc := e.ok("email_list", map[string]any{"mailbox": "agent", "label": "invoices", "unread": true, "limit": 2}, nil)
	next, _ := sc["next_action"].(map[string]any)
	args, _ := next["arguments"].(map[string]any)
	if args["label"] != "invoices" || args["unread"] != true || args["cursor"] == nil {
		t.Fatalf("next_action: %v", next)
	}
	var page EmailListData
	e.ok("email_list", args, &page)
	if len(page.Messages) != 1 || page.Messages[0].ID != ids[0] {
		t.Fatalf("second page: %+v", page.Messages)
	}
}
