package daemon

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/mailctl/mailctl/daemon/bounce"
	"github.com/mailctl/mailctl/daemon/certs"
	"github.com/mailctl/mailctl/daemon/control"
	"github.com/mailctl/mailctl/daemon/ingest"
	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/daemon/smtpin"
	"github.com/mailctl/mailctl/daemon/trust"
	"github.com/mailctl/mailctl/hooks"
	"github.com/mailctl/mailctl/internal/crashpoint"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// route is where one recipient address leads.
type route struct {
	Mailbox string
	Tag     string
	// ID is the routed mailbox's registry id, so that what follows the
	// delivery (its hooks) can tell the mailbox from one deleted and made
	// again under the name meanwhile; "" when not known.
	ID string
}

var (
	errRelay  = &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 7, 1}, Message: "Relaying denied: this host only accepts mail for its own domains"}
	errNoUser = &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "No such mailbox here"}
	// errUnserved answers for a mailbox the operator declared and the
	// daemon does not serve until the declaration is mended: the sender
	// keeps the mail and tries again.
	errUnserved = &smtp.SMTPError{Code: 450, EnhancedCode: smtp.EnhancedCode{4, 2, 1}, Message: "Mailbox temporarily unavailable, try again later"}
	errBadAddr  = &smtp.SMTPError{Code: 501, EnhancedCode: smtp.EnhancedCode{5, 1, 3}, Message: "Bad recipient address syntax"}
	errStorage  = &smtp.SMTPError{Code: 452, EnhancedCode: smtp.EnhancedCode{4, 3, 1}, Message: "Insufficient system storage, try again later"}
	errTemp     = &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "Temporary local problem, try again later"}
	// errHeader refuses a message whose own header is past ingest's bounds:
	// stored, it would have no From to reply to and no header to judge.
	errHeader = &smtp.SMTPError{Code: 552, EnhancedCode: smtp.EnhancedCode{5, 3, 4},
		Message: fmt.Sprintf("Message header too large: more than %d fields or %d bytes", ingest.MaxHeaderFields, ingest.MaxHeaderBytes)}
)

// route resolves a recipient address to a mailbox: the domain must be ours
// (never an open relay); the local part matches case-insensitively, "+tag"
// reaches the mailbox with the tag recorded, aliases map extra addresses, and
// unknown local parts go to the catch-all when one is configured.
func (d *Daemon) route(addr string) (route, error) {
	addr = strings.TrimSpace(addr)
	at := strings.LastIndexByte(addr, '@')
	if at <= 0 || at == len(addr)-1 {
		return route{}, errBadAddr
	}
	// An absolute domain (a final dot) is the same domain, for the aliases
	// that name it as for the check below.
	local, domain := strings.ToLower(addr[:at]), strings.TrimSuffix(strings.ToLower(addr[at+1:]), ".")
	cfg := d.cfg()
	if !cfg.IsLocalDomain(domain) {
		return route{}, errRelay
	}
	base, tag, _ := strings.Cut(local, "+")
	full := base + "@" + domain
	st := d.state.Load()
	for _, m := range st.declared {
		for _, a := range m.Aliases {
			a = strings.ToLower(a)
			if a == base || a == full {
				return d.tagged(route{Mailbox: m.Name, Tag: tag, ID: m.ID})
			}
		}
	}
	if store.ValidMailboxName(base) == nil {
		if mb, ok := d.lookupMailbox(base); ok {
			return d.tagged(route{Mailbox: base, Tag: tag, ID: mb.ID})
		}
	}
	if slices.Contains(st.unserved, base) || slices.Contains(st.unserved, full) {
		return route{}, errUnserved
	}
	if cfg.CatchAll != "" {
		if mb, ok := d.lookupMailbox(cfg.CatchAll); ok {
			return route{Mailbox: cfg.CatchAll, Tag: local, ID: mb.ID}, nil
		}
	}
	return route{}, errNoUser
}

