package mcpshim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// mapProbe is the straightforward reading of a message that probeJSON
// replaces: every member decoded into a map, then the two looked up by
// their exact names.
type mapProbe messageProbe

func (p *mapProbe) UnmarshalJSON(b []byte) error {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(b, &members); err != nil {
		return err
	}
	*p = mapProbe{ID: members["id"]}
	if m, ok := members["method"]; ok {
		return json.Unmarshal(m, &p.Method)
	}
	return nil
}

// probed is what probeJSON reads of a text, for comparing.
type probed struct {
	valid, tooDeep bool
	messages       []string
}

func (p probed) String() string {
	return fmt.Sprintf("valid %v, too deep %v, messages %q", p.valid, p.tooDeep, p.messages)
}

func describeProbe(p messageProbe, ok bool) string {
	if !ok {
		return "no message"
	}
	method := "<none>"
	if p.Method != nil {
		method = fmt.Sprintf("%q", *p.Method)
	}
	return fmt.Sprintf("id %q (nil %v) method %s", p.ID, p.ID == nil, method)
}

// oracleProbeJSON is probeJSON as json.Valid, jsonDepth and mapProbe.
func oracleProbeJSON(b []byte, limit int, batch bool) probed {
	depth := jsonDepth(b)
	r := probed{valid: json.Valid(b) && depth <= limit, tooDeep: depth > limit}
	if !r.valid {
		return r
	}
	msgs := []json.RawMessage{b}
	if t := bytes.TrimLeft(b, " \t\r\n"); batch && t[0] == '[' {
		msgs = nil
		json.Unmarshal(t, &msgs)
	}
	for _, m := range msgs {
		var p mapProbe
		err := json.Unmarshal(m, &p)
		r.messages = append(r.messages, describeProbe(messageProbe(p), err == nil))
	}
	return r
}

func probeJSONResult(b []byte, limit int, batch bool) probed {
	var r probed
	r.valid, r.tooDeep = probeJSON(b, limit, batch, func(p messageProbe, ok bool) {
		r.messages = append(r.messages, describeProbe(p, ok))
	})
	if !r.valid {
		r.messages = nil // read before the end of the text, and of no use then
	}
	return r
}

// oracleRefuseBody is refuseBody as it was written on json.Valid, jsonDepth
// and mapProbe.
func oracleRefuseBody(body []byte) *postRefusal {
	if jsonDepth(body) > sdkMaxJSONDepth {
		return &postRefusal{code: jsonrpc.CodeParseError, msg: fmt.Sprintf("parse error: the body nests arrays and objects more than %d deep", sdkMaxJSONDepth)}
	}
	if !json.Valid(body) {
		return &postRefusal{code: jsonrpc.CodeParseError, msg: "parse error: the body is not JSON: send one JSON-RPC message"}
	}
	b := bytes.TrimLeft(body, " \t\r\n")
	one := func(msg []byte) *postRefusal {
		var p mapProbe
		err := json.Unmarshal(msg, &p)
		return refuseMessage(messageProbe(p), err == nil)
	}
	if b[0] != '[' {
		return one(b)
	}
	var batch []json.RawMessage
	json.Unmarshal(b, &batch)
	if len(batch) == 0 {
		return &postRefusal{code: jsonrpc.CodeInvalidRequest, msg: "invalid request: an empty batch: send one JSON-RPC message"}
	}
	for _, m := range batch {
		if bad := one(m); bad != nil {
			return bad
		}
	}
	return nil
}

// oracleBadID is badID as it was written on mapProbe.
func oracleBadID(msg []byte) (json.RawMessage, string) {
	var p mapProbe
	if json.Unmarshal(msg, &p) != nil {
		return nil, ""
	}
	return messageProbe(p).badID()
}

func refusalString(r *postRefusal) string {
	if r == nil {
		return "served"
	}
	return fmt.Sprintf("id %q (nil %v) code %d: %s", r.id, r.id == nil, r.code, r.msg)
}

// probeLimits are the nesting limits the transports use, and a small one
// that short inputs reach.
var probeLimits = []int{2, sdkMaxJSONDepth, maxJSONDepth}

