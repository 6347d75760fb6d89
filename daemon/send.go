package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/emersion/go-smtp"

	"github.com/mailctl/mailctl/daemon/bounce"
	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/control"
	"github.com/mailctl/mailctl/daemon/outbound"
	"github.com/mailctl/mailctl/daemon/outbound/delivery"
	"github.com/mailctl/mailctl/daemon/outbound/dkim"
	"github.com/mailctl/mailctl/daemon/outbound/mtasts"
	"github.com/mailctl/mailctl/daemon/outbound/policy"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/daemon/outbound/remote"
	"github.com/mailctl/mailctl/daemon/outbound/tlsrpt"
	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/daemon/smtpin"
	"github.com/mailctl/mailctl/hooks"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// outboundService owns the send pipeline and runs the queue.
type outboundService struct {
	d     *Daemon
	svc   *outbound.Service
	queue *queue.Queue
	mx    *remote.Client
	// limiter counts sends per mailbox and owner; its file outlives
	// restarts.
	limiter *policy.RateLimiter
	keys    atomic.Pointer[[]*dkim.Key]
	// bounceKey makes and checks the return paths of sent messages.
	bounceKey *bounce.Key
	// reports counts TLS sessions and sends the daily reports; nil when
	// [tlsrpt] enabled is false.
	reports *tlsrpt.Recorder
	cancel  context.CancelFunc
	done    chan struct{}
	// later counts the settled items' hooks and bounces waiting for their
	// mailbox's name (underName); Stop waits for them.
	later sync.WaitGroup
	// sts is the MTA-STS policy cache; nil when delivery.mta_sts is off.
	sts *mtasts.Source
	// sweeping is the idempotency records' sweep (sweepKeys) and the
	// MTA-STS cache's prune (pruneSTS).
	sweeping sync.WaitGroup
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
	if err := o.wireTLSPolicies(mx, cfg); err != nil {
		return nil, err
	}
	if cfg.Relay.Host != "" {
		relay := cfg.Relay
		mx.Relay = &relay
		if relay.PasswordFile != "" {
			pw, err := safeio.ReadSecret(relay.PasswordFile)
			if err != nil {
				return nil, fmt.Errorf("relay.password_file: %w", err)
			}
			if mx.RelayPassword = strings.TrimSpace(string(pw)); mx.RelayPassword == "" {
				return nil, fmt.Errorf("relay.password_file: %s is empty: write the relay password into it", relay.PasswordFile)
			}
		}
		if mx.RelayRootCAs, err = relay.CertPool(); err != nil {
			return nil, err
		}
	}
	// The queue reports to the recorder of sent copies; the service sits
	// on both. Each is complete when built.
	rec := &outbound.Recorder{Store: d.store, Clock: d.now, Logger: d.log.With("part", "send"),
		OnUpdated: o.updated, OnSettled: o.settled, OnDelayed: o.delayWarning, CurrentID: d.currentID}
	q, err := queue.Open(cfg.Paths.QueueDir(), mx, rec, queue.Options{Clock: d.now,
		RetryFor: cfg.Delivery.RetryFor.Duration, MaxConcurrent: cfg.Delivery.MaxConcurrent,
		MaxPerDestination: cfg.Delivery.MaxPerDestination, Owner: d.mailboxOwner, Served: d.stillSends, Logger: d.log.With("part", "queue"),
		Flush: rec.Flush, DelayWarning: cfg.Delivery.DelayWarning.Duration, Observe: d.observeAttempt})
	if err != nil {
		return nil, fmt.Errorf("opening the queue: %w", err)
	}
	o.queue, o.mx = q, mx
	limiter, err := policy.OpenRateLimiter(rateLimitLog(cfg.Paths), d.now, d.ownerUID, d.log.With("part", "send"))
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
		PendingReturnPath: func(from string) string { return bounce.PendingReturnPath(from, protocol.PendingTag) },
		LegacyReturnPath: func(from, mailboxID, sentID string) string {
			return o.bounceKey.LegacyReturnPath(from, mailboxID, sentID)
		},
		KeyWindow: cfg.Delivery.IdempotencyWindow.Duration,
		Deleted:   d.mailboxDeleted,
	}
	d.dsn = &reportHandler{
		apply: func(mailbox, tag string, rep outbound.Report) bool {
			// Only a report that came back to the sent message's own return
			// path is about our message; anyone can mail a DSN-shaped message.
			return o.svc.ApplyDSN(mailbox, rep, func(sentID string) bool { return o.bounceKey.Valid(tag, d.currentID(mailbox), sentID) })
		},
		applied: func(mailbox, tag string, rep outbound.Report) bool {
			return o.svc.ReportApplied(mailbox, rep, func(sentID string) bool { return o.bounceKey.Valid(tag, d.currentID(mailbox), sentID) })
		},
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

// keyNames names the DKIM keys in use, "selector (algorithm)" each, in the
// order they sign.
func (o *outboundService) keyNames() []string {
	var out []string
	if keys := o.keys.Load(); keys != nil {
		for _, k := range *keys {
			out = append(out, k.Selector+" ("+k.Algorithm+")")
		}
	}
	return out
}

// Send, Status, RateUsage and Queue are the send pipeline as the control
// API uses it (control.Outbound).
func (o *outboundService) Send(ctx context.Context, req outbound.SendRequest) (protocol.SendResult, error) {
	if !req.Args.DryRun {
		if err := o.d.sendReserveError(); err != nil {
			return protocol.SendResult{}, err
		}
		if err := o.d.sendQuotaError(req.Mailbox); err != nil {
			return protocol.SendResult{}, err
		}
	}
	return o.svc.Send(ctx, req)
}

func (o *outboundService) Status(mailbox, id string, header outbound.HeaderReader) (protocol.SendResult, error) {
	return o.svc.StatusRead(mailbox, id, header)
}

func (o *outboundService) RateUsage(mailbox string, uid uint32, p config.SendPolicy) []protocol.SendRate {
	return o.limiter.Usage(mailbox, uid, p)
}

func (o *outboundService) Queue() control.Queue { return o.queue }

func (o *outboundService) Start(ctx context.Context) error {
	ctx, o.cancel = context.WithCancel(context.Background())
	o.sweeping.Go(func() { o.sweepKeys(ctx) })
	if o.sts != nil {
		o.sweeping.Go(func() { o.pruneSTS(ctx) })
	}
	go func() {
		defer close(o.done)
		if o.reports != nil {
			go o.reports.Run(ctx)
		}
		if o.d.opts.StepQueue {
			<-ctx.Done()
			return
		}
		o.queue.Run(ctx)
	}()
	return nil
}

func (o *outboundService) Stop(ctx context.Context) error {
	o.cancel()
	o.sweeping.Wait()
	o.svc.CloseSweep()
	select {
	case <-o.done:
		if o.reports != nil {
			o.reports.Flush()
		}
		o.mx.Close() // say QUIT on the cached sessions
		o.limiter.Close()
		o.queue.Close()
	case <-ctx.Done():
		return ctx.Err()
	}
	later := make(chan struct{})
	go func() { o.later.Wait(); close(later) }()
	select {
	case <-later:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// updated tells the watchers of the mailbox that sent (mailboxID; "": the
// mailbox of that name now) of a change of the message's delivery state.
// Watchers of a mailbox made under the name since hear nothing of it.
func (o *outboundService) updated(mailbox, mailboxID, sentID string, res protocol.SendResult) {
	for _, r := range res.Recipients {
		o.d.metrics.delivered.WithLabelValues(r.Status).Inc()
	}
	o.d.ctl.Emit(protocol.Event{Type: protocol.EventDeliveryStatus, Mailbox: mailbox, Folder: protocol.FolderSent, ID: sentID, Send: &res}, mailboxID)
}

// settled fires after_send hooks once every recipient's outcome is final,
// and bounces to the sender what failed after its send was answered. Both
// act on the mailbox by name: they run holding the name, while it is still
// the mailbox that sent (mailboxID), so a mailbox deleted meanwhile and
// perhaps made again by someone else gets neither.
func (o *outboundService) settled(mailbox, mailboxID, sentID string, res protocol.SendResult) {
	o.underName(mailbox, mailboxID, func() {
		o.afterSend(mailbox, sentID, res)
		o.bounceToSender(mailbox, sentID, res)
	})
}

// underName runs f holding name, as a request on the mailbox does, if the
// mailbox of that name is still the one with identity id. The queue tells
// of a settled item with the item's own lock held, and deleting a mailbox
// holds its name alone while it drops the mailbox's items, which takes
// those locks: so when a delete or a create holds the name or waits for
// it, f does not wait here but on a goroutine of its own, and runs once
// the name is free (the mailbox deleted, f finds it gone and does nothing).
func (o *outboundService) underName(name, id string, f func()) {
	d := o.d
	run := func() {
		if d.currentID(name) == id {
			f()
		}
	}
	if release, ok := d.ctl.TryHoldName(name); ok {
		defer release()
		run()
		return
	}
	o.later.Add(1)
	go func() {
		defer o.later.Done()
		defer d.ctl.HoldNames(name)()
		run()
	}()
	settledLater(name)
}

// settledLater is told of each settled item whose hooks and bounce wait
// for its mailbox's name, once they are counted in o.later (a variable so
// that a test can see one wait, and Stop wait for it).
var settledLater = func(name string) {}

// sentCopySlack is what a sent copy's file may hold beyond the message's
// bound (send.max_message_bytes), which its body is within: the frontmatter
// (recipients, their delivery status).
const sentCopySlack = 1 << 20

// afterSend fires the mailbox's after_send hooks. The sent copy is read
// only when the mailbox has such a hook (most have none).
func (o *outboundService) afterSend(mailbox, sentID string, res protocol.SendResult) {
	d := o.d
	if !d.hasHooks(protocol.EventAfterSend, mailbox) {
		return
	}
	// The sent copy is the owner's file: read it with the bound of what
	// the daemon wrote there, not the store's bound of any message file.
	max := d.cfg().EffectiveSend(mailbox).MaxMessageBytes + sentCopySlack
	m, body, err := d.store.GetUpTo(mailbox, protocol.FolderSent, sentID, max)
	if err != nil {
		d.log.Warn("after_send: sent copy unreadable", "mailbox", mailbox, "id", sentID, "err", err)
		return
	}
	f := hooks.Facts{Event: protocol.EventAfterSend, Mailbox: mailbox, ID: sentID,
		File: d.store.Path(mailbox) + "/" + protocol.FolderSent + "/" + sentID + ".md", From: m.From, To: m.To,
		Subject: m.Subject, MessageID: m.MessageID, ThreadID: m.ThreadID, Trusted: protocol.NoPolicy,
		SendStatus: res.Status, Recipients: res.Recipients}
	d.fireHooks(protocol.EventAfterSend, mailbox, "", f, func() []byte { return store.Render(m, body) })
}

// ownerUID is the uid of the owner of the mailbox named name now.
func (d *Daemon) ownerUID(name string) (uint32, bool) {
	if m, ok := d.lookupMailbox(name); ok {
		return m.UID, true
	}
	return 0, false
}

// mailboxOwner is the uid that owns the mailbox named name, when it is still
// the mailbox with the identity id ("": whichever has the name): the queue
// shares its delivery places by it.
func (d *Daemon) mailboxOwner(name, id string) (uint32, bool) {
	if m, ok := d.lookupMailbox(name); ok && (id == "" || m.ID == id) {
		return m.UID, true
	}
	return 0, false
}

// stillSends is the queue's Options.Served: whether the mailbox named name
// is still served as the mailbox with identity id, the one that queued an
// item. It is not when the mailbox's declaration was taken out of
// config.toml, given another owner (whose declared mailbox has another
// identity), or its owner cannot be resolved now. The queue then holds the
// item, deferring each attempt without sending anything, until it is
// served so again: mail is not sent under the name, signed, for an owner
// who did not write it or for no owner at all, and nothing is lost to a
// declaration taken out for a while or a directory service not up yet. An
// item without an identity (queued before items recorded one) proves no
// mailbox; as a delete does, this leaves it to root.
func (d *Daemon) stillSends(name, id string) bool {
	if id == "" {
		return true
	}
	_, ok := d.mailboxOwner(name, id)
	return ok
}

// mailboxDeleted is the send pipeline's Service.Deleted: whether the
// mailbox named name with identity id was deleted. The registry mints a
// mailbox's identity when it creates it and never gives it again, so one
// it no longer holds under the name is gone for good. An operator-declared
// mailbox is never taken for deleted: a declaration taken out of
// config.toml may come back, and its keys with it (as its queued mail
// waits for it).
func (d *Daemon) mailboxDeleted(name, id string) bool {
	if name == "" || !registry.MintedMailboxID(id) {
		return false
	}
	r, ok := d.reg.Mailbox(name)
	return !ok || r.ID != id
}

// rateLimitLog is the send rate limiter's file.
func rateLimitLog(p config.Paths) string { return filepath.Join(p.StateDir, rateLimitLogName) }

// rateLimitLogName is the send rate limiter's file in the state directory.
const rateLimitLogName = "ratelimit.log"

// currentID is the identity of the mailbox named name now, "" when none.
func (d *Daemon) currentID(name string) string {
	if m, ok := d.lookupMailbox(name); ok {
		return m.ID
	}
	return ""
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
				out[i].Captured = d.opts.Capture
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
			msg := se.Message
			if out[i].Captured != "" && se.EnhancedCode == (smtp.EnhancedCode{5, 1, 1}) {
				// "No such mailbox here" would name the recipient, who is
				// not ours: the mailbox gone is the one dev captures into.
				msg = fmt.Sprintf("the mailbox %q, where mailctl dev keeps outbound mail, no longer exists: create it again (mailctl mailboxes create %s) or start mailctl dev again, which makes it", out[i].Captured, out[i].Captured)
			}
			out[i].Err = &delivery.Error{Temporary: se.Code/100 == 4, Code: se.Code,
				Enhanced: fmt.Sprintf("%d.%d.%d", se.EnhancedCode[0], se.EnhancedCode[1], se.EnhancedCode[2]), Message: msg, Host: "local"}
		} else {
			out[i].Err = &delivery.Error{Temporary: true, Code: 451, Message: err.Error(), Host: "local"}
		}
	}
	return out
}