// tagged refuses a route whose tag is the return path of a message another
// mailbox of that name sent, one deleted since: bounces and auto-replies to
// the first owner's messages quote them, and the address's new owner is
// someone else (docs/outbound.md).
func (d *Daemon) tagged(rt route) (route, error) {
	if d.out != nil && d.out.bounceKey.OtherMailbox(rt.Tag, rt.ID) {
		return route{}, errNoUser
	}
	return rt, nil
}

// inbound is the SMTP/LMTP backend: it routes, authenticates, parses and
// stores, and answers only when the message is durable.
type inbound struct {
	d       *Daemon
	checker *trust.Checker
}

func (b *inbound) CheckRecipient(_ context.Context, rcpt string) error {
	rt, err := b.d.route(rcpt)
	switch err {
	case errRelay:
		b.d.metrics.rejected.WithLabelValues("relay").Inc()
	case errNoUser:
		b.d.metrics.rejected.WithLabelValues("unknown_user").Inc()
	case errBadAddr:
		b.d.metrics.rejected.WithLabelValues("bad_address").Inc()
	case errUnserved:
		b.d.metrics.rejected.WithLabelValues("unserved").Inc()
	case nil:
		if err := b.d.checkReserve(); err != nil {
			return err
		}
		return b.d.checkQuota(rt.Mailbox, 0)
	}
	return err
}

// Deliver authenticates the message once, parses it once (a message held in
// memory) or as each copy is stored (a spooled one, so that it is never
// held), then stores a copy in each distinct mailbox the recipients lead to.
func (b *inbound) Deliver(ctx context.Context, env smtpin.Envelope, msg *smtpin.Message) []error {
	return b.deliver(ctx, env, msg, "")
}

// deliver is Deliver; submitter names the local mailbox when the daemon
// composed and signed the message itself for one of its own domains: its From
// is then authenticated by the sending mailbox's uid (trust.LocalSubmission)
// rather than by DNS. It is "" for mail from the network.
func (b *inbound) deliver(ctx context.Context, env smtpin.Envelope, msg *smtpin.Message, submitter string) []error {
	d := b.d
	errs := make([]error, len(env.Rcpts))
	if err := b.checkHeader(env, msg); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if err := d.checkReserve(); err != nil {
		// The space may have gone since RCPT: nothing is stored, and the
		// sender (or the queue, for local delivery) retries.
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	in := trust.Input{RemoteIP: env.RemoteIP, Helo: env.Helo, MailFrom: env.MailFrom, Raw: msg.Bytes()}
	if in.Raw == nil {
		in.Read = msg.Open
	}
	res := b.checker.Check(ctx, in)
	if submitter != "" {
		trust.LocalSubmission(&res, submitter, d.cfg().IsLocalDomain(res.FromDomain))
	}
	// A message held in memory is parsed here, once; a spooled one as each
	// copy is stored, its attachments decoded into that mailbox's folder.
	var parsed *ingest.Parsed
	if raw := msg.Bytes(); raw != nil {
		var err error
		if parsed, err = ingest.Parse(raw, ingest.Options{MaxAttachmentBytes: d.cfg().SMTP.MaxMessageBytes}); err != nil {
			for i := range errs {
				errs[i] = &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 6, 0}, Message: "Message could not be parsed"}
			}
			return errs
		}
	}
	act, why := b.enforcement().Decide(env.RemoteIP, res)
	if act == trust.Reject {
		// RFC 7489 §6.6: refused at the end of DATA, nothing stored.
		reply := &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 7, 1}, Message: "Message rejected by the " + why}
		for i := range errs {
			errs[i] = reply
		}
		d.metrics.received.WithLabelValues("rejected").Inc()
		d.log.Info("message rejected: DMARC policy", "from", env.MailFrom, "header_from", res.FromAddress, "dmarc", res.DMARC.Detail,
			"rcpts", len(env.Rcpts), "session", env.Session, "remote", remoteString(env))
		return errs
	}
	junk := env.Screen.Junk // a client the DNS lists name below the threshold
	switch {
	case act == trust.Quarantine:
		junk = why
	case why != "":
		d.log.Info("DMARC policy not applied", "reason", why, "header_from", res.FromAddress, "session", env.Session)
	}
	ar := res.AuthenticationResults(d.cfg().Hostname)
	c := &copySource{msg: msg, ar: ar, messageID: newMessageID(d.cfg().Hostname), parsed: parsed}
	if raw := msg.Bytes(); raw != nil {
		c.stored = withHeader(ar, msg.Headroom, raw)
	}
	head, err := c.clientHead()
	if err != nil {
		d.log.Error("reading inbound message failed", "err", err, "session", env.Session)
		for i := range errs {
			errs[i] = errTemp
		}
		return errs
	}
	c.head = head

	targets := d.routeAll(env.Rcpts, d.tlsReportsTo(c.head), errs)
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := b.storeTarget(ctx, t, env, c, res, junk)
			for _, i := range t.rcpts {
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	return errs
}