// checkProbe fails t when probeJSON, refuseBody or badID read b otherwise
// than their straightforward forms.
func checkProbe(t *testing.T, b []byte) {
	t.Helper()
	for _, limit := range probeLimits {
		for _, batch := range []bool{false, true} {
			if got, want := probeJSONResult(b, limit, batch), oracleProbeJSON(b, limit, batch); got.String() != want.String() {
				t.Fatalf("probeJSON(%q, %d, batch %v):\n got %v\nwant %v", b, limit, batch, got, want)
			}
		}
	}
	if got, want := refusalString(refuseBody(b)), refusalString(oracleRefuseBody(b)); got != want {
		t.Fatalf("refuseBody(%q):\n got %s\nwant %s", b, got, want)
	}
	gotID, gotWhy, gotValid := badID(b)
	wantID, wantWhy := oracleBadID(b)
	wantValid := json.Valid(b) && jsonDepth(b) <= maxJSONDepth
	if !bytes.Equal(gotID, wantID) || (gotID == nil) != (wantID == nil) || gotWhy != wantWhy || gotValid != wantValid {
		t.Fatalf("badID(%q) = %q, %q, %v; want %q, %q, %v", b, gotID, gotWhy, gotValid, wantID, wantWhy, wantValid)
	}
}

var probeSeeds = []string{
	``, ` `, `{`, `}`, `[`, `[]`, ` [ ] `, `[,]`, `[1,]`, `{"a":1,}`, `null`, `[null]`, `true`, `fals`, `nul`,
	`0`, `-0`, `01`, `-`, `1.`, `1.5e`, `1e+5`, `-0.0E-0`, `"\u00e9"`, `"\/\b\f\n\r\t\"\\"`, `"\uD800"`, `"\x"`, "\"\x01\"", "\"\x1f\"", "\"\x7f\"", "\"\xff\"",
	`{"id":1,"method":"ping"}`, ` {"id" : 1 , "method" : "ping" } `,
	`{"jsonrpc":"2.0","id":null,"method":"ping"}`,
	`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`,
	`{"jsonrpc":"2.0","id":9007199254740993,"method":"ping"}`,
	`{"jsonrpc":"2.0","id":{"a": [1, 2]},"method":"ping"}`,
	`{"jsonrpc":"2.0","ID":null,"id":1,"Method":"x","method":"ping"}`,
	`{"id":null,"id":2,"method":5,"method":"ping"}`,
	`{"id":1,"method":"ping","ID":null,"Method":"x","ıd":null}`,
	`{"method":"ping","method":null}`,
	`{"method":5}`,
	`{"\u0069d":null,"\u006d\u0065\u0074\u0068\u006f\u0064":"ping"}`,
	`{"\u0069\u0064\u0000":null,"method":"x"}`,
	"{\"i\xffd\":null,\"method\":\"tools/nope\"}",
	`{"id":"a","method":"tools/nope"}`,
	`{"method":"notifications/nope"}`,
	`[{"jsonrpc":"2.0","method":"notifications/nope"},{"jsonrpc":"2.0","id":"a","method":"ping"}]`,
	`[{"id":1,"method":"ping"}, 5, {"id":null,"method":"ping"}]`,
	`[[{"id":null,"method":"ping"}]]`,
	`{"params":{"id":null,"method":"ping"},"id":3,"method":"ping"}`,
	`[[[`, `[[[]]]`, `{"a":[{"b":{}}]}`, `x[[[[`, `"[[[[" [[[`, `{"a":"\"[[["}`,
	strings.Repeat("[", 1001) + strings.Repeat("]", 1001),
	"x" + strings.Repeat("[", 1001),
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"email_send","arguments":{"attachments_base64":[{"filename":"a","data":"bWFpbGN0bA=="}]}}}`,
}

func TestProbeJSONMatchesDecoding(t *testing.T) {
	for _, s := range probeSeeds {
		checkProbe(t, []byte(s))
	}
	checkProbe(t, bigToolsCall(1<<20))
}

// FuzzProbeJSON: probeJSON, and refuseBody and badID on it, read any input
// as json.Valid, jsonDepth and a decoding of each message into a map of its
// members do: the same validity, nesting past the limit, ids and methods.
func FuzzProbeJSON(f *testing.F) {
	for _, s := range probeSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkProbe(t, []byte(s))
	})
}

// Regression: reading a message before the SDK decoded it into a map of its
// members, a second copy of the message: 11 MiB more for a tools/call with
// 8 MiB of attachments, on both transports.
func TestProbeDoesNotCopyTheMessage(t *testing.T) {
	msg := bigToolsCall(4 << 20)
	for _, c := range []struct {
		name string
		read func()
	}{
		{"refuseBody", func() { refuseBody(msg) }},
		{"badID", func() { badID(msg) }},
	} {
		const runs = 5
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range runs {
			c.read()
		}
		runtime.ReadMemStats(&after)
		if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > uint64(len(msg)/8) {
			t.Errorf("%s allocated %d bytes reading a message of %d", c.name, per, len(msg))
		}
	}
}
