package mcpshim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mailctl/mailctl/protocol"
)

// URIs of the resources. docs/mcp.md documents the scheme.
const (
	URIMailboxes       = "mailctl://mailboxes"
	uriPrefix          = "mailctl://mailbox/"
	templateInbox      = "mailctl://mailbox/{name}/inbox"
	templateMessage    = "mailctl://mailbox/{name}/{folder}/{id}"
	templateMessageRaw = "mailctl://mailbox/{name}/{folder}/{id}/raw"
)

// InboxURI is the resource of a mailbox's inbox, the one to subscribe to.
func InboxURI(mailbox string) string { return uriPrefix + mailbox + "/inbox" }

func (s *Server) addResources() {
	s.mcp.AddResource(&mcp.Resource{
		URI: URIMailboxes, Name: "mailboxes", Title: "Your mailboxes", MIMEType: "application/json",
		Description: "The mailboxes you own, with addresses and counts.",
	}, s.readMailboxes)
	s.mcp.AddResourceTemplate(&mcp.ResourceTemplate{
		URITemplate: templateInbox, Name: "inbox", Title: "A mailbox's inbox", MIMEType: "text/markdown",
		Description: "The 50 newest inbox messages as a Markdown table. Subscribe to be notified when mail arrives.",
	}, s.readTemplated)
	s.mcp.AddResourceTemplate(&mcp.ResourceTemplate{
		URITemplate: templateMessage, Name: "message", Title: "One message", MIMEType: "text/markdown",
		Description: "A message as Markdown: headers, trust facts and the first 20000 body characters (untrusted content fenced).",
	}, s.readTemplated)
	s.mcp.AddResourceTemplate(&mcp.ResourceTemplate{
		URITemplate: templateMessageRaw, Name: "message-raw", Title: "One message, raw", MIMEType: "message/rfc822",
		Description: "The raw message as received or sent (fenced when the sender is not trusted).",
	}, s.readTemplated)
}

func (s *Server) readMailboxes(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	var list protocol.MailboxList
	if err := s.call(ctx, protocol.VerbMailboxList, protocol.Empty{}, &list); err != nil {
		return nil, resourceErr(err, req.Params.URI)
	}
	rows := []MailboxRow{}
	for _, m := range list.Mailboxes {
		rows = append(rows, mailboxRow(m))
	}
	b, _ := json.MarshalIndent(map[string]any{"mailboxes": rows}, "", "  ")
	return textResource(req.Params.URI, "application/json", string(b)), nil
}

// parseMailboxURI splits mailctl://mailbox/NAME/REST... into its segments.
func parseMailboxURI(uri string) (name string, rest []string, ok bool) {
	if !strings.HasPrefix(uri, uriPrefix) {
		return "", nil, false
	}
	parts := strings.Split(strings.TrimPrefix(uri, uriPrefix), "/")
	if len(parts) < 2 || slices.ContainsFunc(parts, func(p string) bool { return p == "" || p == "." || p == ".." }) {
		return "", nil, false
	}
	return parts[0], parts[1:], true
}

func (s *Server) readTemplated(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	name, rest, ok := parseMailboxURI(uri)
	if !ok {
		return nil, notOurURI(uri)
	}
	switch {
	case len(rest) == 1 && rest[0] == protocol.FolderInbox:
		var list protocol.MessageList
		if err := s.call(ctx, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: name, Folder: protocol.FolderInbox, Limit: 50}, &list); err != nil {
			return nil, resourceErr(err, uri)
		}
		return textResource(uri, "text/markdown", inboxMarkdown(name, &list)), nil
	case len(rest) == 2 || (len(rest) == 3 && rest[2] == "raw"):
		raw := len(rest) == 3
		m, err := s.read(ctx, protocol.MessageReadArgs{Mailbox: name, Folder: rest[0], ID: rest[1], Raw: raw})
		if err != nil {
			return nil, resourceErr(err, uri)
		}
		if raw {
			body := m.Body
			if fenced(m) {
				body = newFence().block(body)
			}
			return textResource(uri, "message/rfc822", body), nil
		}
		return textResource(uri, "text/markdown", messageMarkdown(m)), nil
	}
	return nil, notOurURI(uri)
}

