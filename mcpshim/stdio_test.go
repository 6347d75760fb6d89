package mcpshim

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/internal/testwait"
)

// rawSession is a server on a LineTransport driven line by line, as a
// harness speaking raw JSON-RPC over stdio would.
type rawSession struct {
	in    *io.PipeWriter
	lines chan map[string]any
	done  chan error
	// stop cancels Run's context, as SIGTERM does for `mailctl mcp`.
	stop context.CancelFunc
}

// startRaw serves s on a LineTransport with the given line limit and
// initializes the session.
func startRaw(t testing.TB, s *Server, max int) *rawSession {
	r := serveRaw(t, s, &LineTransport{Max: max})
	r.send(initializeLine)
	if m := r.reply(t, "init"); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	r.send(initializedLine)
	return r
}

const (
	initializeLine  = `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	initializedLine = `{"jsonrpc":"2.0","method":"notifications/initialized"}`
)

// serveRaw serves s on lt, its In and Out set to pipes the session drives.
func serveRaw(t testing.TB, s *Server, lt *LineTransport) *rawSession {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	lt.In, lt.Out = inR, outW
	ctx, cancel := context.WithCancel(context.Background())
	r := &rawSession{in: inW, lines: make(chan map[string]any, 16), done: make(chan error, 1), stop: cancel}
	go func() {
		r.done <- s.Run(ctx, lt)
		outW.Close()
	}()
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 1<<20), 8<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				m = map[string]any{"unparsed": sc.Text()}
			}
			r.lines <- m
		}
		close(r.lines)
	}()
	t.Cleanup(func() {
		cancel()
		inW.Close()
		for range r.lines {
		}
	})
	return r
}

func (r *rawSession) send(line string) bool {
	_, err := io.WriteString(r.in, line+"\n")
	return err == nil
}

// reply waits for the response whose id is want (a string id, or a number
// written as its decimal text), skipping notifications.
func (r *rawSession) reply(t testing.TB, want string) map[string]any {
	t.Helper()
	return r.replyWithin(t, want, 20*time.Second)
}

// replyWithin is reply with a deadline of the caller's: a reply that moves
// tens of megabytes takes longer under the race detector on a loaded
// machine, and the deadline is there only to end a hang with a reason.
func (r *rawSession) replyWithin(t testing.TB, want string, d time.Duration) map[string]any {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case m, ok := <-r.lines:
			if !ok {
				t.Fatalf("session ended before the reply to %s", want)
			}
			if _, isReq := m["method"]; isReq {
				continue
			}
			if fmt.Sprint(m["id"]) == want {
				return m
			}
		case <-timeout:
			t.Fatalf("no reply to %s", want)
		}
	}
}

// answersTo sends line, then a ping with the id "after", and gives the
// answers other than the ping's, collected until it has the ping's and at
// least one more, in whichever order the server writes them: the ping
// bounds the wait for what line is answered with, and shows the session
// still serves after it.
func (r *rawSession) answersTo(t testing.TB, line string) []map[string]any {
	t.Helper()
	r.send(line)
	r.send(`{"jsonrpc":"2.0","id":"after","method":"ping"}`)
	var answers []map[string]any
	after := false
	timeout := time.After(20 * time.Second)
	for !after || len(answers) == 0 {
		select {
		case m, ok := <-r.lines:
			if !ok {
				t.Fatalf("%q: the session ended with the answers %v (the next ping's: %v)", line, answers, after)
			}
			switch _, isReq := m["method"]; {
			case isReq:
			case m["id"] == "after":
				after = true
			default:
				answers = append(answers, m)
			}
		case <-timeout:
			t.Fatalf("%q: want its answer and the next ping's; got %v (the next: %v)", line, answers, after)
		}
	}
	return answers
}

func noDaemon(t testing.TB) string { return filepath.Join(shortTempDir(t), "none.sock") }

// Regression: a tools/call for a tool the server does not serve panicked in
// logCalls (a typed nil result), killing every session of the process.
func TestUnknownToolKeepsServing(t *testing.T) {
	s := New(Options{SocketPath: noDaemon(t), Tools: []string{"basic"}})
	r := startRaw(t, s, 0)
	r.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"hook_create","arguments":{}}}`)
	m := r.reply(t, "1")
	e, _ := m["error"].(map[string]any)
	if e == nil || e["code"] != float64(-32602) || !strings.Contains(fmt.Sprint(e["message"]), "hook_create") {
		t.Fatalf("unknown tool: want JSON-RPC error -32602 naming the tool, got %v", m)
	}
	r.send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if m := r.reply(t, "2"); m["result"] == nil {
		t.Fatalf("tools/list after the unknown tool: %v", m)
	}
}

