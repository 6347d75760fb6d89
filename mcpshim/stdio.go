package mcpshim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mailctl/mailctl/protocol"
)

// MaxRequestBytes bounds one JSON-RPC message from the client: room for
// MaxAttachBytes of attachments in base64 (4/3 of their size) and 8 MiB for
// the body and every other field. The SDK's own stdio default (16 MiB) would
// end the session at a 12 MiB attachment.
const MaxRequestBytes = MaxAttachBytes/3*4 + 8<<20

// The shim forwards a send to the daemon in one frame; whatever the client may
// send must fit in it.
var _ [protocol.MaxFrame - MaxRequestBytes]struct{}

// LineTransport is the stdio transport of `mailctl mcp`: newline-delimited
// JSON-RPC, one message per line, as the SDK's StdioTransport, except that a
// line over Max bytes or one that is not a JSON-RPC message is answered with a
// JSON-RPC error and the session goes on (the SDK's transport ends it without
// a word). Batches are not accepted (MCP dropped them in 2025-06-18).
//
// When In ends (EOF, or a read error), the transport stops reading but tells
// the SDK only once every request it has read is answered, or after Drain:
// the SDK cancels the requests in flight as soon as its reader ends and
// refuses to write their answers, so a client that writes its requests and
// closes stdin would lose the last answers (all of them, if the first is
// still being handled).
type LineTransport struct {
	In  io.ReadCloser
	Out io.Writer
	// Max bounds one inbound line; 0 means MaxRequestBytes.
	Max int
	// Drain bounds how long requests already read may run once In has
	// ended; 0 means DrainTimeout.
	Drain time.Duration
}

// DrainTimeout is how long the requests already read may still run once
// stdin has ended: the longest a tool waits on its own (email_wait's
// MaxWaitSecs) plus a minute, the 660 s tool timeout docs/mcp.md gives the
// harnesses. Requests still running then are cancelled unanswered and the
// session ends with an error.
const DrainTimeout = MaxWaitSecs*time.Second + time.Minute

// StdioTransport serves on the process's standard input and output.
func StdioTransport() *LineTransport {
	return &LineTransport{In: os.Stdin, Out: os.Stdout}
}

// Connect implements mcp.Transport.
func (t *LineTransport) Connect(context.Context) (mcp.Connection, error) {
	max := t.Max
	if max <= 0 {
		max = MaxRequestBytes
	}
	drain := t.Drain
	if drain <= 0 {
		drain = DrainTimeout
	}
	c := &lineConn{in: t.In, out: t.Out, msgs: make(chan readResult), closed: make(chan struct{}), pending: map[jsonrpc.ID]bool{}, running: map[jsonrpc.ID]bool{}}
	go c.readLoop(max, drain)
	return c, nil
}

type readResult struct {
	msg jsonrpc.Message
	err error
}

type lineConn struct {
	in   io.ReadCloser
	out  io.Writer
	wmu  sync.Mutex
	msgs chan readResult

	closeOnce sync.Once
	closed    chan struct{}

	// pending holds the ids of the calls handed to the SDK and not yet
	// answered. Once the input has ended, idle is closed when it is empty.
	// running holds the same ids until their answer starts being written,
	// when the SDK too lets the id go.
	pmu      sync.Mutex
	pending  map[jsonrpc.ID]bool
	running  map[jsonrpc.ID]bool
	idle     chan struct{}
	idleDone bool
}

func (c *lineConn) SessionID() string { return "" }

func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case r := <-c.msgs:
		return r.msg, r.err
	case <-c.closed:
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *lineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if r, ok := msg.(*jsonrpc.Response); ok {
		defer c.answered(r.ID) // once the line is out
		c.pmu.Lock()
		delete(c.running, r.ID)
		c.pmu.Unlock()
		// The SDK refuses some calls before any middleware sees them.
		r.Error = withRPCCode(r.Error)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if data, ok := encodeResult(msg); ok {
		return c.writeLine(data)
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	return c.writeLine(data)
}

// encodeResult writes a successful response around its result as is. The
// SDK has already encoded the result, compact; EncodeMessage would scan it
// again byte by byte (json.RawMessage is re-compacted), which was a third of
// the server's time for a tools/list (56 KB of schemas).
func encodeResult(msg jsonrpc.Message) ([]byte, bool) {
	r, ok := msg.(*jsonrpc.Response)
	if !ok || r.Error != nil || len(r.Result) == 0 {
		return nil, false
	}
	id, err := marshal(r.ID.Raw()) // no HTML escaping, as the SDK
	if err != nil {
		return nil, false
	}
	b := make([]byte, 0, len(r.Result)+len(id)+40)
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, id...)
	b = append(b, `,"result":`...)
	b = append(b, r.Result...)
	return append(b, '}'), true
}