// notOurURI is the error for a URI that names no resource of this server
// (another scheme, a path with empty or dot segments, too many segments):
// the SDK's own "Resource not found" carries no data.code, and clients match
// codes.
func notOurURI(uri string) error {
	return badURI(uri, fmt.Sprintf("Resource not found: %q is not a mailctl resource; use %s, %s, %s or %s",
		uri, URIMailboxes, templateInbox, templateMessage, templateMessageRaw))
}

// resourceURIErrors gives the SDK's answer to a resources/read whose URI
// matches no resource or template (it never reaches readTemplated) the
// data.code every other resource error has.
func (s *Server) resourceURIErrors(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		var rpc *jsonrpc.Error
		if method != "resources/read" || !errors.As(err, &rpc) || rpc.Code != jsonrpc.CodeInvalidParams {
			return res, err
		}
		var data struct {
			Code string `json:"code"`
		}
		if json.Unmarshal(rpc.Data, &data) == nil && data.Code != "" {
			return res, err
		}
		p, ok := req.GetParams().(*mcp.ReadResourceParams)
		if !ok || p == nil {
			return res, err
		}
		return nil, notOurURI(p.URI)
	}
}

// resourceErr turns a daemon error about uri into the JSON-RPC error MCP
// defines for it: resource not found (-32602, with the uri) for not_found,
// invalid params for the caller's mistakes, internal error otherwise. A
// plain Go error would reach the client with code 0. data.code keeps
// mailctl's own code and data.retryable says whether to try again.
func resourceErr(err error, uri string) error {
	var rpc *jsonrpc.Error
	if errors.As(err, &rpc) {
		return err
	}
	pe := asProtocolError(err)
	fields := map[string]any{"uri": uri, "code": pe.Code, "retryable": pe.Retryable}
	rpc = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: pe.Error()}
	switch pe.Code {
	case protocol.CodeNotFound:
		// The SDK's resource-not-found code is now InvalidParams; data.code
		// says not_found.
		rpc.Code, rpc.Message = jsonrpc.CodeInvalidParams, "Resource not found: "+pe.Error()
		fields["next_action"] = resourceNext(uri, pe)
	case protocol.CodeInvalidInput, protocol.CodeForbidden, protocol.CodeTooLarge:
		rpc.Code = jsonrpc.CodeInvalidParams
	}
	rpc.Data, _ = json.Marshal(fields)
	return rpc
}

// resourceNext is the call that finds what a not_found resource URI missed
// (notFoundNext on the URI's mailbox and folder).
func resourceNext(uri string, pe *protocol.Error) *NextAction {
	name, rest, _ := parseMailboxURI(uri)
	folder := ""
	if len(rest) > 0 {
		folder = rest[0]
	}
	return notFoundNext(pe, name, folder)
}

// badURI is the error for a URI that names no resource of this server.
func badURI(uri, why string) error {
	data, _ := json.Marshal(map[string]any{"uri": uri, "code": protocol.CodeInvalidInput, "retryable": false})
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: why, Data: data}
}

func textResource(uri, mime, text string) *mcp.ReadResourceResult {
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: mime, Text: text}}}
}

func inboxMarkdown(name string, list *protocol.MessageList) string {
	f := newFence()
	var b strings.Builder
	fmt.Fprintf(&b, "# %s/inbox\n\n%d message(s), newest first.\n\n| id | from | subject | date | read | trusted |\n|---|---|---|---|---|---|\n", name, list.Total)
	for _, m := range list.Messages {
		r := listRow(name, m, f)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %t | %s |\n", r.ID, cell(r.From), cell(r.Subject), dateText(m.Date, m.DateSource, time.RFC3339), r.Read, r.Trusted)
	}
	if l := f.label(); l != nil {
		fmt.Fprintf(&b, "\n%s\n", l.Note)
	}
	return b.String()
}

func cell(s string) string { return strings.ReplaceAll(oneLine(s), "|", `\|`) }