// The same through the SDK client and with debug logging on, where logCalls
// reads the result.
func TestUnknownToolSDKClient(t *testing.T) {
	s := New(Options{SocketPath: noDaemon(t), Logger: testLogger()})
	st, ct := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
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
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "no_such_tool"}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
		t.Fatalf("want an unknown tool error, got %v", err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "mailbox_list"})
	if err != nil || !res.IsError {
		t.Fatalf("a valid call after it: want a tool error (no daemon), got %v %v", res, err)
	}
}

// A line over the limit is answered with too_large under the request's id,
// wherever the client put the id, and the session goes on.
func TestOversizedLineAnswered(t *testing.T) {
	s := New(Options{SocketPath: noDaemon(t)})
	r := startRaw(t, s, 4096)
	big := strings.Repeat("A", 10000)
	for _, c := range []struct{ id, line string }{
		{"7", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"email_send","arguments":{"body":"` + big + `"}}}`},
		{"ts-8", `{"method":"tools/call","params":{"name":"email_send","arguments":{"body":"` + big + `"}},"jsonrpc":"2.0","id":"ts-8"}`},
	} {
		r.send(c.line)
		m := r.reply(t, c.id)
		e, _ := m["error"].(map[string]any)
		data, _ := e["data"].(map[string]any)
		if e == nil || e["code"] != float64(-32600) || data["code"] != "too_large" || !strings.Contains(fmt.Sprint(e["message"]), "4096") {
			t.Fatalf("oversized line (id %s): want -32600 too_large naming the limit, got %v", c.id, m)
		}
	}
	r.send(`not json`)
	if m := r.reply(t, "<nil>"); m["error"].(map[string]any)["code"] != float64(-32700) {
		t.Fatalf("not JSON: want -32700, got %v", m)
	}
	r.send(`{"jsonrpc":"2.0","id":9,"method":"ping"}`)
	if m := r.reply(t, "9"); m["result"] == nil {
		t.Fatalf("ping after the refusals: %v", m)
	}
}

// Lines the SDK would misread or misname are answered for what they are: a
// request with a null id (else taken for a notification, and never
// answered), nesting past the decoder's depth (valid JSON, else called not
// JSON), and arguments holding a number out of range (an object, else called
// not one). The session goes on after each.
func TestMalformedLinesAnsweredForWhatTheyAre(t *testing.T) {
	r := startRaw(t, New(Options{SocketPath: noDaemon(t)}), 0)
	deep := strings.Repeat("[", 200000) + strings.Repeat("]", 200000)
	for _, c := range []struct{ name, line, id, want string }{
		{"null id", `{"jsonrpc":"2.0","id":null,"method":"ping"}`, "<nil>", "the id is null"},
		{"deep", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":` + deep + `}}`, "<nil>", "more than 10000 deep"},
	} {
		r.send(c.line)
		m := r.reply(t, c.id)
		e, _ := m["error"].(map[string]any)
		data, _ := e["data"].(map[string]any)
		if e == nil || data["code"] != "invalid_input" || !strings.Contains(fmt.Sprint(e["message"]), c.want) {
			t.Fatalf("%s: want invalid_input saying %q, got %v", c.name, c.want, m)
		}
	}
	r.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"email_list","arguments":{"mailbox":"agent","limit":1e400}}}`)
	sc, _ := r.reply(t, "2")["result"].(map[string]any)["structuredContent"].(map[string]any)
	if sc["code"] != "invalid_input" || !strings.Contains(fmt.Sprint(sc["message"]), "the number 1e400 is out of range") {
		t.Fatalf("limit 1e400: want invalid_input naming the number, got %v", sc)
	}
	// The number is named up to 40 characters, and cut after them.
	for i, n := range []int{40, 41} {
		num := "1." + strings.Repeat("0", n-6) + "e400"
		id := fmt.Sprint(20 + i)
		r.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"email_list","arguments":{"mailbox":"agent","limit":` + num + `}}}`)
		sc, _ := r.reply(t, id)["result"].(map[string]any)["structuredContent"].(map[string]any)
		want := "the number " + num + " is out of range"
		if n > 40 {
			want = "the number " + num[:40] + "… is out of range"
		}
		if msg := fmt.Sprint(sc["message"]); !strings.Contains(msg, want) {
			t.Fatalf("limit of %d characters: want %q, got %v", n, want, sc)
		}
	}
	r.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"email_list","arguments":["agent"]}}`)
	sc, _ = r.reply(t, "3")["result"].(map[string]any)["structuredContent"].(map[string]any)
	if sc["code"] != "invalid_input" || !strings.Contains(fmt.Sprint(sc["message"]), "arguments must be a JSON object") {
		t.Fatalf("arguments as an array: want invalid_input saying they must be an object, got %v", sc)
	}
	r.send(`{"jsonrpc":"2.0","id":9,"method":"ping"}`)
	if m := r.reply(t, "9"); m["result"] == nil {
		t.Fatalf("ping after the refusals: %v", m)
	}
}

// Regression: the SDK reads a numeric id through float64 and int64, so a ping
// with id 1.5 was answered under id 1 and one with 9007199254740993 under
// 9007199254740992: answers the client could not match to its calls. Such an
// id is refused under the id as sent; whole numbers up to 2^53 are served.
func TestNumericIDsAnsweredUnderTheSameID(t *testing.T) {
	r := startRaw(t, New(Options{SocketPath: noDaemon(t)}), 0)
	for _, c := range []struct {
		id, reply string // reply: the id's text as the test's decoder prints it
		refused   bool
	}{
		{"1.5", "1.5", true},
		{"-0.25", "-0.25", true},
		{"9007199254740993", "9.007199254740992e+15", true},
		{"12345678901234567891", "1.2345678901234567e+19", true},
		{"1e-7", "1e-07", true},
		{"9007199254740992", "9.007199254740992e+15", false},
		{"-42", "-42", false},
		{"1e3", "1000", false},
		// The id is the member the SDK reads, spelled "id" exactly.
		{`1.5,"ID":1`, "1.5", true},
		{`1,"Id":1.5`, "1", false},
	} {
		answers := r.answersTo(t, `{"jsonrpc":"2.0","id":`+c.id+`,"method":"ping"}`)
		if len(answers) != 1 || fmt.Sprint(answers[0]["id"]) != c.reply {
			t.Fatalf("id %s: want one answer under id %s, got %v", c.id, c.reply, answers)
		}
		e, _ := answers[0]["error"].(map[string]any)
		if refused := e != nil; refused != c.refused {
			t.Fatalf("id %s: refused %v, want %v: %v", c.id, refused, c.refused, answers[0])
		}
		if c.refused && (e["code"] != float64(jsonrpc.CodeInvalidRequest) || !strings.Contains(fmt.Sprint(e["message"]), "would not come back as it was sent")) {
			t.Fatalf("id %s: want -32600 saying why, got %v", c.id, e)
		}
	}
}

// Regression: the SDK refused a call before initialize, and a second
// initialize, with a plain error, which reached the client under code 0, a
// code JSON-RPC does not define. Both are -32600 with data.code.
func TestSessionStateErrorsHaveRPCCodes(t *testing.T) {
	r := serveRaw(t, New(Options{SocketPath: noDaemon(t)}), &LineTransport{})
	check := func(what string, m map[string]any) {
		t.Helper()
		e, _ := m["error"].(map[string]any)
		data, _ := e["data"].(map[string]any)
		if e["code"] != float64(jsonrpc.CodeInvalidRequest) || data["code"] != "invalid_input" {
			t.Errorf("%s: want -32600 with data.code invalid_input, got %v", what, m)
		}
	}
	r.send(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	check("tools/list before initialize", r.reply(t, "1"))
	r.send(initializeLine)
	if m := r.reply(t, "init"); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	r.send(strings.Replace(initializeLine, `"id":"init"`, `"id":"again"`, 1))
	check("a second initialize", r.reply(t, "again"))
}

// Regression: a call whose id a call still running held got no answer at
// all (the SDK drops it), so its client waited for good. It is refused under
// that id; once the first call is answered, the id is free again.
func TestReusedIDOfARunningCallAnswered(t *testing.T) {
	d := testdaemon.Start(t)
	d.Mailbox(t, "agent")
	r := startRaw(t, New(Options{SocketPath: d.Socket}), 0)
	r.send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"email_wait","arguments":{"mailbox":"agent","timeout_secs":600}}}`)
	testwait.For(t, "the wait's watch", func() bool { return d.Watchers() > 0 })
	r.send(`{"jsonrpc":"2.0","id":5,"method":"ping"}`)
	m := r.reply(t, "5")
	e, _ := m["error"].(map[string]any)
	if e["code"] != float64(jsonrpc.CodeInvalidRequest) || !strings.Contains(fmt.Sprint(e["message"]), "already in use by a call still running") {
		t.Fatalf("ping reusing the wait's id: want -32600 saying the id is in use, got %v", m)
	}
	r.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}`)
	if m := r.reply(t, "5"); m["result"] == nil {
		t.Fatalf("the cancelled wait: want its tool result, got %v", m)
	}
	r.send(`{"jsonrpc":"2.0","id":5,"method":"ping"}`)
	if m := r.reply(t, "5"); m["result"] == nil {
		t.Fatalf("ping with the id once the wait was answered: %v", m)
	}
}

// The default limit carries the documented 25 MiB of attachments: the call
// reaches the tool (which answers unavailable, with no daemon behind it).
func TestStdioCarriesMaxAttachments(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 34 MB")
	}
	s := New(Options{SocketPath: noDaemon(t)})
	r := startRaw(t, s, 0)
	data := base64.StdEncoding.EncodeToString(make([]byte, MaxAttachBytes))
	r.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"email_send","arguments":{"from_mailbox":"agent","to":"a@b.test","subject":"s","body":"b","attachments_base64":[{"filename":"f.bin","data":"` + data + `"}]}}}`)
	m := r.replyWithin(t, "3", 5*time.Minute)
	res, _ := m["result"].(map[string]any)
	sc, _ := res["structuredContent"].(map[string]any)
	if sc["code"] != "unavailable" {
		t.Fatalf("25 MiB attachment: want the tool's unavailable (no daemon), got %.300v", m)
	}
}

