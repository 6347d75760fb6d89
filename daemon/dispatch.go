package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/mailctl/mailctl/protocol"
)

// call is one request in flight, with what the audit line needs.
type call struct {
	caller   Caller
	verb     string
	args     json.RawMessage
	mailbox  string // the mailbox the request concerned, for the audit line
	decision string // "allow" or "deny", set by authorize
	id       uint64
	w        *connWriter
}

// decode parses the request's arguments strictly into v.
func (c *call) decode(v any) error {
	if err := protocol.DecodeStrict(c.args, v); err != nil {
		return protocol.Errorf(protocol.CodeInvalidInput, "%s: %v", c.verb, err)
	}
	return nil
}

type handler func(ctx context.Context, d *Daemon, c *call) (any, error)

// handlers maps verbs to their handlers. Every handler that touches a mailbox
// goes through Daemon.authorize.
var handlers = map[string]handler{}

func handle(verb string, h handler) {
	if _, dup := handlers[verb]; dup {
		panic("duplicate handler " + verb)
	}
	handlers[verb] = h
}

func init() {
	handle(protocol.VerbVersion, handleVersion)
}

func handleVersion(_ context.Context, d *Daemon, c *call) (any, error) {
	c.decision = "allow"
	return protocol.VersionInfo{Protocol: protocol.Name, ProtocolVersion: protocol.Version, Server: d.Version(),
		CallerUID: c.caller.UID, CallerGID: c.caller.GID}, nil
}

func (d *Daemon) serveRequest(ctx context.Context, caller Caller, req *protocol.Request, w *connWriter) {
	start := time.Now()
	c := &call{caller: caller, verb: req.Verb, args: req.Args, id: req.ID, w: w}
	h, ok := handlers[req.Verb]
	var data any
	var err error
	if !ok {
		err = protocol.Errorf(protocol.CodeInvalidInput, "unknown verb %q: see protocol/README.md for the verbs this daemon (%s) knows", req.Verb, d.Version())
	} else {
		timeout := d.cfg().Control.RequestTimeout.Duration
		if req.TimeoutMS > 0 {
			timeout = time.Duration(req.TimeoutMS) * time.Millisecond
		}
		if req.Verb == protocol.VerbWatch {
			timeout = 0 // a watch lasts as long as the connection
		}
		rctx := ctx
		if timeout > 0 {
			var cancel context.CancelFunc
			rctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		data, err = d.safeCall(rctx, h, c)
		if err != nil && errors.Is(err, context.DeadlineExceeded) {
			err = protocol.Errorf(protocol.CodeTimeout, "%s did not finish within %s", req.Verb, timeout)
		}
	}
	resp := protocol.Response{ID: req.ID}
	code := ""
	if err != nil {
		var pe *protocol.Error
		if !errors.As(err, &pe) {
			d.log.Error("request failed", "verb", req.Verb, "uid", caller.UID, "err", err)
			pe = protocol.Errorf(protocol.CodeInternal, "internal error; the daemon log has details")
		}
		resp.Error = pe
		code = pe.Code
	} else if data != nil {
		raw, merr := json.Marshal(data)
		if merr != nil {
			resp.Error = protocol.Errorf(protocol.CodeInternal, "encoding the reply failed")
			code = protocol.CodeInternal
		} else {
			resp.Data = raw
		}
	} else {
		resp.Data = json.RawMessage("{}")
	}
	if c.decision == "" {
		c.decision = "allow"
		if code == protocol.CodeForbidden {
			c.decision = "deny"
		}
	}
	if code == "" {
		code = "ok"
	}
	d.metrics.requests.WithLabelValues(metricVerb(req.Verb), code).Inc()
	// The audit line is written before the reply so it exists by the time the caller sees the outcome.
	d.audit(caller, req.Verb, c.mailbox, c.decision, code, time.Since(start))
	if data != nil || err != nil || req.Verb != protocol.VerbWatch {
		if werr := w.send(resp); werr != nil {
			d.log.Debug("reply not delivered", "verb", req.Verb, "err", werr)
		}
	}
}

func (d *Daemon) safeCall(ctx context.Context, h handler, c *call) (data any, err error) {
	defer func() {
		if r := recover(); r != nil {
			d.log.Error("handler panic", "verb", c.verb, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			data, err = nil, protocol.Errorf(protocol.CodeInternal, "internal error; the daemon log has details")
		}
	}()
	return h(ctx, d, c)
}

// audit writes one line per request: who, what, which mailbox, the decision,
// the result code and the duration. Never bodies, addresses of other users'
// mail, or secrets.
func (d *Daemon) audit(c Caller, verb, mailbox, decision, code string, dur time.Duration) {
	d.log.Info("audit", "uid", c.UID, "gid", c.GID, "pid", c.PID, "verb", verb, "mailbox", mailbox,
		"decision", decision, "code", code, "duration_ms", dur.Milliseconds())
}

// metricVerb bounds the verb label to known verbs so a client cannot grow the
// metric's label set.
func metricVerb(v string) string {
	if _, ok := handlers[v]; ok {
		return v
	}
	return "unknown"
}
