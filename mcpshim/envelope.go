package mcpshim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mailctl/mailctl/protocol"
)

// Meta is the "meta" member of every result.
type Meta struct {
	NowUTC     string `json:"now_utc" jsonschema:"server time, RFC 3339 with milliseconds"`
	DurationMS int64  `json:"duration_ms" jsonschema:"time spent answering the call"`
}

// Envelope is the structured content of every successful tool result.
type Envelope[T any] struct {
	Summary    string      `json:"summary" jsonschema:"one line saying what happened"`
	Data       T           `json:"data"`
	NextAction *NextAction `json:"next_action,omitempty" jsonschema:"the obvious next call, when there is one"`
	Meta       Meta        `json:"meta"`
}

// NextAction names a tool call that is the obvious next step.
type NextAction struct {
	Instruction string         `json:"instruction"`
	Tool        string         `json:"tool,omitempty"`
	Arguments   map[string]any `json:"arguments,omitempty"`
}

// withArgs adds to the arguments of a next action the values of vals that
// are not empty: an argument left out keeps the tool's default.
func withArgs(args map[string]any, vals map[string]string) map[string]any {
	for k, v := range vals {
		if v != "" {
			args[k] = v
		}
	}
	return args
}

// ErrorResult is the structured content of a failed tool call (isError true).
type ErrorResult struct {
	Summary      string      `json:"summary"`
	Code         string      `json:"code"`
	Message      string      `json:"message"`
	Retryable    bool        `json:"retryable"`
	RetryAfterMS int64       `json:"retry_after_ms,omitempty"`
	NextAction   *NextAction `json:"next_action,omitempty"`
	Meta         Meta        `json:"meta"`
}

// Issue is one problem in a partial result.
type Issue struct {
	Code      string `json:"code"`
	Stage     string `json:"stage"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
	ID        string `json:"id,omitempty"`
}

// toolError is what handlers return to produce an ErrorResult with a next step.
type toolError struct {
	err  *protocol.Error
	next *NextAction
}

func (e *toolError) Error() string { return e.err.Error() }
func (e *toolError) Unwrap() error { return e.err }

// fail builds a tool error with a stable code.
func fail(code, format string, args ...any) error {
	return &toolError{err: protocol.Errorf(code, format, args...)}
}

// withNext attaches a next action to err, keeping its code.
func withNext(err error, next *NextAction) error {
	var te *toolError
	if errors.As(err, &te) {
		te.next = next
		return te
	}
	return &toolError{err: asProtocolError(err), next: next}
}

// stoppedError is the answer to a call the server's stop cancelled (err is
// what the call returned), keeping the call's next action.
func stoppedError(err error) error {
	se := fail(protocol.CodeUnavailable, "the MCP server is stopping (its client stopped it) and cancelled this call; call it again once the server is back (check first whether a send or change took effect)")
	var te *toolError
	if errors.As(err, &te) && te.next != nil {
		return withNext(se, te.next)
	}
	return se
}

// asProtocolError finds the code err carries (a toolError unwraps to its
// own), or gives it one.
func asProtocolError(err error) *protocol.Error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return protocol.Errorf(protocol.CodeTimeout, "the call took too long: %v", err)
	}
	if errors.Is(err, context.Canceled) {
		return protocol.Errorf(protocol.CodeUnavailable, "the call was cancelled: %v", err)
	}
	return protocol.Errorf(protocol.CodeInternal, "%v", err)
}

func nowMeta(start time.Time) Meta {
	return Meta{
		NowUTC:     time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00"),
		DurationMS: time.Since(start).Milliseconds(),
	}
}

// errorResult turns err into an MCP tool error that carries the code.
func errorResult(err error, start time.Time) *mcp.CallToolResult {
	pe := asProtocolError(err)
	er := ErrorResult{
		Summary:      fmt.Sprintf("failed (%s): %s", pe.Code, firstLine(pe.Message)),
		Code:         pe.Code,
		Message:      pe.Message,
		Retryable:    pe.Retryable,
		RetryAfterMS: pe.RetryAfterMS,
		Meta:         nowMeta(start),
	}
	var te *toolError
	if errors.As(err, &te) {
		er.NextAction = te.next
	}
	if er.NextAction == nil {
		er.NextAction = defaultNext(pe)
	}
	raw, _ := marshal(er)
	return toolResult(raw, true)
}

// toolResult carries raw as the structured content and, for clients that
// read only text, as the text content too.
func toolResult(raw []byte, isError bool) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: isError, StructuredContent: json.RawMessage(raw),
		Content: []mcp.Content{&mcp.TextContent{Text: string(raw)}}}
}

func defaultNext(pe *protocol.Error) *NextAction {
	switch pe.Code {
	case protocol.CodeUnavailable:
		return &NextAction{Instruction: "Ask the user to start the mailctl daemon (see the message), then retry the same call."}
	case protocol.CodeRateLimited:
		return &NextAction{Instruction: "Wait retry_after_ms (or a minute) and retry the same call."}
	case protocol.CodeNotFound:
		return notFoundNext(pe, "", "")
	}
	return nil
}

// notFoundNext is the shim's one next step for a not_found: the tool that
// lists what the daemon did not find (Error.Missing), on the mailbox and
// folder the call named when it named them. The daemon's message names what
// was missing and where; this names the tool.
func notFoundNext(pe *protocol.Error, mailbox, folder string) *NextAction {
	switch pe.Missing {
	case protocol.MissingMailbox:
		return &NextAction{Instruction: "No such mailbox among yours: list them to find the right name.", Tool: "mailbox_list"}
	case protocol.MissingHook:
		return &NextAction{Instruction: "List the hooks to find the right name.", Tool: "hook_list"}
	case protocol.MissingMessage, protocol.MissingDraft, protocol.MissingFolder:
		if pe.Missing == protocol.MissingDraft {
			folder = protocol.FolderDrafts
		}
		var args map[string]any
		if mailbox != "" {
			args = withArgs(map[string]any{"mailbox": mailbox}, map[string]string{"folder": folder})
		}
		return &NextAction{Instruction: "No message with that id there: list the messages to find the right id (or the folder it moved to).", Tool: "email_list", Arguments: args}
	}
	// Names an agent got wrong are found with the list tools.
	return &NextAction{Instruction: "Check the name: mailbox_list shows your mailboxes, email_list the messages of one, hook_list your hooks.", Tool: "mailbox_list"}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return clip(s, 200)
}

// handlerFunc is a typed tool implementation. It returns a summary line, the
// data and, optionally, a next action.
type handlerFunc[In, Out any] func(ctx context.Context, req *mcp.CallToolRequest, in *In) (string, Out, *NextAction, error)

// toolSpec is one registered tool, kept so that presets can filter them.
type toolSpec struct {
	tool    *mcp.Tool
	handler mcp.ToolHandler
}

// stringOrList accepts a JSON string or an array of strings.
type stringOrList []string

func (l *stringOrList) UnmarshalJSON(b []byte) error {
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte(`"`)) {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*l = splitAddresses(s)
		return nil
	}
	var ss []string
	if err := json.Unmarshal(b, &ss); err != nil {
		return errors.New("expected a string or a list of strings")
	}
	*l = ss
	return nil
}