// nameWait bounds how long a copy waits for its mailbox's name while a
// delete or a create of that name holds it or waits for it (a variable so
// that a test can shorten it).
var nameWait = 5 * time.Second

// errNameBusy answers a copy for a mailbox whose delete or create did not
// let its name go within nameWait: the sender retries, and is then routed
// afresh (to the mailbox made, or refused as unknown).
var errNameBusy = &smtp.SMTPError{Code: 450, EnhancedCode: smtp.EnhancedCode{4, 2, 1}, Message: "Mailbox busy, try again later"}

// storeTarget stores the copy of one mailbox. Its name is held until the
// copy is stored and announced, as a request on that mailbox holds it: a
// mailbox deleted meanwhile goes after its copy is in it, and one made
// again under the name gets nothing its trusted senders did not judge.
// Each copy holds its own name only, so a delete waiting for one mailbox
// delays no copy for another.
func (b *inbound) storeTarget(ctx context.Context, t *target, env smtpin.Envelope, c *copySource, res trust.Result, junk string) error {
	d := b.d
	name := t.rt.Mailbox
	release, ok := d.ctl.HoldNameWithin(name, nameWait)
	if !ok {
		d.log.Info("copy deferred: its mailbox is being deleted or created", "mailbox", name, "session", env.Session)
		return errNameBusy
	}
	defer release()
	if !d.stillRouted(t.rt) {
		// Deleted, perhaps made again by someone else, between the
		// routing and the hold: the sender's retry is routed afresh.
		return errTemp
	}
	rcpts := make([]string, 0, len(t.rcpts))
	for _, i := range t.rcpts {
		rcpts = append(rcpts, env.Rcpts[i])
	}
	// The quota again, with the message's size: the mailbox may have
	// filled since RCPT, or this message would pass it.
	if err := d.checkQuota(name, c.Size()); err != nil {
		return err
	}
	return b.store(ctx, name, t.rt, env, rcpts, c, res, junk)
}

// checkHeader refuses, for good, a message whose own header the parse could
// not read (ingest.CheckHeader), before anything of it is journaled or
// stored, so that the sender learns of it. A part's header past the same
// bounds does not refuse the message: the parse skips that part and the
// parts after it, says so in the body, and the raw copy keeps them.
func (b *inbound) checkHeader(env smtpin.Envelope, msg *smtpin.Message) error {
	switch err := ingest.CheckHeader(msg.Open()); {
	case errors.Is(err, ingest.ErrHeaderTooLarge):
		b.d.metrics.received.WithLabelValues("header_too_large").Inc()
		b.d.log.Info("message refused: header too large", "from", env.MailFrom, "rcpts", len(env.Rcpts),
			"size", msg.Size(), "session", env.Session, "remote", remoteString(env))
		return errHeader
	case err != nil:
		b.d.log.Error("reading inbound message failed", "err", err, "session", env.Session)
		return errTemp
	}
	return nil
}

