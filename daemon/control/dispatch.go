package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/protocol"
)

// call is one request in flight, with what the audit line needs.
type call struct {
	caller  Caller
	verb    string
	args    json.RawMessage
	mailbox string              // the mailboxes the request concerned, for the audit line
	boxes   []*registry.Mailbox // the mailboxes the access check resolved, as the request named them
	id      uint64
	w       *connWriter
}

// box is the mailbox a single-mailbox verb acts on, as the access check
// resolved it; nil when the request named none.
func (c *call) box() *registry.Mailbox {
	if len(c.boxes) == 0 {
		return nil
	}
	return c.boxes[0]
}

// decode parses the request's arguments strictly into v.
func (c *call) decode(v any) error {
	if err := protocol.DecodeStrict(c.args, v); err != nil {
		return protocol.Errorf(protocol.CodeInvalidInput, "%s: %v", c.verb, err)
	}
	return nil
}

// verbRoute is one verb: the access it needs, how its arguments name what it
// acts on, and the handler that runs once the access check has passed.
type verbRoute struct {
	access  Access
	prepare func(s *Server, c *call) (args any, t target, err error)
	run     func(ctx context.Context, s *Server, c *call, args any) (any, error)
	// names is how the request holds the names of the mailboxes it acts on.
	names nameUse
	// unpaced says of a request's arguments that it does not wait for a
	// slot (turns.go): it may wait a long time for something else (a
	// delivery attempt, a mailbox name held by others, new mail, the host
	// checks' DNS lookups) and must not hold a slot meanwhile. nil: every
	// request of the verb takes one.
	unpaced func(args any) bool
}

// unpacedRoute marks r as one that takes no slot.
func unpacedRoute(r verbRoute) verbRoute {
	r.unpaced = func(any) bool { return true }
	return r
}

// unpacedUnless marks r as one that takes no slot unless paced says its
// arguments, of type A, make a request that waits on nothing else (a dry
// run of a send: all of its work and no wait for the queue).
func unpacedUnless[A any](paced func(a *A) bool, r verbRoute) verbRoute {
	r.unpaced = func(args any) bool { return !paced(args.(*A)) }
	return r
}

// nameUse is how a verb holds the mailbox names its request names (nameLocks).
type nameUse int

const (
	// namesShared: from before the access check until the handler returns,
	// so that what was checked is what the handler acts on.
	namesShared nameUse = iota
	// namesOwn: the handler takes the name alone itself (it deletes or
	// creates the mailbox of that name).
	namesOwn
	// namesUnheld: the request outlasts any single action (a watch) and
	// binds what it checked by identity instead.
	namesUnheld
)

// holding sets how r holds its request's mailbox names.
func holding(use nameUse, r verbRoute) verbRoute {
	r.names = use
	return r
}

// on builds a route whose arguments decode strictly into A. find names what
// the request acts on (nil: nothing beyond what the caller owns).
func on[A any](acc Access, find func(s *Server, c *call, a *A) (target, error),
	run func(ctx context.Context, s *Server, c *call, a *A) (any, error)) verbRoute {
	return verbRoute{
		access: acc,
		prepare: func(s *Server, c *call) (any, target, error) {
			a := new(A)
			if err := c.decode(a); err != nil {
				return nil, target{}, err
			}
			if find == nil {
				return a, target{}, nil
			}
			t, err := find(s, c, a)
			return a, t, err
		},
		run: func(ctx context.Context, s *Server, c *call, args any) (any, error) {
			return run(ctx, s, c, args.(*A))
		},
	}
}

// verbTable maps every verb to its route; authz.go fills it.
var verbTable = map[string]verbRoute{}

func handle(verb string, r verbRoute) {
	if _, dup := verbTable[verb]; dup {
		panic("duplicate handler " + verb)
	}
	verbTable[verb] = r
}

// gated runs between a request's access check and its handler (a variable
// so that a test can hold a request there).
var gated = func(verb string) {}

// handleVersion takes any arguments: every client, of any version, may ask.
func handleVersion(_ context.Context, s *Server, c *call, _ *json.RawMessage) (any, error) {
	out := protocol.VersionInfo{Protocol: protocol.Name, ProtocolVersion: protocol.Version, Server: s.version(),
		CallerUID: c.caller.UID, CallerGID: c.caller.GID, PID: os.Getpid(), Dev: s.opts.Dev, Capture: s.opts.Capture}
	if r := s.b.LastReload(); r != nil {
		rs := *r
		if !c.caller.Root() && c.caller.UID != uint32(os.Getuid()) {
			// The error and the keys are about the config file, which
			// only root and the daemon's own user may read.
			rs.Error, rs.Applied, rs.Pending, rs.DKIMKeys = "", nil, nil, nil
		}
		out.Reload = &rs
	}
	return out, nil
}

// Audit decisions: a request is denied when it is refused before its
// handler runs (malformed arguments, or the access check) or when the
// handler answers forbidden (an operator-declared hook, say).
const (
	decisionAllow = "allow"
	decisionDeny  = "deny"
)

