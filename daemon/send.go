package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/emersion/go-smtp"

	"github.com/mailctl/mailctl/daemon/bounce"
	"github.com/mailctl/mailctl/daemon/ingest"
	"github.com/mailctl/mailctl/daemon/outbound"
	"github.com/mailctl/mailctl/daemon/outbound/delivery"
	"github.com/mailctl/mailctl/daemon/outbound/dkim"
	"github.com/mailctl/mailctl/daemon/outbound/policy"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/daemon/outbound/remote"
	"github.com/mailctl/mailctl/daemon/smtpin"
	"github.com/mailctl/mailctl/hooks"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// outboundService owns the send pipeline and runs the queue.
type outboundService struct {
	d     *Daemon
	svc   *outbound.Service
	queue *queue.Queue
	mx    *remote.Client
	// limiter counts sends per mailbox; its file outlives restarts.
	limiter *policy.RateLimiter
	keys    atomic.Pointer[[]*dkim.Key]
	// bounceKey makes and checks the return paths of sent messages.
	bounceKey *bounce.Key
	cancel    context.CancelFunc
	done      chan struct{}
}

func (d *Daemon) newOutbound() (*outboundService, error) {
	cfg := d.cfg()
	o := &outboundService{d: d, done: make(chan struct{})}
	if err := o.loadKeys(); err != nil {
		return nil, err
	}
	bk, err := bounce.LoadKey(filepath.Join(cfg.Paths.StateDir, "bounce.key"))
	if err != nil {
		return nil, err
	}
	o.bounceKey = bk
	mx := &remote.Client{
		Resolver: d.lookups, Port: cfg.Delivery.Port, Hostname: cfg.Hostname, AllowPlaintext: *cfg.Delivery.AllowPlaintext,
		ConnectTimeout: cfg.Delivery.ConnectTimeout.Duration, TransactionTimeout: cfg.Delivery.TransactionTimeout.Duration,
		Local: d, IsLocal: func(dom string) bool { return d.opts.Capture != "" || d.cfg().IsLocalDomain(dom) }, Logger: d.log.With("part", "delivery"),
		Dial: d.dial,
	}
	if cfg.Relay.Host != "" {
		relay := cfg.Relay
		mx.Relay = &relay
		if relay.PasswordFile != "" {
			pw, err := os.ReadFile(relay.PasswordFile)
			if err != nil {
				return nil, fmt.Errorf("relay password: %w", err)
			}
			mx.RelayPassword = strings.TrimSpace(string(pw))
		}
	}
	// The queue reports to the recorder of sent copies; the service sits
	// on both. Each is complete when built.
	rec := &outbound.Recorder{Store: d.store, Clock: d.now, Logger: d.log.With("part", "send"),
		OnUpdated: o.updated, OnSettled: o.settled, CurrentID: d.currentID}
	q, err := queue.Open(cfg.Paths.QueueDir(), mx, rec, queue.Options{Clock: d.now,
		RetryFor: cfg.Delivery.RetryFor.Duration, MaxConcurrent: cfg.Delivery.MaxConcurrent, Logger: d.log.With("part", "queue"),
		Flush: rec.Flush})
	if err != nil {
		return nil, fmt.Errorf("opening the queue: %w", err)
	}
	o.queue, o.mx = q, mx
	limiter, err := policy.OpenRateLimiter(filepath.Join(cfg.Paths.StateDir, "ratelimit.log"), d.now, d.log.With("part", "send"))
	if err != nil {
		return nil, err
	}
	o.limiter = limiter
	o.svc = &outbound.Service{
		Domain: func() string { return d.cfg().PrimaryDomain() },
		Keys: func() []*dkim.Key {
			if k := o.keys.Load(); k != nil {
				return *k
			}
			return nil
		},
		Sent: rec, Queue: q, Limiter: limiter,
		FirstAttemptWait: cfg.Delivery.FirstAttemptWait.Duration, Logger: d.log.With("part", "send"),
		ReturnPath: func(from, mailboxID, sentID string) string {
			return o.bounceKey.ReturnPath(from, mailboxID, sentID)
		},
	}
	d.onDSN = func(mailbox, tag string, dsn *ingest.DSN) bool {
		var rs []outbound.DSNRecipient
		for _, r := range dsn.Recipients {
			rs = append(rs, outbound.DSNRecipient{Address: r.Address, Action: r.Action, Status: r.Status, Diagnostic: r.Diagnostic})
		}
		// Only a report that came back to the sent message's own return
		// path is about our message; anyone can mail a DSN-shaped message.
		return o.svc.ApplyDSN(mailbox, dsn.OriginalMessageID, rs, func(sentID string) bool {
			return o.bounceKey.Valid(tag, d.currentID(mailbox), sentID)
		})
	}
	return o, nil
}

