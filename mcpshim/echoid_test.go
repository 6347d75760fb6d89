package mcpshim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// maxRefusalBytes bounds an answer the server writes itself, whatever the
// message it refuses held: its id is at most maxEchoedID bytes and its
// message at most maxAnswerMessage.
const maxRefusalBytes = 2 << 10

// hostileIDs are messages whose id is no JSON-RPC id the server can write
// back as sent, with the id each is answered under (as written; "null" for
// none) and whether the answer is a refusal. Each is as an attacker or a
// broken client would send it, as one line.
var hostileIDs = []struct {
	name, msg, id string
	refused       bool
}{
	{"a number no float64 holds", `{"jsonrpc":"2.0","id":1e400,"method":"ping"}`, "null", true},
	{"a number no float64 holds, bad version", `{"jsonrpc":"1.0","id":-1e400,"method":"ping"}`, "null", true},
	{"invalid UTF-8, bad version", "{\"jsonrpc\":\"1.0\",\"id\":\"a\xffb\",\"method\":\"ping\"}", "null", true},
	{"invalid UTF-8", "{\"jsonrpc\":\"2.0\",\"id\":\"a\xc3\",\"method\":\"ping\"}", "null", true},
	{"half a UTF-16 pair", `{"jsonrpc":"2.0","id":"\ud800","method":"ping"}`, "null", true},
	{"the other half alone", `{"jsonrpc":"2.0","id":"x\udc00","method":"ping"}`, "null", true},
	{"a long string, bad version", `{"jsonrpc":"1.0","id":"` + strings.Repeat("x", 100000) + `","method":"ping"}`, "null", true},
	{"a long inexact number", `{"jsonrpc":"2.0","id":1.` + strings.Repeat("0", 100000) + `1,"method":"ping"}`, "null", true},
	{"a long whole number", `{"jsonrpc":"2.0","id":1` + strings.Repeat("0", 300) + `,"method":"ping"}`, "null", true},
	{"an object", `{"jsonrpc":"2.0","id":{"a":"\ud800"},"method":"ping"}`, "null", true},
	{"an array", `{"jsonrpc":"2.0","id":[1e400],"method":"ping"}`, "null", true},
	// What can be written back is, refused or not.
	{"a whole pair", `{"jsonrpc":"2.0","id":"\ud83d\ude00","method":"ping"}`, `"\ud83d\ude00"`, false},
	{"an inexact number", `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, "1.5", true},
	{"a string, bad version", `{"jsonrpc":"1.0","id":"ok","method":"ping"}`, `"ok"`, true},
}

// checkAnswer fails t unless answer is one JSON-RPC 2.0 response that any
// strict parser reads (UTF-8, JSON, its id null, a string or a number a
// float64 holds) under the id want (as written, read as JSON), no larger than a refusal
// may be when refused.
func checkAnswer(t *testing.T, name string, answer []byte, want string, refused bool) {
	t.Helper()
	answer = bytes.TrimSuffix(answer, []byte("\n"))
	if refused && len(answer) > maxRefusalBytes {
		t.Errorf("%s: a refusal of %d bytes, want at most %d: %.200q", name, len(answer), maxRefusalBytes, answer)
		return
	}
	if !utf8.Valid(answer) || !json.Valid(answer) {
		t.Errorf("%s: the answer is not UTF-8 JSON: %.300q", name, answer)
		return
	}
	var r struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   *struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(answer, &r); err != nil || r.JSONRPC != "2.0" {
		t.Errorf("%s: no JSON-RPC 2.0 response (%v): %.300q", name, err, answer)
		return
	}
	switch id := string(r.ID); {
	case id == "null":
	case strings.HasPrefix(id, `"`):
		var s string
		if json.Unmarshal(r.ID, &s) != nil || strings.ContainsRune(s, utf8.RuneError) {
			t.Errorf("%s: the id %.100q is no text", name, id)
		}
	default:
		if _, err := strconv.ParseFloat(id, 64); err != nil {
			t.Errorf("%s: the id %.100q is no number a parser reads: %v", name, id, err)
		}
	}
	var got, wantID any
	json.Unmarshal(r.ID, &got)
	json.Unmarshal([]byte(want), &wantID)
	if got != wantID {
		t.Errorf("%s: answered under the id %.100q, want %s", name, r.ID, want)
	}
	if (r.Error != nil) != refused {
		t.Errorf("%s: refused %v, want %v: %.300q", name, r.Error != nil, refused, answer)
	}
}

// Regression: a message refused before the SDK read it was answered under
// its id as written, so an id of invalid UTF-8 came back as bytes no strict
// parser reads, a huge one came back whole (twice, quoted in the message),
// and one the SDK would read otherwise (invalid UTF-8, half a UTF-16 pair)
// was served under U+FFFD. Each is answered, over stdio, under null in an
// answer of a few hundred bytes; an id that can be written back still is.
func TestStdioAnswersNoIDItCannotEcho(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		New(Options{SocketPath: noDaemon(t)}).Run(ctx, &LineTransport{In: inR, Out: outW})
		outW.Close()
		close(done)
	}()
	t.Cleanup(func() { cancel(); inW.Close(); io.Copy(io.Discard, outR); <-done })
	out := bufio.NewReaderSize(outR, 1<<20)
	lines := make(chan []byte)
	go func() {
		defer close(lines)
		for {
			line, err := out.ReadBytes('\n')
			if err != nil {
				return
			}
			lines <- line
		}
	}()
	// next is the next answer, skipping the server's notifications.
	next := func(what string) []byte {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("%s: the session ended", what)
				}
				if !bytes.Contains(line, []byte(`"method":`)) {
					return line
				}
			case <-timeout:
				t.Fatalf("%s: no answer", what)
			}
		}
	}
	io.WriteString(inW, initializeLine+"\n")
	next("initialize")
	io.WriteString(inW, initializedLine+"\n")
	for _, c := range hostileIDs {
		io.WriteString(inW, c.msg+"\n")
		checkAnswer(t, c.name, next(c.name), c.id, c.refused)
	}
}

// The same over HTTP: a POST the server refuses itself is answered under
// null when its id cannot be written back, and its answer stays small.
func TestHTTPAnswersNoIDItCannotEcho(t *testing.T) {
	const token = "0123456789abcdef"
	srv := httptest.NewServer(New(Options{SocketPath: noDaemon(t)}).HTTPHandler(token))
	defer srv.Close()
	session := openRawSession(t, srv.URL, token)
	for _, c := range hostileIDs {
		if !c.refused || strings.Contains(c.msg, `"1.0"`) {
			continue // served by the SDK, which answers in its own way
		}
		resp, body := rawHTTP(t, "POST", srv.URL, token, session, c.msg)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: HTTP %d, want 400", c.name, resp.StatusCode)
		}
		checkAnswer(t, c.name, []byte(body), c.id, true)
	}
	resp, body := rawHTTP(t, "POST", srv.URL, token, session, `{"jsonrpc":"2.0","id":3,"method":"`+strings.Repeat("m", 100000)+`"}`)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "method not found") {
		t.Errorf("a long unknown method: HTTP %d %.200q, want 400 saying method not found", resp.StatusCode, body)
	}
	checkAnswer(t, "a long unknown method", []byte(body), "3", true)
}