// writeLine writes one message and its newline in one Write, under the lock
// that keeps the reader's own error answers from interleaving with the SDK's.
func (c *lineConn) writeLine(data []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	select {
	case <-c.closed:
		return io.ErrClosedPipe
	default:
	}
	_, err := c.out.Write(append(data, '\n'))
	return err
}

func (c *lineConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		close(c.closed)
		err = c.in.Close()
	})
	return err
}

// track records a call about to be handed to the SDK, which answers every
// call it reads (errors included) through Write. It returns false, recording
// nothing, for a call whose id a call still running holds: the SDK drops
// such a call without an answer, so its client would wait for good.
func (c *lineConn) track(msg jsonrpc.Message) bool {
	r, ok := msg.(*jsonrpc.Request)
	if !ok || !r.IsCall() {
		return true
	}
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if c.running[r.ID] {
		return false
	}
	c.pending[r.ID], c.running[r.ID] = true, true
	return true
}

// answered marks the call id as answered.
func (c *lineConn) answered(id jsonrpc.ID) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	delete(c.pending, id)
	c.checkIdle()
}

// inputEnded returns a channel closed once every call read is answered.
func (c *lineConn) inputEnded() <-chan struct{} {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	c.idle = make(chan struct{})
	c.checkIdle()
	return c.idle
}

func (c *lineConn) checkIdle() {
	if c.idle != nil && !c.idleDone && len(c.pending) == 0 {
		c.idleDone = true
		close(c.idle)
	}
}

func (c *lineConn) unanswered() int {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	return len(c.pending)
}

// endInput reports the end of the input (err) to Read once the calls already
// read are answered, or after drain, when the SDK cancels those still running.
func (c *lineConn) endInput(err error, drain time.Duration) {
	idle := c.inputEnded()
	t := time.NewTimer(drain)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
		if n := c.unanswered(); n > 0 {
			err = fmt.Errorf("input ended (%v) with %d request(s) unanswered after %v: cancelled them", err, n, drain)
		}
	case <-c.closed:
		return
	}
	c.deliver(readResult{err: err})
}

// readLoop hands each line to Read, answering bad lines itself. At the end
// of the input it stops reading and lets the requests read finish first.
func (c *lineConn) readLoop(max int, drain time.Duration) {
	br := bufio.NewReaderSize(c.in, 64<<10)
	for {
		line, over, err := readLine(br, max)
		switch {
		case over != nil:
			c.answer(over.id(), jsonrpc.CodeInvalidRequest, fmt.Sprintf("too_large: the message is %d bytes or more, over the limit of %d bytes (%d MiB of attachments in total, in base64): send fewer or smaller attachments, or attach files by path", over.size, max, MaxAttachBytes>>20), protocol.CodeTooLarge)
		case len(bytes.TrimSpace(line)) > 0:
			msg, derr := jsonrpc.DecodeMessage(line)
			// The SDK decodes the line's first value and ignores what
			// follows it: a line that is no one JSON text is refused
			// here, or a message would be served past the check of its id
			// and a second one on the line dropped unanswered.
			id, why, valid := badID(line)
			if derr != nil || !valid {
				c.answerBad(line, derr)
				break
			}
			if why != "" {
				c.answer(id, jsonrpc.CodeInvalidRequest, why, protocol.CodeInvalidInput)
				break
			}
			if !c.track(msg) {
				id, _ := json.Marshal(msg.(*jsonrpc.Request).ID.Raw())
				c.answer(id, jsonrpc.CodeInvalidRequest, fmt.Sprintf("invalid request: the id %s is already in use by a call still running: give each call an id of its own", id), protocol.CodeInvalidInput)
				break
			}
			if !c.deliver(readResult{msg: msg}) {
				return
			}
		}
		if err != nil {
			c.endInput(err, drain)
			return
		}
	}
}

func (c *lineConn) deliver(r readResult) bool {
	select {
	case c.msgs <- r:
		return true
	case <-c.closed:
		return false
	}
}

// answerBad answers a line that is not one JSON-RPC message.
func (c *lineConn) answerBad(line []byte, err error) {
	var id json.RawMessage
	valid, tooDeep := probeJSON(line, maxJSONDepth, false, func(p messageProbe, ok bool) {
		// The member named "id" exactly, as the SDK reads it: a line
		// with only an "ID" has no id, and is answered under null.
		if ok && validID(p.ID) {
			id = p.ID
		}
	})
	if !valid {
		msg := "parse error: the line is not JSON: send one JSON-RPC message per line"
		if tooDeep {
			msg = fmt.Sprintf("parse error: the line nests arrays and objects more than %d deep", maxJSONDepth)
		}
		c.answer(nil, jsonrpc.CodeParseError, msg, protocol.CodeInvalidInput)
		return
	}
	msg := fmt.Sprintf("invalid request: %v", err)
	if b := bytes.TrimSpace(line); len(b) > 0 && b[0] == '[' {
		msg = "invalid request: batches are not supported: send one JSON-RPC message per line"
	}
	c.answer(id, jsonrpc.CodeInvalidRequest, msg, protocol.CodeInvalidInput)
}