// splitAddresses splits "a@x, b@y" but keeps "Doe, John <j@x>" whole: every
// comma-separated part must look like an address on its own.
func splitAddresses(s string) []string {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	if slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(p, "@") }) {
		return []string{s}
	}
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
	}
	return parts
}

// newTool wraps a typed handler into an MCP tool whose arguments are
// validated against its schema and decoded strictly, and whose results and
// errors all follow the envelope.
func newTool[In, Out any](t *mcp.Tool, refine func(*jsonschema.Schema), h handlerFunc[In, Out]) toolSpec {
	in, inResolved := schemaFor[In](refine)
	out, err := jsonschema.For[Envelope[Out]](schemaOptions)
	if err != nil {
		panic(fmt.Sprintf("output schema of %s: %v", t.Name, err))
	}
	leanEnvelope(out)
	allowErrors(out)
	// Marshalled once: the schema package's MarshalJSON is costly and
	// tools/list would otherwise redo it for every client.
	t.InputSchema = mustRaw(in)
	t.OutputSchema = mustRaw(out)
	handler := func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		start := time.Now()
		args := req.Params.Arguments
		if len(bytes.TrimSpace(args)) == 0 || string(bytes.TrimSpace(args)) == "null" {
			args = []byte("{}")
		}
		var generic map[string]any
		if err := json.Unmarshal(args, &generic); err != nil {
			return errorResult(argumentsError(args, err), start), nil
		}
		// Models often send null for an argument they mean to leave out.
		if dropNulls(generic) {
			args, _ = json.Marshal(generic)
		}
		if err := inResolved.Validate(generic); err != nil {
			return errorResult(argumentsInvalid(t.Name, in, generic, err), start), nil
		}
		var input In
		if err := protocol.DecodeStrict(args, &input); err != nil {
			return errorResult(fail(protocol.CodeInvalidInput, "invalid arguments: %v", err), start), nil
		}
		summary, data, next, err := h(ctx, req, &input)
		if err != nil {
			if errors.Is(context.Cause(ctx), errStopped) {
				err = stoppedError(err)
			}
			return errorResult(err, start), nil
		}
		env := Envelope[Out]{Summary: summary, Data: data, NextAction: next, Meta: nowMeta(start)}
		raw, err := marshal(env)
		if err != nil {
			return errorResult(fmt.Errorf("encoding the result: %w", err), start), nil
		}
		return toolResult(raw, false), nil
	}
	return toolSpec{tool: t, handler: handler}
}

// argumentsError says why a call's arguments could not be read: they are not
// an object, or an object with a value no JSON decoder holds (a number such
// as 1e400 is out of every range).
func argumentsError(args []byte, err error) error {
	if b := bytes.TrimSpace(args); len(b) > 0 && b[0] == '{' {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) && strings.HasPrefix(ute.Value, "number ") {
			num := strings.TrimPrefix(ute.Value, "number ")
			if len(num) > 40 {
				num = num[:40] + "…"
			}
			return fail(protocol.CodeInvalidInput, "invalid arguments: the number %s is out of range", num)
		}
		return fail(protocol.CodeInvalidInput, "invalid arguments: %v", err)
	}
	return fail(protocol.CodeInvalidInput, "arguments must be a JSON object: %v", err)
}

// marshal encodes without HTML escaping: results are read by models, and
// "\u003c" instead of "<" costs tokens and obscures the fence markers.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

func dropNulls(m map[string]any) bool {
	n := len(m)
	maps.DeleteFunc(m, func(_ string, v any) bool { return v == nil })
	return len(m) < n
}

func mustRaw(s *jsonschema.Schema) json.RawMessage {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return b
}

// orEmpty returns s, or an empty list for nil: lists reach the client as
// [], never as null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// annotations builds tool annotations; every tool states all four hints.
func annotations(title string, readOnly, destructive, idempotent, openWorld bool) *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{
		Title:           title,
		ReadOnlyHint:    readOnly,
		DestructiveHint: new(destructive),
		IdempotentHint:  idempotent,
		OpenWorldHint:   new(openWorld),
	}
}

// clip shortens s to at most n runes, marking the cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}