// target is the recipients of a message that lead to one mailbox.
type target struct {
	rcpts []int // their places in the envelope
	rt    route
}

// routeAll routes each of rcpts, or, when reports names one, takes them
// all to that mailbox; it sets errs[i] for a recipient refused and groups
// the others by mailbox, in the order their first recipients came.
func (d *Daemon) routeAll(rcpts []string, reports string, errs []error) []*target {
	var targets []*target
	byMailbox := map[string]*target{}
	for i, rcpt := range rcpts {
		rt, err := d.route(rcpt)
		if err != nil {
			errs[i] = err
			continue
		}
		if reports != "" {
			rt = route{Mailbox: reports}
		}
		t := byMailbox[rt.Mailbox]
		if t == nil {
			t = &target{rt: rt}
			byMailbox[rt.Mailbox] = t
			targets = append(targets, t)
		}
		t.rcpts = append(t.rcpts, i)
	}
	return targets
}

// stillRouted reports whether the mailbox under rt's name is still the one
// rt was routed to (a route to the TLS reports mailbox names no identity).
func (d *Daemon) stillRouted(rt route) bool {
	if rt.ID == "" {
		return true
	}
	mb, ok := d.lookupMailbox(rt.Mailbox)
	return ok && mb.ID == rt.ID
}

// enforcement is the operator's DMARC policy as the config says now.
func (b *inbound) enforcement() trust.Enforcement {
	t := b.d.cfg().Trust
	// Validated when the config was loaded; entries are few.
	fw, _ := trust.ParseForwarders(t.Forwarders)
	return trust.Enforcement{Enabled: *t.DMARCEnforce, Forwarders: fw}
}

// copySource is what every mailbox's copy of one message is made from.
type copySource struct {
	msg       *smtpin.Message
	ar        string // our Authentication-Results header, before the message
	messageID string // for a message without one
	parsed    *ingest.Parsed
	stored    []byte // ar and the message, when held in memory
	// head is the start of what the client handed in (below our trace
	// headers), enough for its header block: what tells a TLS report.
	head []byte
}

// maxHeadRead bounds head for a spooled message: tlsReportLabel reads a
// header block of at most 64 KiB.
const maxHeadRead = 64<<10 + 4

// clientHead is what head holds: the client's bytes, all of them for a
// message held in memory (no copy), the first maxHeadRead of a spooled one.
func (c *copySource) clientHead() ([]byte, error) {
	if raw := c.msg.Bytes(); raw != nil {
		return raw[c.msg.Trace:], nil
	}
	return io.ReadAll(io.LimitReader(c.client(), maxHeadRead))
}

// Size is the size of the copy stored (store.RawSource).
func (c *copySource) Size() int64 { return int64(len(c.ar)) + c.msg.Size() }

// WriteTo writes the copy stored, ar and then the message (store.RawSource).
func (c *copySource) WriteTo(w io.Writer) (int64, error) {
	if c.stored != nil && crashpoint.Armed() {
		// In two halves, for a test to kill the daemon between them.
		half := len(c.stored) / 2
		n, err := w.Write(c.stored[:half])
		if err != nil {
			return int64(n), err
		}
		crashpoint.Hit("inbound-raw-half")
		k, err := w.Write(c.stored[half:])
		return int64(n + k), err
	}
	if c.stored != nil {
		n, err := w.Write(c.stored)
		return int64(n), err
	}
	n, err := io.WriteString(w, c.ar)
	if err != nil {
		return int64(n), err
	}
	r := c.msg.Open()
	var half int64
	if crashpoint.Armed() {
		if half, err = io.CopyN(w, r, c.msg.Size()/2); err != nil {
			return int64(n) + half, err
		}
		crashpoint.Hit("inbound-raw-half")
	}
	k, err := io.Copy(w, r)
	return int64(n) + half + k, err
}