func TestIDFromTail(t *testing.T) {
	for tail, want := range map[string]string{
		`AAAA"}},"jsonrpc":"2.0","id":12}`:      "12",
		`AAAA"}},"id":"x-1","jsonrpc":"2.0"}`:   `"x-1"`,
		`AAAA"}},"jsonrpc":"2.0","id" : "q" } `: `"q"`,
		`"id":{"a":1}}`:                         "",
		`AAAA"}},"jsonrpc":"2.0","id":12`:       "",
		`"data":"id\":3"}},"jsonrpc":"2.0"}`:    "",
	} {
		if got := string(idFromTail([]byte(tail))); got != want {
			t.Errorf("idFromTail(%s) = %s, want %s", tail, got, want)
		}
	}
}

// testLogger logs everything to nowhere, so that debug-only paths run.
func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// resources/subscribe and resources/read fail with the protocol's codes (a
// plain Go error reached the client as code 0), with mailctl's code in data.
func TestResourceErrorCodes(t *testing.T) {
	d := testdaemon.Start(t)
	d.Mailbox(t, "agent")
	r := startRaw(t, New(Options{SocketPath: d.Socket}), 0)
	down := startRaw(t, New(Options{SocketPath: noDaemon(t)}), 0)
	for i, c := range []struct {
		s           *rawSession
		method, uri string
		code        float64
		mailctlCode string
		nextTool    string // for not_found: the tool data.next_action names
	}{
		{r, "resources/subscribe", "mailctl://mailboxes", -32602, "invalid_input", ""},
		{r, "resources/subscribe", "mailctl://mailbox/agent/inbox/x", -32602, "invalid_input", ""},
		{r, "resources/subscribe", "mailctl://mailbox/ghost/inbox", -32602, "not_found", "mailbox_list"},
		{r, "resources/read", "mailctl://mailbox/ghost/inbox", -32602, "not_found", "mailbox_list"},
		{r, "resources/read", "mailctl://mailbox/agent/inbox/nope", -32602, "not_found", "email_list"},
		{r, "resources/read", "mailctl://mailbox/ghost/inbox/nope", -32602, "not_found", "mailbox_list"},
		// URIs that name no resource of the server: another scheme, dot
		// segments, too many segments (the SDK's own answer had no data.code).
		{r, "resources/read", "file:///etc/passwd", -32602, "invalid_input", ""},
		{r, "resources/read", "mailctl://mailbox/agent/inbox/../../../etc", -32602, "invalid_input", ""},
		{r, "resources/read", "mailctl://mailbox/agent/inbox/x/y/z", -32602, "invalid_input", ""},
		{r, "resources/read", "mailctl://mailbox/agent/inbox/x/notraw", -32602, "invalid_input", ""},
		{r, "resources/read", "mailctl://mailbox/agent/inbox/..", -32602, "invalid_input", ""},
		{r, "resources/read", "mailctl://mailbox/agent/./x/raw", -32602, "invalid_input", ""},
		{down, "resources/subscribe", "mailctl://mailbox/agent/inbox", -32603, "unavailable", ""},
		{down, "resources/read", "mailctl://mailboxes", -32603, "unavailable", ""},
	} {
		id := fmt.Sprint(100 + i)
		c.s.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"` + c.method + `","params":{"uri":"` + c.uri + `"}}`)
		m := c.s.reply(t, id)
		e, _ := m["error"].(map[string]any)
		data, _ := e["data"].(map[string]any)
		if e == nil || e["code"] != c.code || data["code"] != c.mailctlCode || data["uri"] != c.uri {
			t.Errorf("%s %s: want %v with data.code %s, got %v", c.method, c.uri, c.code, c.mailctlCode, m)
		}
		next, _ := data["next_action"].(map[string]any)
		if c.nextTool != "" && (next == nil || next["tool"] != c.nextTool) {
			t.Errorf("%s %s: next_action %v, want tool %s", c.method, c.uri, data["next_action"], c.nextTool)
		}
	}
	r.send(`{"jsonrpc":"2.0","id":"ok","method":"resources/subscribe","params":{"uri":"mailctl://mailbox/agent/inbox"}}`)
	if m := r.reply(t, "ok"); m["error"] != nil {
		t.Fatalf("subscribing to an inbox: %v", m)
	}
}

// Regression: prompts/get without an argument the prompt declares required
// answered with a prompt naming empty mailboxes and ids; it is -32602 with
// data.code invalid_input, and a blank argument counts as missing.
func TestPromptMissingRequiredArgument(t *testing.T) {
	r := startRaw(t, New(Options{SocketPath: noDaemon(t)}), 0)
	for i, c := range []struct {
		name, args, missing string
	}{
		{"triage_inbox", `{}`, "mailbox"},
		{"triage_inbox", `{"mailbox":" "}`, "mailbox"},
		{"answer_message", `{"mailbox":"agent"}`, "id"},
		{"setup_hook_safely", `{"command":"/bin/true"}`, "mailbox"},
	} {
		id := fmt.Sprint(200 + i)
		r.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"prompts/get","params":{"name":"` + c.name + `","arguments":` + c.args + `}}`)
		m := r.reply(t, id)
		e, _ := m["error"].(map[string]any)
		data, _ := e["data"].(map[string]any)
		if e == nil || e["code"] != float64(-32602) || data["code"] != "invalid_input" || !strings.Contains(fmt.Sprint(e["message"]), strconv.Quote(c.missing)) {
			t.Errorf("%s %s: want -32602 invalid_input naming %q, got %v", c.name, c.args, c.missing, m)
		}
	}
	r.send(`{"jsonrpc":"2.0","id":"ok","method":"prompts/get","params":{"name":"answer_message","arguments":{"mailbox":"agent","id":"x"}}}`)
	if m := r.reply(t, "ok"); m["result"] == nil {
		t.Errorf("a prompt with its required arguments: %v", m)
	}
}