// answer writes a JSON-RPC error response. A notification (no id) gets none,
// except when the id could not be read at all (JSON-RPC's null id).
func (c *lineConn) answer(id json.RawMessage, code int64, msg, mailctlCode string) {
	if b, err := errorResponse(id, code, msg, mailctlCode); err == nil {
		c.writeLine(b)
	}
}

// errorResponse is a JSON-RPC error response under id (nil: null) whose
// data carries the mailctl code, as every transport writes one. An id that
// cannot be written back as sent (echoable) is answered under null, and
// the message is cut at maxAnswerMessage bytes: both come from what the
// client sent, which may be any bytes and up to a whole line long.
func errorResponse(id json.RawMessage, code int64, msg, mailctlCode string) ([]byte, error) {
	if !echoable(id) {
		id = json.RawMessage("null")
	}
	msg = cutText(msg, maxAnswerMessage)
	resp := struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   any             `json:"error"`
	}{"2.0", id, map[string]any{"code": code, "message": msg, "data": map[string]any{"code": mailctlCode}}}
	return json.Marshal(resp)
}

// maxAnswerMessage bounds the message of an error the server answers
// itself, which may quote what the client sent (a method's name, the
// decoder's error).
const maxAnswerMessage = 1024

// cutText is s cut to at most n bytes at a character's start, ending in
// "…" when cut.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n -= len("…")
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// maxJSONDepth is encoding/json's limit on nesting, which a line past it
// fails whatever else it holds.
const maxJSONDepth = 10000

// jsonDepth is the deepest nesting of arrays and objects in b, outside
// strings, counting brackets as written (b need not be valid JSON).
func jsonDepth(b []byte) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

// validID reports whether raw is a JSON-RPC id: a string or a number.
func validID(raw json.RawMessage) bool {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return false
	}
	switch v.(type) {
	case string, float64:
		return true
	}
	return false
}

// oversized describes a line that was skipped for its size: its length so far
// and its first and last bytes, where the id is.
type oversized struct {
	size       int
	head, tail []byte
}

const idWindow = 4 << 10

// id finds the request id of a skipped line: clients put it before the params
// (Go, Python) or after them (TypeScript), so look at both ends.
func (o *oversized) id() json.RawMessage {
	if id := idFromHead(o.head); id != nil {
		return id
	}
	return idFromTail(o.tail)
}

// idFromHead reads the top-level members of the object's start until the id
// or a value that does not fit in the window.
func idFromHead(head []byte) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(head))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		if k == "id" && validID(v) {
			return v
		}
	}
	return nil
}

// idFromTail looks for `"id": value` closing the object.
func idFromTail(tail []byte) json.RawMessage {
	tail = bytes.TrimRight(tail, " \t\r\n")
	if !bytes.HasSuffix(tail, []byte("}")) {
		return nil
	}
	for end := len(tail); ; {
		i := bytes.LastIndex(tail[:end], []byte(`"id"`))
		if i < 0 {
			return nil
		}
		end = i
		rest := bytes.TrimLeft(tail[i+4:], " \t")
		if len(rest) == 0 || rest[0] != ':' {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(rest[1:]))
		var v json.RawMessage
		if dec.Decode(&v) != nil || !validID(v) {
			continue
		}
		after := bytes.TrimLeft(rest[1+int(dec.InputOffset()):], " \t")
		if len(after) > 0 && (after[0] == ',' || after[0] == '}') {
			return v
		}
	}
}

// readLine returns the next line without its newline. A line longer than max
// is read to its end and dropped: over describes it and line is nil.
func readLine(br *bufio.Reader, max int) (line []byte, over *oversized, err error) {
	for {
		chunk, rerr := br.ReadSlice('\n')
		if over == nil && len(line)+len(chunk) > max+1 { // +1: the newline
			over = &oversized{size: len(line), head: append([]byte(nil), line[:min(len(line), idWindow)]...)}
			over.head = append(over.head, chunk[:min(len(chunk), idWindow-len(over.head))]...)
			line = nil
		}
		if over != nil {
			over.size += len(chunk)
			over.tail = append(over.tail, chunk...)
			if len(over.tail) > idWindow {
				over.tail = append(over.tail[:0], over.tail[len(over.tail)-idWindow:]...)
			}
		} else {
			line = append(line, chunk...)
		}
		if errors.Is(rerr, bufio.ErrBufferFull) {
			continue
		}
		if over != nil {
			return nil, over, rerr
		}
		// A line cut by an error has no newline to trim.
		return bytes.TrimSuffix(line, []byte("\n")), nil, rerr
	}
}
