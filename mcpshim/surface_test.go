package mcpshim

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mailctl/mailctl/internal/testdaemon"
)

var update = flag.Bool("update", false, "rewrite testdata/tools.golden.json")

func TestToolsListGolden(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Tools = []string{"all"} }) // the opt-in tools are pinned too
	res, err := e.cs.ListTools(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(res.Tools, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	golden := filepath.Join("testdata", "tools.golden.json")
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./mcpshim -update)", err)
	}
	if !bytes.Equal(want, got) {
		t.Fatalf("tools/list changed; if on purpose, run go test ./mcpshim -update and review the diff.\n-want +got:\n%s", lineDiff(string(want), string(got)))
	}
}

func lineDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	for i := 0; i < max(len(al), len(bl)) && len(out) < 40; i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			out = append(out, "-"+x, "+"+y)
		}
	}
	return strings.Join(out, "\n")
}

// Every parameter but the self-explanatory ones tells a model what it is, and
// no parameter advertises null: a required list (hook_create.cmd) typed
// ["null","array"] invites a model to send null for it. In results, null is
// advertised only where a field is always present and Go may encode a nil:
// an optional field is left out instead.
func TestEveryParameterDescribedAndTyped(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Tools = []string{"all"} })
	res, err := e.cs.ListTools(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tool := range res.Tools {
		var sc struct {
			Properties map[string]struct {
				Type        any    `json:"type"`
				Description string `json:"description"`
			} `json:"properties"`
		}
		b, _ := json.Marshal(tool.InputSchema)
		json.Unmarshal(b, &sc)
		for name, p := range sc.Properties {
			n++
			if strings.TrimSpace(p.Description) == "" && !slices.Contains(selfExplanatory, name) {
				t.Errorf("%s.%s has no description", tool.Name, name)
			}
			if strings.Contains(fmt.Sprint(p.Type), "null") {
				t.Errorf("%s.%s is typed %v", tool.Name, name, p.Type)
			}
		}
	}
	if n < 90 {
		t.Fatalf("only %d parameters seen", n)
	}
	for _, tool := range res.Tools {
		b, _ := json.Marshal(tool.OutputSchema)
		var sc map[string]any
		json.Unmarshal(b, &sc)
		optionalNulls(t, tool.Name, sc)
	}
}

// optionalNulls reports every optional property of sc (and of the objects
// in it) that is typed to allow null.
func optionalNulls(t *testing.T, path string, sc map[string]any) {
	props, _ := sc["properties"].(map[string]any)
	required, _ := sc["required"].([]any)
	for name, p := range props {
		ps, _ := p.(map[string]any)
		if types, ok := ps["type"].([]any); ok && slices.Contains(types, any("null")) && !slices.Contains(required, any(name)) {
			t.Errorf("%s.%s is optional yet typed %v", path, name, types)
		}
		optionalNulls(t, path+"."+name, ps)
		if items, ok := ps["items"].(map[string]any); ok {
			optionalNulls(t, path+"."+name+"[]", items)
		}
	}
}