// The fast path writes what the SDK's encoder writes, byte for byte.
func TestEncodeResultMatchesSDK(t *testing.T) {
	for _, id := range []any{float64(7), "abc-1", "with \"quotes\" <tags>"} {
		jid, err := jsonrpc.MakeID(id)
		if err != nil {
			t.Fatal(err)
		}
		resp := &jsonrpc.Response{ID: jid, Result: json.RawMessage(`{"tools":[{"name":"x","inputSchema":{"type":"object","description":"a <b> & c"}}]}`)}
		want, err := jsonrpc.EncodeMessage(resp)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := encodeResult(resp)
		if !ok || string(got) != string(want) {
			t.Errorf("id %v:\n got %s\nwant %s", id, got, want)
		}
	}
	if _, ok := encodeResult(&jsonrpc.Response{Error: errors.New("x")}); ok {
		t.Error("an error response took the fast path")
	}
}

// TestRefusedLineAnsweredUnderItsExactID: a line the SDK refuses is
// answered under the member named "id" exactly, the one the SDK and the
// client mean; a member spelled otherwise ("ID", "Id") is no id, and the
// answer's id is null.
func TestRefusedLineAnsweredUnderItsExactID(t *testing.T) {
	r := startRaw(t, New(Options{SocketPath: noDaemon(t)}), 0)
	for _, c := range []struct{ line, reply string }{
		{`{"jsonrpc":"1.0","id":6,"method":"ping"}`, "6"},
		{`{"jsonrpc":"1.0","ID":5,"method":"ping"}`, "<nil>"},
		{`{"jsonrpc":"1.0","Id":"x","id":7,"method":"ping"}`, "7"},
	} {
		r.send(c.line)
		m := r.reply(t, c.reply)
		if e, _ := m["error"].(map[string]any); e == nil || e["code"] != float64(jsonrpc.CodeInvalidRequest) {
			t.Fatalf("%s: want -32600 under id %s, got %v", c.line, c.reply, m)
		}
	}
}

// Regression: the SDK decodes the first JSON value of a line and ignores
// what follows it, so a line of a message and anything after it was served
// as that message: a ping with id 1.5 followed by " x" was answered under
// id 1 (the check of its id read the whole line, found it no JSON and let
// it by), and a second message on the line went unanswered. Such a line is
// no JSON text: it is answered with a parse error under no id, and nothing
// of it is served.
func TestALineOfMoreThanOneValueIsAParseError(t *testing.T) {
	r := startRaw(t, New(Options{SocketPath: noDaemon(t)}), 0)
	for _, line := range []string{
		`{"jsonrpc":"2.0","id":1.5,"method":"ping"} x`,
		`{"jsonrpc":"2.0","id":null,"method":"ping"}]`,
		`{"jsonrpc":"2.0","id":1,"method":"ping"} {"jsonrpc":"2.0","id":2,"method":"ping"}`,
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\x00",
	} {
		answers := r.answersTo(t, line)
		e, _ := answers[0]["error"].(map[string]any)
		if len(answers) != 1 || answers[0]["id"] != nil || e == nil || e["code"] != float64(jsonrpc.CodeParseError) {
			t.Fatalf("%q: want one parse error under no id, got %v", line, answers)
		}
	}
}