func messageMarkdown(m *protocol.Message) string {
	d := readData(m, newFence())
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", oneLine(d.Subject))
	fmt.Fprintf(&b, "- id: %s\n- folder: %s\n- from: %s\n- to: %s\n- date: %s\n- message_id: %s\n- thread_id: %s\n",
		d.ID, d.Folder, oneLine(d.From), strings.Join(d.To, ", "), dateText(d.Date, d.DateSource, time.RFC3339), d.MessageID, d.ThreadID)
	fmt.Fprintf(&b, "- trusted: %s (dkim: %s; spf: %s; dmarc: %s)\n", d.Trust.Trusted, orNone(d.Trust.DKIM), orNone(d.Trust.SPF), orNone(d.Trust.DMARC))
	for _, a := range d.AttachmentList {
		fmt.Fprintf(&b, "- attachment: %s (%s, %d bytes)\n", a.Filename, a.ContentType, a.Size)
	}
	if d.Fence != nil {
		fmt.Fprintf(&b, "\n> %s\n", d.Fence.Note)
	}
	fmt.Fprintf(&b, "\n%s\n", d.Body)
	if d.NextOffset > 0 {
		fmt.Fprintf(&b, "\n(body truncated at %d of %d characters; use email_read with offset=%d)\n", d.NextOffset, d.BodyChars, d.NextOffset)
	}
	return b.String()
}

// subscriptions keeps one daemon watch per subscribed mailbox and turns its
// new-mail events into notifications/resources/updated. A watch belongs to
// the sessions subscribed to it (the clients of `mailctl mcp --http` share
// one server), as the SDK's own record of whom to notify does: a session's
// unsubscribe lets go of its own subscription only, and a session that ends
// lets go of all of its, so that the last one to go ends the watch.
type subscriptions struct {
	s      *Server
	mu     sync.Mutex
	active map[string]*watch           // by mailbox
	ending map[*mcp.ServerSession]bool // sessions whose end is awaited
}

type watch struct {
	sessions map[*mcp.ServerSession]bool
	ctx      context.Context // ended by cancel: the last session let go
	cancel   context.CancelFunc
	ready    chan struct{} // closed once the first daemon watch is made, or failed (err)
	err      error
}

func newSubscriptions(s *Server) *subscriptions {
	return &subscriptions{s: s, active: map[string]*watch{}, ending: map[*mcp.ServerSession]bool{}}
}

// subscribe joins the session to mailbox's watch, starting one if there is
// none, and answers once the daemon has acknowledged it. The daemon is
// dialled without ss.mu held, so a slow daemon holds up only the subscribes
// waiting for that watch, never the unsubscribes, session ends and other
// mailboxes' subscribes of the server.
func (ss *subscriptions) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	uri := req.Params.URI
	mailbox, ok := subscribable(uri)
	if !ok {
		return badURI(uri, fmt.Sprintf("only mailbox inboxes (%s) can be subscribed to", templateInbox))
	}
	ss.mu.Lock()
	w := ss.active[mailbox]
	if w == nil {
		wctx, cancel := context.WithCancel(context.Background())
		w = &watch{sessions: map[*mcp.ServerSession]bool{}, ctx: wctx, cancel: cancel, ready: make(chan struct{})}
		ss.active[mailbox] = w
		go ss.start(mailbox, w)
	}
	already := w.sessions[req.Session]
	w.sessions[req.Session] = true
	ss.awaitEnd(req.Session)
	ss.mu.Unlock()

	select {
	case <-w.ready:
		if w.err != nil {
			return resourceErr(w.err, uri)
		}
		return nil
	case <-ctx.Done():
		// The request was cancelled (or its client went) while the daemon
		// had not answered: it never subscribed, so it lets go, which ends
		// the watch being made when no one else waits for it.
		if !already {
			ss.mu.Lock()
			ss.leaveWatch(mailbox, w, req.Session)
			ss.mu.Unlock()
		}
		return ctx.Err()
	}
}

// start makes w's first daemon watch of mailbox, then follows it. A watch
// that fails is dropped, so that the next subscribe tries again.
func (ss *subscriptions) start(mailbox string, w *watch) {
	events, err := ss.watchOnce(w.ctx, mailbox)
	if err != nil {
		ss.mu.Lock()
		ss.forget(mailbox, w)
		ss.mu.Unlock()
		w.cancel()
		w.err = err
		close(w.ready)
		return
	}
	close(w.ready)
	ss.follow(mailbox, w, events)
}

// watchOnce opens a daemon connection that watches mailbox until wctx
// ends, when the connection is closed.
func (ss *subscriptions) watchOnce(wctx context.Context, mailbox string) (<-chan protocol.Event, error) {
	c, err := ss.s.dial(wctx)
	if err != nil {
		return nil, err
	}
	events, err := c.Watch(wctx, protocol.WatchArgs{Mailboxes: []string{mailbox}})
	if err != nil {
		c.Close()
		return nil, err
	}
	context.AfterFunc(wctx, func() { c.Close() })
	go func() {
		// The watch's end without wctx's (the daemon stopped) closes
		// the connection too.
		<-c.Done()
		c.Close()
	}()
	return events, nil
}

