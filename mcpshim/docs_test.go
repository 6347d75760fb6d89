package mcpshim

import (
	"encoding/json"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/protocol"
)

// sinceStarted is a clock that reads at when it is made and runs on at the
// real clock's pace.
func sinceStarted(at time.Time) func() time.Time {
	start := time.Now()
	return func() time.Time { return at.Add(time.Since(start)) }
}

// docs/mcp.md says what the server does: its tool headings list exactly each
// tool's parameters (optional ones marked ?), every tool's section has an
// argument example that passes its input schema and that the server, called
// with it, takes as a well-formed call, its error-code list is the
// protocol's, and its error example is what the server answers to that call.
//
// The daemon's clock runs from the page's own now (the first now_utc it
// shows), not from today's: an example that names a time to come, such as
// a send_at, stays one however long after the page was written the test
// runs.
func TestDocsMatchTheServer(t *testing.T) {
	raw, err := os.ReadFile("../docs/mcp.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	now := regexp.MustCompile(`"now_utc": "([^"]+)"`).FindStringSubmatch(doc)
	if now == nil {
		t.Fatal("docs/mcp.md shows no now_utc to run its examples at")
	}
	pageNow, err := time.Parse(time.RFC3339Nano, now[1])
	if err != nil {
		t.Fatalf("docs/mcp.md's now_utc: %v", err)
	}
	d := testdaemon.Start(t, testdaemon.Options{Clock: sinceStarted(pageNow)})
	e := connect(t, d.Socket, func(o *Options) { o.Tools = []string{"all"} }) // the opt-in tools are documented too
	e.d = d
	e.d.Mailbox(t, "agent")
	res, err := e.cs.ListTools(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	type schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	schemas := map[string]schema{}
	resolved := map[string]*jsonschema.Resolved{}
	for _, tool := range res.Tools {
		var s schema
		b, _ := json.Marshal(tool.InputSchema)
		json.Unmarshal(b, &s)
		schemas[tool.Name] = s
		var js jsonschema.Schema
		if err := json.Unmarshal(b, &js); err != nil {
			t.Fatal(err)
		}
		if resolved[tool.Name], err = js.Resolve(nil); err != nil {
			t.Fatal(err)
		}
	}

	// Headings: ### `tool(a, b?, c? | d?)` / `other(...)`.
	heading := regexp.MustCompile("`([a-z_]+)\\(([^)]*)\\)`")
	sections := map[string]string{}
	parts := strings.Split(doc, "\n### ")
	for _, part := range parts[1:] {
		line, body, _ := strings.Cut(part, "\n")
		for _, m := range heading.FindAllStringSubmatch(line, -1) {
			name, params := m[1], m[2]
			s, ok := schemas[name]
			if !ok {
				t.Errorf("docs/mcp.md documents %s, which the server does not serve", name)
				continue
			}
			sections[name] = body
			if params == "..." {
				continue
			}
			var got []string
			for _, p := range strings.FieldsFunc(params, func(r rune) bool { return r == ',' || r == '|' }) {
				p = strings.TrimSpace(p)
				opt := strings.HasSuffix(p, "?")
				p = strings.TrimSuffix(p, "?")
				got = append(got, p)
				if _, ok := s.Properties[p]; !ok {
					t.Errorf("%s: docs list %s, which the tool does not take", name, p)
				}
				if req := slices.Contains(s.Required, p); req == opt {
					t.Errorf("%s.%s: docs say optional=%v, the schema says required=%v", name, p, opt, req)
				}
			}
			for p := range s.Properties {
				if !slices.Contains(got, p) {
					t.Errorf("%s: the tool takes %s, which its docs heading does not list", name, p)
				}
			}
		}
	}
	for name := range schemas {
		if _, ok := sections[name]; !ok {
			t.Errorf("tool %s has no section in docs/mcp.md", name)
		}
	}

	// Argument examples: the first JSON object of each ```json block in a
	// section. A section may document several tools (`a(...)` / `b(...)`):
	// each example is for the first of them whose input schema it passes.
	block := regexp.MustCompile("(?s)```json\n(.*?)```")
	type example struct {
		tool string
		args map[string]any
	}
	var examples []example
	documented := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(sections)) {
		if documented[name] {
			continue
		}
		var group []string // the tools sharing this section, in name order
		for _, other := range slices.Sorted(maps.Keys(sections)) {
			if sections[other] == sections[name] {
				group = append(group, other)
				documented[other] = true
			}
		}
		for _, m := range block.FindAllStringSubmatch(sections[name], -1) {
			var args map[string]any
			if err := json.NewDecoder(strings.NewReader(m[1])).Decode(&args); err != nil {
				t.Errorf("%s: example %q is not JSON: %v", name, m[1], err)
				continue
			}
			tool := ""
			for _, g := range group {
				if resolved[g].Validate(args) == nil {
					tool = g
					break
				}
			}
			if tool == "" {
				t.Errorf("%v: example %v passes none of their input schemas", group, args)
				continue
			}
			examples = append(examples, example{tool, args})
		}
	}

	// And each example runs: called on a real daemon (with the mailbox
	// "agent" and nothing else), the server takes it as a well-formed call.
	// The ids and addresses in examples need not exist, so not_found and
	// the like are fine; invalid_input is a documented call the server
	// refuses.
	ran := map[string]bool{}
	for _, ex := range examples {
		if _, ok := ex.args["timeout_secs"]; ok && ex.tool == "email_wait" {
			ex.args["timeout_secs"] = 1 // the example's wait, shortened
		}
		res, sc := e.call(ex.tool, ex.args)
		if res.IsError && sc["code"] == "invalid_input" {
			t.Errorf("%s: the documented example %v is refused: %v", ex.tool, ex.args, sc["summary"])
		}
		ran[ex.tool] = true
	}
	for _, sec := range slices.Sorted(maps.Keys(sections)) {
		covered := false
		for _, other := range slices.Sorted(maps.Keys(sections)) {
			covered = covered || sections[other] == sections[sec] && ran[other]
		}
		if !covered {
			t.Errorf("%s: its section in docs/mcp.md has no example", sec)
		}
	}
	t.Logf("ran %d documented examples", len(examples))

	// The error-code list.
	codes := regexp.MustCompile("- `code` is one of ([^:]*):").FindStringSubmatch(doc)
	if codes == nil {
		t.Fatal("docs/mcp.md lost its error-code list")
	}
	var listed []string
	for _, c := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(codes[1], -1) {
		listed = append(listed, c[1])
	}
	if !slices.Equal(listed, protocol.Codes) {
		t.Errorf("docs list codes %v, the protocol has %v", listed, protocol.Codes)
	}

	// The error example is the answer to email_read {"mailbox":"agent","id":"nope"}.
	m := regexp.MustCompile("(?s)Error \\(`isError: true`\\):\n\n```json\n(.*?)```").FindStringSubmatch(doc)
	if m == nil {
		t.Fatal("docs/mcp.md lost its error example")
	}
	var want map[string]any
	if err := json.Unmarshal([]byte(m[1]), &want); err != nil {
		t.Fatal(err)
	}
	got := e.fail("email_read", map[string]any{"mailbox": "agent", "id": "nope"}, want["code"].(string))
	delete(want, "meta")
	delete(got, "meta")
	a, _ := json.Marshal(want)
	b, _ := json.Marshal(got)
	if string(a) != string(b) {
		t.Errorf("the error example in docs/mcp.md is not what the server answers:\n docs %s\nserver %s", a, b)
	}
}