// loadKeys (re)reads the DKIM keys; the daemon signs with every one of them.
func (o *outboundService) loadKeys() error {
	dir := o.d.cfg().Paths.DKIMDir
	keys, err := dkim.LoadKeys(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("loading DKIM keys: %w", err)
	}
	if len(keys) == 0 {
		o.d.log.Warn("no DKIM keys: outbound mail will be unsigned and likely rejected; run `mailctl dkim keygen`", "dir", dir)
	}
	for _, k := range keys {
		o.d.log.Info("DKIM key loaded", "selector", k.Selector, "algorithm", k.Algorithm)
	}
	o.keys.Store(&keys)
	return nil
}

func (o *outboundService) Start(ctx context.Context) error {
	ctx, o.cancel = context.WithCancel(context.Background())
	go func() {
		defer close(o.done)
		o.queue.Run(ctx)
	}()
	return nil
}

func (o *outboundService) Stop(ctx context.Context) error {
	o.cancel()
	select {
	case <-o.done:
		o.mx.Close() // say QUIT on the cached sessions
		o.limiter.Close()
		o.queue.Close()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (o *outboundService) updated(mailbox, sentID string, res protocol.SendResult) {
	for _, r := range res.Recipients {
		o.d.metrics.delivered.WithLabelValues(r.Status).Inc()
	}
	o.d.emit(protocol.Event{Type: protocol.EventDeliveryStatus, Mailbox: mailbox, Folder: protocol.FolderSent, ID: sentID, Send: &res}, "")
}

// settled fires after_send hooks once every recipient's outcome is final.
func (o *outboundService) settled(mailbox, sentID string, res protocol.SendResult) {
	o.afterSend(mailbox, sentID, res)
	o.bounceToSender(mailbox, sentID, res)
}

// afterSend fires the mailbox's after_send hooks. The sent copy is read
// only when the mailbox has such a hook (most have none).
func (o *outboundService) afterSend(mailbox, sentID string, res protocol.SendResult) {
	d := o.d
	if !d.hasHooks(protocol.EventAfterSend, mailbox) {
		return
	}
	m, body, err := d.store.Get(mailbox, protocol.FolderSent, sentID)
	if err != nil {
		d.log.Warn("after_send: sent copy unreadable", "mailbox", mailbox, "id", sentID, "err", err)
		return
	}
	f := hooks.Facts{Event: protocol.EventAfterSend, Mailbox: mailbox, ID: sentID,
		File: d.store.Path(mailbox) + "/" + protocol.FolderSent + "/" + sentID + ".md", From: m.From, To: m.To,
		Subject: m.Subject, MessageID: m.MessageID, ThreadID: m.ThreadID, Trusted: protocol.NoPolicy,
		SendStatus: res.Status, Recipients: res.Recipients}
	d.fireHooks(protocol.EventAfterSend, mailbox, f, func() []byte { return store.Render(m, body) })
}

// currentID is the identity of the mailbox named name now, "" when none.
func (d *Daemon) currentID(name string) string {
	if m, ok := d.lookupMailbox(name); ok {
		return m.ID
	}
	return ""
}

// dropQueued drops the queued mail of a mailbox being deleted, so that
// none of it is sent, or bounces, after the name may have a new owner.
// An item in the middle of an attempt is left to finish; its outcome is
// then only logged, as the mailbox it belongs to is gone.
func (d *Daemon) dropQueued(mailboxID string) {
	if d.out == nil || mailboxID == "" {
		return
	}
	for _, it := range d.out.queue.List() {
		if it.MailboxID == mailboxID && !it.Settled() {
			if err := d.out.queue.Drop(it.ID); err != nil {
				d.log.Warn("queued mail of a deleted mailbox not dropped", "id", it.ID, "err", err)
			}
		}
	}
}

// dial is the outbound dialer; tests replace it to reach fake MX servers.
func (d *Daemon) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.dialer != nil {
		return d.dialer(ctx, network, addr)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

// DeliverLocal takes mail from one of our mailboxes to our own domains
// through the inbound path. The daemon composed and signed it itself, so the
// From is authenticated without DNS.
func (d *Daemon) DeliverLocal(ctx context.Context, from string, rcpts []string, data []byte) []delivery.Result {
	out := make([]delivery.Result, len(rcpts))
	for i, r := range rcpts {
		out[i].Rcpt = r
	}
	if d.inbound == nil {
		for i := range out {
			out[i].Err = &delivery.Error{Temporary: true, Code: 451, Message: "local delivery is not available"}
		}
		return out
	}
	// The envelope sender is the mailbox's return path (name+tag@domain),
	// which the daemon made itself: its local part names the submitter.
	submitter, _, _ := strings.Cut(from, "@")
	submitter, _, _ = strings.Cut(submitter, "+")
	if submitter == "" {
		submitter = "local"
	}
	env := smtpin.Envelope{Helo: d.cfg().Hostname, MailFrom: from, Rcpts: rcpts}
	if d.opts.Capture != "" {
		// Recipients outside our domains go to the capture mailbox.
		env.Rcpts = make([]string, len(rcpts))
		for i, r := range rcpts {
			env.Rcpts[i] = r
			if _, dom, ok := strings.Cut(r, "@"); !ok || !d.cfg().IsLocalDomain(dom) {
				env.Rcpts[i] = d.Address(d.opts.Capture)
			}
		}
	}
	errs := d.inbound.deliver(ctx, env, smtpin.NewMessage(data, 0), submitter)
	for i, err := range errs {
		if err == nil {
			continue
		}
		var se *smtp.SMTPError
		if errors.As(err, &se) {
			out[i].Err = &delivery.Error{Temporary: se.Code/100 == 4, Code: se.Code,
				Enhanced: fmt.Sprintf("%d.%d.%d", se.EnhancedCode[0], se.EnhancedCode[1], se.EnhancedCode[2]), Message: se.Message, Host: "local"}
		} else {
			out[i].Err = &delivery.Error{Temporary: true, Code: 451, Message: err.Error(), Host: "local"}
		}
	}
	return out
}

func (d *Daemon) sender() (*outboundService, error) {
	if d.out == nil {
		return nil, protocol.Errorf(protocol.CodeUnavailable, "sending is not available on this daemon")
	}
	return d.out, nil
}

func handleSend(ctx context.Context, d *Daemon, c *call, a *protocol.SendArgs) (any, error) {
	return d.sendFrom(ctx, c.box(), a)
}

// sendFrom sends a as mailbox m, which the caller was checked to own: the
// one path of every send (the send verb and a draft's).
func (d *Daemon) sendFrom(ctx context.Context, m *mailboxInfo, a *protocol.SendArgs) (protocol.SendResult, error) {
	o, err := d.sender()
	if err != nil {
		return protocol.SendResult{}, err
	}
	if !a.AllowEmpty && a.ReplyToID == "" && strings.TrimSpace(a.Subject) == "" && strings.TrimSpace(a.Body) == "" && strings.TrimSpace(a.HTMLBody) == "" && len(a.Attachments) == 0 {
		return protocol.SendResult{}, protocol.Errorf(protocol.CodeInvalidInput, "the message has no subject, no body and no attachment: give a subject or a body, or set allow_empty if an empty message is really meant")
	}
	req := outbound.SendRequest{Mailbox: m.Name, MailboxID: m.ID, FromAddress: d.Address(m.Name), FromName: d.displayName(m.Name), Policy: d.cfg().EffectiveSend(m.Name), Args: *a}
	if a.ReplyToID != "" {
		parent, err := d.replyParent(m.Name, a.ReplyToID)
		if err != nil {
			return protocol.SendResult{}, err
		}
		req.Parent = parent
		replyToOwn(&req.Args, parent)
	}
	return o.svc.Send(ctx, req)
}

// replyParent is the stored message of mailbox that reply_to_id names: one
// it received (in its inbox or archive) or one it sent.
func (d *Daemon) replyParent(mailbox, id string) (*store.Message, error) {
	if err := store.ValidID(id); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "reply_to_id %q: %v", id, err)
	}
	for _, f := range []string{protocol.FolderInbox, protocol.FolderArchive, protocol.FolderSent} {
		if p, _, err := d.store.Get(mailbox, f, id); err == nil {
			return p, nil
		}
	}
	return nil, protocol.Errorf(protocol.CodeNotFound, "no message %q in %s to reply to", id, mailbox)
}

// replyToOwn addresses a reply to one of the mailbox's own sent messages as
// any mail client does: to that message's recipients (and, with reply_all,
// its Cc), not to its sender, which is the mailbox itself. Recipients the
// caller named win.
func replyToOwn(a *protocol.SendArgs, parent *store.Message) {
	if !parent.Outbound || len(a.To) > 0 {
		return
	}
	a.To = append([]string(nil), parent.To...)
	if a.ReplyAll {
		a.Cc = append(append([]string(nil), a.Cc...), parent.Cc...)
		a.ReplyAll = false // the parent's To and Cc are already the recipients
	}
}

func handleSendStatus(_ context.Context, d *Daemon, c *call, a *protocol.SendStatusArgs) (any, error) {
	if err := store.ValidID(a.ID); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "id %q: %v", a.ID, err)
	}
	o, err := d.sender()
	if err != nil {
		return nil, err
	}
	res, err := o.svc.Status(a.Mailbox, a.ID)
	return res, storeErr(err, "sent message "+a.ID)
}