// paced says whether caller's requests take a slot to run: every user's
// but root's and the daemon's own user's (the operator's, and in mailctl
// dev the one user's).
func (s *Server) paced(caller Caller) bool {
	return !caller.Root() && caller.UID != uint32(os.Getuid())
}

// gate decodes the request, resolves what it acts on and checks the access
// the route declares. Nothing else decides who may do what. A root-only verb
// refuses anyone else before it looks anything up, so that its answer is
// the same whatever the request names: an existing item of another user
// must not answer otherwise than one that does not exist.
//
// Unless the route says otherwise, the names of the mailboxes the request
// acts on are held shared from before the check; the caller lets them go
// (release, never nil) once the handler has returned.
func (s *Server) gate(r verbRoute, c *call) (args any, release func(), err error) {
	release = func() {}
	if r.access == AccessRoot && !c.caller.Root() {
		return nil, release, errRootOnly()
	}
	args, t, err := r.prepare(s, c)
	c.mailbox = t.concerns()
	if err != nil {
		return nil, release, err
	}
	if r.names == namesShared && len(t.mailboxes) > 0 {
		release = s.names.share(t.mailboxes)
	}
	boxes, err := s.authorize(c, r.access, t)
	if err != nil {
		return nil, release, err
	}
	c.boxes = boxes
	return args, release, nil
}

func (s *Server) serveRequest(ctx context.Context, caller Caller, req *protocol.Request, w *connWriter) {
	start := time.Now()
	c := &call{caller: caller, verb: req.Verb, args: req.Args, id: req.ID, w: w}
	r, ok := verbTable[req.Verb]
	var data any
	var err error
	decision := decisionDeny
	if !ok {
		err = protocol.Errorf(protocol.CodeInvalidInput, "unknown verb %q: see protocol/README.md for the verbs this daemon (%s) knows", req.Verb, s.version())
	} else {
		timeout := s.cfg().Control.RequestTimeout.Duration
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
		data, err = s.safeCall(c, func() (any, error) {
			args, release, err := s.gate(r, c)
			defer release()
			if err != nil {
				return nil, err
			}
			decision = decisionAllow
			if (r.unpaced == nil || !r.unpaced(args)) && s.paced(caller) {
				if err := s.turns.acquire(rctx, caller.UID); err != nil {
					return nil, err
				}
				defer s.turns.release(caller.UID)
			}
			if s.gated != nil {
				s.gated(c.verb)
			} else {
				gated(c.verb)
			}
			return r.run(rctx, s, c, args)
		})
		if err != nil && errors.Is(err, context.DeadlineExceeded) {
			err = protocol.Errorf(protocol.CodeTimeout, "%s did not finish within %s", req.Verb, timeout)
		}
	}
	resp := protocol.Response{ID: req.ID}
	code := ""
	if err != nil {
		var pe *protocol.Error
		if !errors.As(err, &pe) {
			pe = storeFault(err)
		}
		if pe == nil {
			s.log.Error("request failed", "verb", req.Verb, "uid", caller.UID, "err", err)
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
	if code == protocol.CodeForbidden {
		decision = decisionDeny
	}
	if code == "" {
		code = "ok"
	}
	s.opts.Requests.WithLabelValues(metricVerb(req.Verb), code).Inc()
	// The audit line is written before the reply so it exists by the time the caller sees the outcome.
	s.audit(caller, req.Verb, c.mailbox, decision, code, time.Since(start))
	if data != nil || err != nil || req.Verb != protocol.VerbWatch {
		if werr := w.send(resp); werr != nil {
			s.log.Debug("reply not delivered", "verb", req.Verb, "err", werr)
		}
	}
}

func (s *Server) safeCall(c *call, f func() (any, error)) (data any, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("handler panic", "verb", c.verb, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			data, err = nil, protocol.Errorf(protocol.CodeInternal, "internal error; the daemon log has details")
		}
	}()
	return f()
}

// audit writes one line per request: who, what, which mailbox, the decision,
// the result code and the duration. Never bodies, addresses of other users'
// mail, or secrets. Identical requests (same uid, verb, mailbox, decision and
// code) within a logsum window are counted instead: the next line of the kind
// says how many (repeats=), or a "repeats not logged" line does.
func (s *Server) audit(c Caller, verb, mailbox, decision, code string, dur time.Duration) {
	// Kinds are grouped per uid: one uid's flood of distinct requests
	// folds into its own overflow kind, never another uid's lines.
	ok, n := s.opts.LogSum.AllowIn(fmt.Sprintf("audit uid=%d", c.UID), fmt.Sprintf("audit uid=%d verb=%s mailbox=%s decision=%s code=%s", c.UID, verb, mailbox, decision, code))
	if !ok {
		return
	}
	attrs := []any{"uid", c.UID, "gid", c.GID, "pid", c.PID, "verb", verb, "mailbox", mailbox,
		"decision", decision, "code", code, "duration_ms", dur.Milliseconds()}
	if n > 0 {
		attrs = append(attrs, "repeats", n)
	}
	s.log.Info("audit", attrs...)
}

// metricVerb bounds the verb label to known verbs so a client cannot grow the
// metric's label set.
func metricVerb(v string) string {
	if _, ok := verbTable[v]; ok {
		return v
	}
	return "unknown"
}