// client reads the bytes the client handed in, below our trace headers.
func (c *copySource) client() io.Reader {
	if raw := c.msg.Bytes(); raw != nil {
		return bytes.NewReader(raw[c.msg.Trace:]) // a WriterTo: hashed without a copy
	}
	return io.NewSectionReader(readerAt{c.msg}, int64(c.msg.Trace), c.msg.Size()-int64(c.msg.Trace))
}

// parse is the message parsed for a mailbox's folder: the one parse of a
// message held in memory, or, for a spooled one, a parse whose attachments
// are decoded into spills in that folder (Discard them if it is not
// stored).
func (c *copySource) parse(d *Daemon, mailbox, folder string) (*ingest.Parsed, error) {
	if c.parsed != nil {
		return c.parsed, nil
	}
	return ingest.ParseFrom(c.msg.Open, c.msg.Size(), ingest.Options{MaxAttachmentBytes: d.cfg().SMTP.MaxMessageBytes,
		Spill: func() (*store.Spill, error) { return d.store.NewSpill(mailbox, folder) }})
}

// readerAt reads a message at an offset, held or spooled.
type readerAt struct{ m *smtpin.Message }

func (r readerAt) ReadAt(p []byte, off int64) (int, error) {
	if sp := r.m.Spool(); sp != nil {
		return sp.ReadAt(p, off)
	}
	return bytes.NewReader(r.m.Bytes()).ReadAt(p, off)
}

// store writes one mailbox's copy and announces it. A message with a junk
// reason goes to the junk folder, silently: no event, no hook. A delivery
// report that reached one of the mailbox's return paths is applied to the
// sent copy it names; one applied already is a replay and changes nothing.
func (b *inbound) store(ctx context.Context, mailbox string, rt route, env smtpin.Envelope, rcpts []string, c *copySource, res trust.Result, junk string) error {
	d := b.d
	folder := protocol.FolderInbox
	if junk != "" {
		folder = protocol.FolderJunk
	}
	p, err := c.parse(d, mailbox, folder)
	if err != nil {
		d.log.Error("parsing inbound message failed", "mailbox", mailbox, "err", err)
		return errTemp
	}
	if c.parsed == nil {
		defer p.Discard() // the spills not stored
	}
	rep := reportOf(p) // before a Message-ID is made up for it
	if rep != nil && d.dsn != nil && strings.HasPrefix(rt.Tag, bounce.TagPrefix) {
		done, replay := d.dsn.begin(mailbox, rt.Tag, *rep)
		defer done()
		if replay {
			d.metrics.received.WithLabelValues("duplicate").Inc()
			d.log.Info("bounce report already applied: not stored again", "mailbox", mailbox, "from", env.MailFrom, "remote", remoteString(env))
			return nil
		}
	} else {
		rep = nil
	}
	m := p.Msg // a copy per mailbox
	m.MessageID = cmp.Or(m.MessageID, c.messageID)
	m.To = append([]string(nil), p.Msg.To...)
	m.DeliveredTo = rcpts[0]
	m.Tag = rt.Tag
	m.ReceivedAt = d.now().UTC()
	if env.RemoteIP != nil {
		m.ReceivedFromIP = env.RemoteIP.String()
	}
	// From the envelope only: a Return-Path header in the message is the
	// sender's text, and an automatic reply goes where this says.
	m.ReturnPath = store.ReturnPathOf(env.MailFrom)
	m.SizeBytes = c.Size()
	m.SPF, m.DKIM, m.DMARC, m.SubmittedBy = res.SPF, res.DKIM, res.DMARC, res.SubmittedBy
	m.DNSBL = env.Screen.Listed
	m.Labels = slices.Clone(p.Msg.Labels)
	if d.tlsReportLabel(c.head) != "" {
		m.Labels = append(m.Labels, tlsReportLabel)
	}
	patterns, _ := d.trustedSenders(mailbox)
	m.Trusted = string(trust.Trusted(res, patterns))
	judged(mailbox)
	if p.DSN != nil {
		m.IsDSN = true
		m.DSNFor = p.DSN.OriginalMessageID
	}
	m.Junk = junk
	key, err := deliveryKey(c.client(), env.MailFrom, rcpts, &m, p.Msg.MessageID == "")
	if err != nil {
		d.log.Error("reading inbound message failed", "mailbox", mailbox, "err", err)
		return errTemp
	}
	id, dup, err := b.storeCopy(key, mailbox, folder, &m, p, c)
	if err != nil {
		d.log.Error("storing inbound message failed", "mailbox", mailbox, "err", err)
		d.metrics.received.WithLabelValues("failed").Inc()
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			return errStorage
		}
		return errTemp
	}
	if dup {
		d.metrics.received.WithLabelValues("duplicate").Inc()
		d.log.Info("repeated delivery stored once", "mailbox", mailbox, "id", id)
		return nil
	}
	// A report that came back to one of our return paths is about our
	// message whatever else it is: the tag proves it.
	if rep != nil {
		d.dsn.apply(mailbox, rt.Tag, *rep)
	}
	if junk != "" {
		d.metrics.received.WithLabelValues("junk").Inc()
		d.log.Info("message stored in junk", "mailbox", mailbox, "id", id, "from", env.MailFrom, "reason", junk,
			"size", m.SizeBytes, "session", env.Session, "remote", remoteString(env))
		return nil
	}
	d.metrics.received.WithLabelValues("stored").Inc()
	d.log.Info("message stored", "mailbox", mailbox, "id", id, "message_id", m.MessageID, "from", env.MailFrom, "trusted", m.Trusted, "dmarc", m.DMARC.Result,
		"size", m.SizeBytes, "session", env.Session, "remote", remoteString(env))
	b.announce(mailbox, rt.ID, id, &m, p)
	return nil
}