func noQueueItem(id string) error {
	return protocol.Errorf(protocol.CodeNotFound, "no queue item %q among yours: list the queue to see yours", id)
}

// queueTarget is the mailbox a queue item was sent from. Another user's item
// reads as missing; root may still act on mail queued by a mailbox since
// deleted. An orphan (an item without a mailbox identity) is root's alone.
func queueTarget(d *Daemon, _ *call, a *protocol.QueueIDArgs) (target, error) {
	o, err := d.sender()
	if err != nil {
		return target{}, err
	}
	it, err := o.queue.Get(a.ID)
	if err != nil {
		return target{}, noQueueItem(a.ID)
	}
	t := target{mailboxes: []string{it.Mailbox}, missing: noQueueItem(a.ID), goneOK: true, boundID: it.MailboxID}
	if orphanItem(it) {
		t.rootOnly = noQueueItem(a.ID)
	}
	return t, nil
}

// orphanItem reports whether it carries no mailbox identity: it was queued
// before items recorded one (2e01477), so nothing proves which owner of its
// mailbox name queued it. The name may have changed hands since, so only
// root sees and steers it, and its outcome changes no sent copy.
func orphanItem(it *queue.Item) bool { return it.MailboxID == "" }

// ownsItem reports whether the caller may see queue item it: root any,
// others the items of their mailboxes as they are now (never an orphan).
func (d *Daemon) ownsItem(c *call, it *queue.Item) bool {
	if c.caller.Root() {
		return true
	}
	if orphanItem(it) {
		return false
	}
	m, ok := d.lookupMailbox(it.Mailbox)
	return ok && c.visible(m) && it.MailboxID == m.ID
}