// rewatchEvery bounds the wait between attempts to watch a mailbox again
// after the daemon ended its watch (a restart).
const rewatchEvery = 5 * time.Second

// follow turns w's events into notifications/resources/updated until the
// last session lets go of w. A watch the daemon ends (it stopped or
// restarted) is made again as soon as the daemon answers, and the sessions
// are told the inbox changed, since mail may have come meanwhile.
func (ss *subscriptions) follow(mailbox string, w *watch, events <-chan protocol.Event) {
	uri := InboxURI(mailbox)
	for {
		for ev := range events {
			if ev.Type != protocol.EventNewMail && ev.Type != protocol.EventMailboxChanged && ev.Type != protocol.EventMailboxDeleted {
				continue
			}
			ss.s.log.Debug("mailbox changed", "mailbox", ev.Mailbox, "type", ev.Type)
			ss.s.mcp.ResourceUpdated(context.Background(), &mcp.ResourceUpdatedNotificationParams{URI: uri})
		}
		ss.s.log.Debug("mailbox watch ended; watching again once the daemon answers", "mailbox", mailbox)
		for wait := 100 * time.Millisecond; ; wait = min(2*wait, rewatchEvery) {
			if w.ctx.Err() != nil {
				return
			}
			var err error
			if events, err = ss.watchOnce(w.ctx, mailbox); err == nil {
				break
			}
			var refused *protocol.Error
			if errors.As(err, &refused) && refused.Code != protocol.CodeUnavailable {
				// The daemon answered and refused (the mailbox is gone,
				// or not the caller's any more): nothing to wait for.
				ss.s.log.Info("mailbox watch refused; subscriptions to it end", "mailbox", mailbox, "err", err)
				ss.mu.Lock()
				ss.forget(mailbox, w)
				ss.mu.Unlock()
				w.cancel()
				return
			}
			select {
			case <-w.ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		ss.s.mcp.ResourceUpdated(context.Background(), &mcp.ResourceUpdatedNotificationParams{URI: uri})
	}
}

// awaitEnd lets go of session's subscriptions when it ends, whether or not
// it unsubscribed. Call with ss.mu held.
func (ss *subscriptions) awaitEnd(session *mcp.ServerSession) {
	if session == nil || ss.ending[session] {
		return
	}
	ss.ending[session] = true
	go func() {
		_ = session.Wait()
		ss.mu.Lock()
		defer ss.mu.Unlock()
		delete(ss.ending, session)
		for mailbox := range ss.active {
			ss.leave(mailbox, session)
		}
	}()
}

// leave ends session's subscription to mailbox, and the watch with the
// last one. Call with ss.mu held.
func (ss *subscriptions) leave(mailbox string, session *mcp.ServerSession) {
	if w := ss.active[mailbox]; w != nil {
		ss.leaveWatch(mailbox, w, session)
	}
}

// leaveWatch takes session out of w, and ends w with its last session.
// Call with ss.mu held.
func (ss *subscriptions) leaveWatch(mailbox string, w *watch, session *mcp.ServerSession) {
	if !w.sessions[session] {
		return
	}
	delete(w.sessions, session)
	if len(w.sessions) == 0 {
		w.cancel()
		ss.forget(mailbox, w)
	}
}

// forget takes w out of the active watches, unless another has taken its
// place. Call with ss.mu held.
func (ss *subscriptions) forget(mailbox string, w *watch) {
	if ss.active[mailbox] == w {
		delete(ss.active, mailbox)
	}
}

func (ss *subscriptions) unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	mailbox, ok := subscribable(req.Params.URI)
	if !ok {
		return nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.leave(mailbox, req.Session)
	return nil
}

func (ss *subscriptions) closeAll() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for k, w := range ss.active {
		w.cancel()
		delete(ss.active, k)
	}
}

func subscribable(uri string) (string, bool) {
	name, rest, ok := parseMailboxURI(uri)
	if !ok || len(rest) != 1 || rest[0] != protocol.FolderInbox {
		return "", false
	}
	return name, true
}