// judged is told of each copy whose verdict is made, before it is stored
// (a variable so that a test can delete the mailbox in between).
var judged = func(mailbox string) {}

// announce tells about a copy stored in the inbox: its size to the
// mailbox's usage, the new-mail event and the on_receive hooks.
func (b *inbound) announce(mailbox, mailboxID, id string, mp *store.Message, p *ingest.Parsed) {
	d, m := b.d, *mp
	// The raw copy and about as much again for the Markdown and the
	// attachments, until the next count from the files.
	d.addUsage(mailbox, 2*m.SizeBytes, 1)
	sum := control.SummaryOf(store.Summary{ID: id, Folder: protocol.FolderInbox, MessageID: m.MessageID, ThreadID: m.ThreadID,
		From: m.From, To: m.To, Subject: m.Subject, Date: m.Date, ReceivedAt: m.ReceivedAt, Trusted: m.Trusted,
		Attachments: len(m.Attachments)})
	d.ctl.Emit(protocol.Event{Type: protocol.EventNewMail, Mailbox: mailbox, Folder: protocol.FolderInbox, ID: id, Message: &sum}, "")
	dkim := make([]string, 0, len(m.DKIM))
	for _, r := range m.DKIM {
		dkim = append(dkim, trust.Summary(r))
	}
	f := hooks.Facts{Event: protocol.EventOnReceive, Mailbox: mailbox, ID: id,
		File: d.store.Path(mailbox) + "/" + protocol.FolderInbox + "/" + id + ".md", From: m.From, To: m.To,
		Subject: m.Subject, MessageID: m.MessageID, ThreadID: m.ThreadID, Trusted: protocol.Verdict(m.Trusted),
		DKIM: strings.Join(dkim, ","), SPF: trust.Summary(m.SPF), DMARC: trust.Summary(m.DMARC),
		AutoSubmitted: m.AutoSubmitted, ListID: m.ListID}
	d.fireHooks(protocol.EventOnReceive, mailbox, mailboxID, f, func() []byte { return store.Render(&m, p.Body) })
}