func handleQueueList(_ context.Context, d *Daemon, c *call, _ *protocol.Empty) (any, error) {
	o, err := d.sender()
	if err != nil {
		return nil, err
	}
	out := protocol.QueueList{Items: []protocol.QueueItem{}}
	for _, it := range o.queue.List() {
		if d.ownsItem(c, it) {
			out.Items = append(out.Items, it.QueueItem())
		}
	}
	return out, nil
}

func handleQueueShow(_ context.Context, d *Daemon, _ *call, a *protocol.QueueIDArgs) (any, error) {
	it, err := d.out.queue.Get(a.ID)
	if err != nil {
		return nil, noQueueItem(a.ID)
	}
	return it.QueueItem(), nil
}

// queueAction applies act to an item the access check let through and
// answers with the item as it is afterwards.
func queueAction(d *Daemon, a *protocol.QueueIDArgs, act func(q *queue.Queue, id string) error) (any, error) {
	if err := act(d.out.queue, a.ID); err != nil {
		return nil, err
	}
	it, err := d.out.queue.Get(a.ID)
	if err != nil {
		return protocol.QueueItem{ID: a.ID}, nil
	}
	return it.QueueItem(), nil
}

func handleQueueRetry(_ context.Context, d *Daemon, _ *call, a *protocol.QueueIDArgs) (any, error) {
	return queueAction(d, a, (*queue.Queue).Retry)
}

func handleQueueDrop(_ context.Context, d *Daemon, _ *call, a *protocol.QueueIDArgs) (any, error) {
	return queueAction(d, a, (*queue.Queue).Drop)
}

func handleQueueApprove(_ context.Context, d *Daemon, _ *call, a *protocol.QueueIDArgs) (any, error) {
	return queueAction(d, a, (*queue.Queue).Approve)
}