func TestToolSurface(t *testing.T) {
	e := newEnv(t)
	res, err := e.cs.ListTools(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tools) > 17 {
		t.Fatalf("%d tools, at most 17 allowed", len(res.Tools))
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	reference := []string{"mailbox_list", "mailbox_create", "mailbox_delete", "email_list", "email_read", "email_send",
		"email_reply", "email_mark_read", "email_mark_unread", "hook_create", "hook_list", "hook_delete"}
	for _, r := range reference {
		if !slices.Contains(names, r) {
			t.Errorf("reference tool %s missing", r)
		}
	}
	type hints struct{ readOnly, destructive, idempotent, openWorld bool }
	want := map[string]hints{
		"mailbox_list":      {true, false, true, false},
		"mailbox_create":    {false, false, true, false},
		"mailbox_delete":    {false, true, true, false},
		"email_list":        {true, false, true, false},
		"email_read":        {true, false, true, false},
		"email_send":        {false, false, false, true},
		"email_reply":       {false, false, false, true},
		"email_forward":     {false, false, false, true},
		"email_mark_read":   {false, false, true, false},
		"email_mark_unread": {false, false, true, false},
		"email_move":        {false, false, true, false},
		"email_wait":        {true, false, true, false},
		"email_attachment":  {true, false, true, false},
		"hook_create":       {false, false, true, false},
		"hook_list":         {true, false, true, false},
		"hook_delete":       {false, true, true, false},
		"email_label":       {false, false, true, false},
		"email_purge":       {false, true, true, false},
	}
	for _, tool := range res.Tools {
		a := tool.Annotations
		if a == nil || a.DestructiveHint == nil || a.OpenWorldHint == nil || a.Title == "" {
			t.Errorf("%s: annotations not all set: %+v", tool.Name, a)
			continue
		}
		got := hints{a.ReadOnlyHint, *a.DestructiveHint, a.IdempotentHint, *a.OpenWorldHint}
		w, ok := want[tool.Name]
		if !ok {
			t.Errorf("%s: no expected annotations", tool.Name)
		} else if got != w {
			t.Errorf("%s: annotations %+v, want %+v", tool.Name, got, w)
		}
		if tool.OutputSchema == nil || tool.Description == "" {
			t.Errorf("%s: missing output schema or description", tool.Name)
		}
	}
	for _, tool := range res.Tools {
		if tool.Name == "hook_create" && !strings.Contains(tool.Description, "fire_on_untrusted") {
			t.Error("hook_create does not warn about fire_on_untrusted")
		}
	}
}

func TestPresets(t *testing.T) {
	for name, tools := range Presets() {
		for _, tool := range tools {
			if !slices.Contains(allTools, tool) {
				t.Errorf("preset %s names unknown tool %s", name, tool)
			}
		}
	}
	if got := Presets()["basic"]; !slices.Equal(got, []string{"mailbox_list", "email_list", "email_read", "email_send", "email_reply", "email_wait"}) {
		t.Errorf("basic = %v", got)
	}
	for _, tc := range []struct {
		spec    string
		want    int
		wantErr bool
	}{{"", 0, false}, {"basic", 6, false}, {"readonly,email_send", 7, false}, {"all", len(allTools), false}, {"email_nuke", 0, true}} {
		got, err := ParseTools(tc.spec)
		if (err != nil) != tc.wantErr || len(got) != tc.want {
			t.Errorf("ParseTools(%q) = %v, %v", tc.spec, got, err)
		}
	}
	e := newEnv(t, func(o *Options) { o.Tools = []string{"readonly"} })
	res, err := e.cs.ListTools(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		if !tool.Annotations.ReadOnlyHint {
			t.Errorf("readonly preset registers %s", tool.Name)
		}
	}
	if len(res.Tools) != len(Presets()["readonly"]) {
		t.Errorf("readonly preset: %d tools", len(res.Tools))
	}
}

func TestResourcesAndPrompts(t *testing.T) {
	e := newEnv(t)
	e.d.Mailbox(t, "agent")
	rl, err := e.cs.ListResources(e.ctx, nil)
	if err != nil || len(rl.Resources) != 1 || rl.Resources[0].URI != URIMailboxes {
		t.Fatalf("resources: %v %+v", err, rl)
	}
	tl, err := e.cs.ListResourceTemplates(e.ctx, nil)
	if err != nil || len(tl.ResourceTemplates) != 3 {
		t.Fatalf("templates: %v %+v", err, tl)
	}
	rr, err := e.cs.ReadResource(e.ctx, &mcp.ReadResourceParams{URI: URIMailboxes})
	if err != nil || !strings.Contains(rr.Contents[0].Text, "agent@example.test") {
		t.Fatalf("mailboxes: %v %+v", err, rr)
	}
	id := e.deliver("agent", trusted(testdaemon.Message{Subject: "hello there", Body: "body of hello there"}))
	rr, err = e.cs.ReadResource(e.ctx, &mcp.ReadResourceParams{URI: "mailctl://mailbox/agent/inbox/" + id})
	if err != nil || !strings.Contains(rr.Contents[0].Text, "# hello there") || rr.Contents[0].MIMEType != "text/markdown" {
		t.Fatalf("message: %v %+v", err, rr)
	}
	rr, err = e.cs.ReadResource(e.ctx, &mcp.ReadResourceParams{URI: "mailctl://mailbox/agent/inbox/" + id + "/raw"})
	if err != nil || !strings.Contains(rr.Contents[0].Text, "Subject: hello there") {
		t.Fatalf("raw: %v %+v", err, rr)
	}
	if _, err := e.cs.ReadResource(e.ctx, &mcp.ReadResourceParams{URI: "mailctl://mailbox/agent/inbox/missing"}); err == nil {
		t.Fatal("missing message read without error")
	}
	pl, err := e.cs.ListPrompts(e.ctx, nil)
	if err != nil || len(pl.Prompts) != 3 {
		t.Fatalf("prompts: %v %+v", err, pl)
	}
	for _, p := range []struct {
		name string
		args map[string]string
		want string
	}{
		{"triage_inbox", map[string]string{"mailbox": "agent"}, "email_list"},
		{"answer_message", map[string]string{"mailbox": "agent", "id": id}, "email_reply"},
		{"setup_hook_safely", map[string]string{"mailbox": "agent", "command": "/usr/local/bin/x"}, "fire_on_untrusted false"},
	} {
		gp, err := e.cs.GetPrompt(e.ctx, &mcp.GetPromptParams{Name: p.name, Arguments: p.args})
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		if text := gp.Messages[0].Content.(*mcp.TextContent).Text; !strings.Contains(text, p.want) {
			t.Errorf("%s: %q lacks %q", p.name, text, p.want)
		}
	}
}

func BenchmarkToolsList(b *testing.B) {
	d := testdaemon.Start(b)
	ctx := context.Background()
	b.Run("new-server-and-list", func(b *testing.B) {
		for b.Loop() {
			s := New(Options{SocketPath: d.Socket})
			st, ct := mcp.NewInMemoryTransports()
			ss, _ := s.mcp.Connect(ctx, st, nil)
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(ctx, ct, nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := cs.ListTools(ctx, nil); err != nil {
				b.Fatal(err)
			}
			cs.Close()
			ss.Close()
		}
	})
	b.Run("list-only", func(b *testing.B) {
		s := New(Options{SocketPath: d.Socket})
		st, ct := mcp.NewInMemoryTransports()
		ss, _ := s.mcp.Connect(ctx, st, nil)
		defer ss.Close()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(ctx, ct, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		for b.Loop() {
			if _, err := cs.ListTools(ctx, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// The instructions and the prompts name only tools the server serves, under
// every preset and the default set: a model told to call a tool it does not
// have wastes a turn on "unknown tool" (TestPrimerNamesServedTools checks
// the agent's primer the same way).
func TestPromptsNameOnlyServedTools(t *testing.T) {
	toolRE := regexp.MustCompile(`\b(?:mailbox|email|hook)_[a-z_]+\b`)
	sets := map[string][]string{"default": nil}
	for name := range Presets() {
		sets[name] = []string{name}
	}
	for name, tools := range sets {
		t.Run(name, func(t *testing.T) {
			s := New(Options{SocketPath: noDaemon(t), Tools: tools})
			defer s.Close()
			st, ct := mcp.NewInMemoryTransports()
			ctx := context.Background()
			ss, err := s.mcp.Connect(ctx, st, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ss.Close()
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, ct, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			served := map[string]bool{}
			tl, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, tool := range tl.Tools {
				served[tool.Name] = true
			}
			if got := s.Tools(); len(got) != len(served) {
				t.Errorf("Tools() = %v, tools/list has %d", got, len(served))
			}
			texts := map[string]string{"instructions": cs.InitializeResult().Instructions}
			pl, err := cs.ListPrompts(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range pl.Prompts {
				args := map[string]string{}
				for _, a := range p.Arguments {
					args[a.Name] = "x"
				}
				gp, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: p.Name, Arguments: args})
				if err != nil {
					t.Fatal(err)
				}
				texts[p.Name] = p.Description + "\n" + gp.Messages[0].Content.(*mcp.TextContent).Text
			}
			for where, text := range texts {
				for _, named := range toolRE.FindAllString(text, -1) {
					if slices.Contains(allTools, named) && !served[named] {
						t.Errorf("%s names %s, which this server does not serve", where, named)
					}
				}
			}
			if served["email_list"] && texts["triage_inbox"] == "" {
				t.Error("triage_inbox missing though email_list is served")
			}
		})
	}
}