// withHeader is hdr followed by raw. When the server left room before raw
// (smtpin's Headroom), hdr is written there and the message is not copied:
// a 25 MB message would otherwise be held twice.
func withHeader(hdr string, headroom, raw []byte) []byte {
	h := len(headroom)
	if len(hdr) <= h && cap(headroom) >= h+len(raw) && (len(raw) == 0 || &headroom[:h+1][h] == &raw[0]) {
		copy(headroom[h-len(hdr):], hdr)
		return headroom[h-len(hdr) : h+len(raw)]
	}
	return append([]byte(hdr), raw...)
}

// deliveryKey identifies one delivery to one mailbox: the envelope, the
// bytes the client handed in below our own trace headers, and what we
// concluded about them. Only a repeat of the very same delivery (a client
// retrying after a lost reply) has the same key; a Message-ID alone proves
// nothing, since any sender can reuse another message's, and the same
// bytes sent to another address of the mailbox (a bounce to its return
// path after a forged copy to its plain address) are another delivery.
func deliveryKey(client io.Reader, mailFrom string, rcpts []string, m *store.Message, unique bool) (store.DeliveryKey, error) {
	h := sha256.New()
	if unique {
		// A message without a Message-ID: the same bytes sent twice (a
		// script's alert, say) cannot be told from a sender's retry, so
		// the key is this delivery's alone and nothing is taken for a
		// repeat. A retry after a lost 250 is then stored twice: a
		// duplicate, never a loss.
		var nonce [16]byte
		rand.Read(nonce[:])
		h.Write(nonce[:])
	}
	to := make([]string, len(rcpts))
	for i, r := range rcpts {
		to[i] = strings.ToLower(r)
	}
	slices.Sort(to) // a retry may list the recipients in another order
	verdict := []string{mailFrom, strings.Join(to, ","), string(m.Trusted), m.SPF.Result, m.SPF.Domain, m.DMARC.Result, m.DMARC.Domain}
	for _, r := range m.DKIM {
		verdict = append(verdict, r.Result, r.Domain)
	}
	for _, v := range verdict {
		fmt.Fprintf(h, "%d:%s,", len(v), v)
	}
	var k store.DeliveryKey
	if _, err := io.Copy(h, client); err != nil {
		return k, err
	}
	h.Sum(k[:0])
	return k, nil
}

func newMessageID(host string) string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b) + "@" + host
}

// smtpService runs the SMTP listeners, the optional LMTP listeners over TCP
// and the optional LMTP socket.
type smtpService struct {
	d     *Daemon
	srv   *smtpin.Server
	lns   []net.Listener
	wg    sync.WaitGroup
	addrs []string
	certs *certs.Holder // nil without smtp.tls_cert
}

func (d *Daemon) newInbound() *inbound {
	return &inbound{d: d, checker: &trust.Checker{Resolver: d.lookups}}
}

func (d *Daemon) newSMTPService() (*smtpService, error) {
	cfg := d.cfg()
	var tlsCfg *tls.Config
	var holder *certs.Holder
	if cfg.SMTP.TLSCert != "" {
		// A renewed pair is in use from the next handshake (certs.Holder).
		h, err := certs.NewHolder(cfg.SMTP.TLSCert, cfg.SMTP.TLSKey, d.log.With("part", "tls"), d.now)
		if err != nil {
			return nil, fmt.Errorf("loading the STARTTLS certificate: %w", err)
		}
		holder = h
		tlsCfg = &tls.Config{GetCertificate: h.GetCertificate, MinVersion: tls.VersionTLS12}
	}
	s := cfg.SMTP
	b := d.inbound
	var xfwd []uint32
	for _, u := range s.LMTPXForwardUsers {
		if uid, _, err := registry.ResolveUser(u); err == nil {
			xfwd = append(xfwd, uid)
		} else if s.LMTPSocket != "" {
			d.log.Info("smtp.lmtp_xforward_users: no such user, skipped", "user", u)
		}
	}
	screener, err := d.newScreener(cfg)
	if err != nil {
		return nil, err
	}
	srv := smtpin.NewServer(smtpin.Config{Hostname: cfg.Hostname, TLS: tlsCfg, Logger: d.log.With("part", "smtp"), XForwardUIDs: xfwd, Summarizer: &d.logSum,
		LMTPAllowFrom: cfg.LMTP.AllowPrefixes(), Limits: smtpin.LimitsFrom(s), Screener: screener, PregreetWait: s.PregreetWait.Duration}, b)
	return &smtpService{d: d, srv: srv, certs: holder}, nil
}

