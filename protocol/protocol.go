// Package protocol defines mailctl's control-socket protocol: JSON lines in both
// directions over a Unix socket, a greeting with the protocol name and version,
// requests with ids and verbs, replies with data or a stable error code, and a
// streaming watch verb. It also holds the client used by the CLI and the MCP shim.
//
// This package imports only the standard library so that every client can use it.
package protocol

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Name is the protocol name sent in the greeting.
const Name = "mailctl"

// Version is the protocol version, "major.minor". A client refuses a server whose
// major version differs from its own; minor versions only add verbs and fields.
const Version = "1.0"

// MaxFrame bounds one JSON line in either direction. A send carrying attachments
// is the largest frame a client produces; the daemon applies its own, smaller
// limits to message sizes.
const MaxFrame = 48 << 20

// DefaultSocket is where the system daemon listens.
const DefaultSocket = "/run/mailctl/mailctl.sock"

// DefaultTimeoutMS is the per-request deadline used when a request sets none.
const DefaultTimeoutMS = 30_000

// MaxTimeoutMS bounds the deadline a client may ask for (waiting for mail is the
// longest legitimate request).
const MaxTimeoutMS = 15 * 60 * 1000

// Greeting is the first line the server writes on every connection.
type Greeting struct {
	Protocol string `json:"protocol"`
	Version  string `json:"version"`
	Server   string `json:"server"` // the daemon's build version
	// Error, when set, refuses the connection (a connection limit) and says
	// why; the daemon closes the connection after it.
	Error *Error `json:"error,omitempty"`
}

// Request is one line from client to server.
type Request struct {
	ID        uint64          `json:"id"`
	Verb      string          `json:"verb"`
	Args      json.RawMessage `json:"args,omitempty"`
	TimeoutMS int             `json:"timeout_ms,omitempty"`
}

// Response is one line from server to client. Exactly one of Data, Error or Event
// is set. Event lines belong to a watch request and share its id; a watch ends
// with a Response carrying an Error (or the connection closing).
type Response struct {
	ID    uint64          `json:"id"`
	Data  json.RawMessage `json:"data,omitempty"`
	Error *Error          `json:"error,omitempty"`
	Event *Event          `json:"event,omitempty"`
}

// Error codes. Clients match codes, never messages.
const (
	CodeInvalidInput  = "invalid_input"
	CodeNotFound      = "not_found"
	CodeForbidden     = "forbidden"
	CodeConflict      = "conflict"
	CodePolicyBlocked = "policy_blocked"
	CodeRateLimited   = "rate_limited"
	CodeTooLarge      = "too_large"
	CodeTimeout       = "timeout"
	CodeUnavailable   = "unavailable"
	CodeInternal      = "internal"
)

// Codes lists every stable error code.
var Codes = []string{CodeInvalidInput, CodeNotFound, CodeForbidden, CodeConflict,
	CodePolicyBlocked, CodeRateLimited, CodeTooLarge, CodeTimeout, CodeUnavailable, CodeInternal}

// Error is a protocol error with a stable code and a message a person can act on.
type Error struct {
	Code         string `json:"code"`
	Message      string `json:"message"`
	Retryable    bool   `json:"retryable,omitempty"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf builds an *Error with the given code. Temporary codes are marked retryable.
func Errorf(code, format string, args ...any) *Error {
	e := &Error{Code: code, Message: fmt.Sprintf(format, args...)}
	switch code {
	case CodeRateLimited, CodeTimeout, CodeUnavailable:
		e.Retryable = true
	}
	return e
}

// CodeOf returns the protocol code of err, or CodeInternal when it carries none.
func CodeOf(err error) string {
	if err == nil {
		return ""
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return CodeInternal
}

// ErrFrameTooLarge is returned by a FrameReader when a line exceeds its bound.
var ErrFrameTooLarge = errors.New("frame too large")

// FrameReader reads newline-terminated frames of bounded size.
type FrameReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// NewFrameReader returns a reader that refuses frames longer than max bytes.
func NewFrameReader(r io.Reader, max int) *FrameReader {
	return &FrameReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next returns the next frame without its line ending. The slice is valid until
// the following call. After ErrFrameTooLarge the rest of that line is discarded,
// so the stream stays usable.
func (f *FrameReader) Next() ([]byte, error) {
	f.buf = f.buf[:0]
	tooLarge := false
	for {
		chunk, err := f.r.ReadSlice('\n')
		if !tooLarge {
			if len(f.buf)+len(chunk) > f.max+2 {
				tooLarge = true
				f.buf = f.buf[:0]
			} else {
				f.buf = append(f.buf, chunk...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF && len(f.buf) > 0 && !tooLarge {
				line := bytes.TrimRight(f.buf, "\r")
				f.buf = f.buf[:0]
				if len(line) > f.max {
					return nil, ErrFrameTooLarge
				}
				return line, nil
			}
			return nil, err
		}
		if tooLarge {
			return nil, ErrFrameTooLarge
		}
		line := bytes.TrimRight(f.buf, "\r\n")
		if len(line) > f.max {
			return nil, ErrFrameTooLarge
		}
		return line, nil
	}
}

// DecodeStrict decodes one JSON value into v, refusing unknown fields and
// trailing data. Its errors name the offending field.
func DecodeStrict(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		data = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return describeJSONError(err)
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

func describeJSONError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return fmt.Errorf("field %q: expected %s, got %s", te.Field, te.Type, te.Value)
		}
		return fmt.Errorf("expected %s, got %s", te.Type, te.Value)
	}
	msg := err.Error()
	if strings.HasPrefix(msg, "json: unknown field ") {
		return fmt.Errorf("unknown field %s", strings.TrimPrefix(msg, "json: unknown field "))
	}
	return errors.New(strings.TrimPrefix(msg, "json: "))
}

// DecodeRequest parses one request frame strictly.
func DecodeRequest(frame []byte) (*Request, error) {
	var req Request
	if err := DecodeStrict(frame, &req); err != nil {
		return nil, err
	}
	if req.Verb == "" {
		return &req, errors.New("missing verb")
	}
	if req.TimeoutMS < 0 || req.TimeoutMS > MaxTimeoutMS {
		return &req, fmt.Errorf("timeout_ms must be between 0 and %d", MaxTimeoutMS)
	}
	return &req, nil
}

// Major returns the major part of a "major.minor" version.
func Major(v string) (int, error) {
	maj, _, _ := strings.Cut(v, ".")
	return strconv.Atoi(maj)
}

// CheckGreeting verifies a server greeting against this client's protocol.
func CheckGreeting(g Greeting) error {
	if g.Protocol != Name {
		return fmt.Errorf("the socket does not speak the %s protocol (got %q)", Name, g.Protocol)
	}
	theirs, err := Major(g.Version)
	if err != nil {
		return fmt.Errorf("the daemon sent a malformed protocol version %q", g.Version)
	}
	ours, _ := Major(Version)
	if theirs != ours {
		return &Error{Code: CodeUnavailable, Message: fmt.Sprintf(
			"the daemon speaks protocol %s and this client speaks %s: upgrade mailctl so both are the same version (daemon %s)",
			g.Version, Version, g.Server)}
	}
	return nil
}
