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
	// Missing says what a not_found did not find (one of the Missing*
	// values), so that a client can name its own way to list them
	// without reading the message.
	Missing string `json:"missing,omitempty"`
}

// What a not_found error did not find (Error.Missing).
const (
	MissingMailbox   = "mailbox"
	MissingMessage   = "message"
	MissingDraft     = "draft"
	MissingHook      = "hook"
	MissingQueueItem = "queue_item"
	MissingFolder    = "folder"
)

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf builds an *Error with the given code. Temporary codes are marked retryable.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...),
		Retryable: code == CodeRateLimited || code == CodeTimeout || code == CodeUnavailable}
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

	// Reserve, when set, is asked before the frame buffer grows by n bytes;
	// false stops buffering the frame: the rest of its line is discarded
	// and Next returns ErrFrameRefused. Release gets back what Free gives up.
	Reserve func(n int) bool
	Release func(n int)

	// Begin, when set, is called once the first byte of a frame has been
	// read (it may already be buffered), before Next waits for the rest:
	// a server bounds from there how long the frame may take to arrive.
	Begin func()

	head []byte // the start of the last refused or cut frame
}

// ErrFrameRefused is returned by Next when Reserve refused to buffer a frame.
var ErrFrameRefused = errors.New("frame refused: no memory to buffer it")

// keepFrameBuffer is the buffer capacity Free leaves in place.
const keepFrameBuffer = 64 << 10

// NewFrameReader returns a reader that refuses frames longer than max bytes.
func NewFrameReader(r io.Reader, max int) *FrameReader {
	return &FrameReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// headLen is how much of a refused or too large frame Head keeps.
const headLen = 256

// Head returns the first bytes of the frame Next last refused as too large
// or over budget, or that a read error cut short, enough to find its id.
func (f *FrameReader) Head() []byte { return f.head }

// ProbeID finds the id of a request from the start of its frame, for
// answering a frame that cannot be decoded whole: the value of an "id"
// member at the top level (in any case, as the decoder matches names). It
// returns 0 when there is none.
func ProbeID(frame []byte) uint64 {
	dec := json.NewDecoder(bytes.NewReader(frame))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return 0
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return 0
		}
		// encoding/json matches member names without regard to case.
		if k, ok := key.(string); ok && strings.EqualFold(k, "id") {
			var id uint64
			if dec.Decode(&id) != nil {
				return 0
			}
			return id
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return 0
		}
	}
	return 0
}

// Free gives up a buffer grown past keepFrameBuffer for a large frame; the
// last frame returned by Next is invalid afterwards.
func (f *FrameReader) Free() {
	if cap(f.buf) > keepFrameBuffer {
		f.Close()
	}
}

// Close gives up the buffer, whatever its size; the reader may still be
// used, and grows a new one.
func (f *FrameReader) Close() {
	if f.Release != nil && cap(f.buf) > 0 {
		f.Release(cap(f.buf))
	}
	f.buf = nil
}

// keepHead keeps the start of a frame being discarded, then empties the
// buffer.
func (f *FrameReader) keepHead(chunk []byte) {
	f.head = append(f.head[:0], f.buf[:min(len(f.buf), headLen)]...)
	f.head = append(f.head, chunk[:min(len(chunk), headLen-len(f.head))]...)
	f.buf = f.buf[:0]
}

// grow makes room for n more bytes, asking Reserve for what it adds.
func (f *FrameReader) grow(n int) bool {
	if len(f.buf)+n <= cap(f.buf) {
		return true
	}
	newCap := max(2*cap(f.buf), len(f.buf)+n, 4<<10)
	if f.Reserve != nil {
		if !f.Reserve(newCap) {
			return false
		}
		if f.Release != nil && cap(f.buf) > 0 {
			f.Release(cap(f.buf))
		}
	}
	f.buf = append(make([]byte, 0, newCap), f.buf...)
	return true
}

func (f *FrameReader) Next() ([]byte, error) {
	f.buf = f.buf[:0]
	if f.Begin != nil {
		if _, err := f.r.Peek(1); err != nil {
			return nil, err
		}
		f.Begin()
	}
	tooLarge, refused := false, false
	for {
		chunk, err := f.r.ReadSlice('\n')
		switch {
		case tooLarge || refused:
		case len(f.buf)+len(chunk) > f.max+2:
			tooLarge = true
			f.keepHead(chunk)
		case !f.grow(len(chunk)):
			refused = true
			f.keepHead(chunk)
		default:
			f.buf = append(f.buf, chunk...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		// A last line without its newline is still a frame.
		if err != nil && (err != io.EOF || len(f.buf) == 0 || tooLarge || refused) {
			if len(f.buf) > 0 {
				f.keepHead(nil)
			}
			return nil, err
		}
		if tooLarge {
			return nil, ErrFrameTooLarge
		}
		if refused {
			return nil, ErrFrameRefused
		}
		line := bytes.TrimRight(f.buf, "\r\n")
		if len(line) > f.max {
			// Up to two bytes over fit the buffer (room for "\r\n"): the
			// head must still be this frame's, not the last refused one's.
			f.keepHead(nil)
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
	// "json: unknown field" and the syntax errors read well without the prefix.
	return errors.New(strings.TrimPrefix(err.Error(), "json: "))
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