// servedCertificate is the certificate the next STARTTLS handshake gets
// (doctor compares it with the file); nil without TLS.
func (d *Daemon) servedCertificate(context.Context) (*x509.Certificate, error) {
	if d.smtp == nil || d.smtp.certs == nil {
		return nil, nil
	}
	c, err := d.smtp.certs.GetCertificate(nil)
	if err != nil {
		return nil, err
	}
	return c.Leaf, nil
}

func (s *smtpService) Start(context.Context) error {
	cfg := s.d.cfg()
	lns, skipped, err := smtpin.Listen(context.Background(), cfg.SMTP.Listen)
	if err != nil {
		return err
	}
	if len(skipped) > 0 {
		s.d.log.Warn("SMTP listeners skipped: this host has no IPv6", "addrs", skipped)
	}
	for _, ln := range lns {
		s.serve(ln, ln.Addr().String(), s.srv.ServeSMTP)
	}
	if len(cfg.LMTP.ListenTCP) > 0 {
		lmtp, skipped, err := smtpin.ListenLMTP(context.Background(), cfg.LMTP.ListenTCP)
		if err != nil {
			s.closeAll()
			return err
		}
		if len(skipped) > 0 {
			s.d.log.Warn("LMTP listeners skipped: this host has no IPv6", "addrs", skipped)
		}
		for _, ln := range lmtp {
			s.serve(ln, "lmtp:"+ln.Addr().String(), s.srv.ServeLMTP)
		}
		s.d.log.Info("LMTP over TCP open to the front MTAs", "allow_from", cfg.LMTP.AllowFrom)
	}
	if path := cfg.SMTP.LMTPSocket; path != "" {
		os.Remove(path)
		// Whoever can reach the socket can hand in mail for local domains, as on port 25.
		ln, err := safeio.ListenSocket(path, 0o666)
		if err != nil {
			s.closeAll()
			return fmt.Errorf("LMTP socket %s: %w", path, err)
		}
		s.serve(ln, "lmtp:"+path, s.srv.ServeLMTP)
	}
	s.d.log.Info("inbound listeners up", "addrs", s.addrs)
	return nil
}

// serve keeps ln, named addr in the listener list, and serves it with f.
func (s *smtpService) serve(ln net.Listener, addr string, f func(net.Listener) error) {
	s.lns = append(s.lns, ln)
	s.addrs = append(s.addrs, addr)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := f(ln); err != nil {
			s.d.log.Error("inbound listener stopped", "err", err)
		}
	}()
}

func (s *smtpService) closeAll() {
	for _, ln := range s.lns {
		ln.Close()
	}
}

func (s *smtpService) Stop(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	s.closeAll()
	s.wg.Wait()
	return err
}

// SMTPAddrs lists the bound inbound listener addresses (after Run started them).
func (d *Daemon) SMTPAddrs() []string {
	if d.smtp == nil {
		return nil
	}
	return d.smtp.addrs
}

// remoteString is the client a message came from, for the log: its address,
// "local" for the daemon's own submissions and LMTP without XFORWARD.
func remoteString(env smtpin.Envelope) string {
	if env.RemoteIP == nil {
		return "local"
	}
	return env.RemoteIP.String()
}
