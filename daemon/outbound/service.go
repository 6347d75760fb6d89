package outbound

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// SentStore is what the send pipeline needs of the mailbox store; *store.Store
// satisfies it.
type SentStore interface {
	Deliver(mailbox, folder string, m *store.Message, body string, raw []byte, atts []store.AttachmentData) (id string, dup bool, err error)
	Update(mailbox, folder, id string, fn func(*store.Message) error) error
	Get(mailbox, folder, id string) (*store.Message, string, error)
	FindByMessageID(mailbox, folder, messageID string) (id string, ok bool)
}

// Service is the whole send pipeline behind the `send` verb. It is also the
// queue's Notifier: pass it to OpenQueue and then set Queue.
type Service struct {
	Domain           func() string
	Keys             func() []*Key
	Store            SentStore
	Queue            *Queue
	Limiter          *RateLimiter
	Clock            func() time.Time
	FirstAttemptWait time.Duration // default 10s
	Logger           *slog.Logger
	// OnUpdated follows every change of a sent message's delivery state,
	// after the sent copy has been updated (for watch events).
	OnUpdated func(mailbox, sentID string, res protocol.SendResult)
	// OnSettled follows the update that made every recipient final (for
	// after_send hooks).
	OnSettled func(mailbox, sentID string, res protocol.SendResult)
	// CurrentID returns the identity of the mailbox named name now ("" when
	// there is none). An item whose mailbox has since been deleted (and
	// perhaps created again by someone else) changes no sent copy and
	// reaches no callback. Nil: every item is current.
	CurrentID func(name string) string
	// ReturnPath, when set, gives a sent message its envelope sender from
	// its From address, its mailbox's identity and its sent id (a bounce
	// address only this daemon can make).
	ReturnPath func(from, mailboxID, sentID string) string

	mu       sync.Mutex
	inflight map[string]chan struct{} // idempotency keys being sent
}

// SendRequest is one send. FromAddress and FromName come from the mailbox the
// daemon has checked the caller owns.
type SendRequest struct {
	Mailbox, FromAddress, FromName string
	// MailboxID is the identity of the mailbox: the queue item and the
	// idempotency record are bound to it.
	MailboxID string
	Policy    config.SendPolicy
	Args      protocol.SendArgs
	Parent    *store.Message
}

// DSNRecipient is one recipient reported by a delivery status notification.
type DSNRecipient struct {
	Address    string
	Action     string // failed, delayed, delivered, relayed, expanded
	Status     string // e.g. "5.1.1"
	Diagnostic string
}

// maxWait caps how long a caller may ask to wait for the first attempt.
const maxWait = 2 * time.Minute

func (s *Service) now() time.Time {
	if s.Clock != nil {
		return s.Clock()
	}
	return time.Now()
}

func (s *Service) log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

// QueueID is the queue id of a sent message: sent ids are unique per mailbox,
// and sent ids never contain a dot.
func QueueID(mailbox, sentID string) string { return mailbox + "." + sentID }

// Send composes, checks, signs, stores and queues a message, then waits a
// bounded time for the first delivery attempt.
func (s *Service) Send(ctx context.Context, req SendRequest) (protocol.SendResult, error) {
	a := req.Args
	pol := req.Policy
	dry := a.DryRun
	if !dry && pol.DryRunOnly != nil && *pol.DryRunOnly {
		return protocol.SendResult{}, protocol.Errorf(protocol.CodePolicyBlocked, "this mailbox may only dry-run (send.dry_run_only): retry with dry_run to validate")
	}
	if a.IdempotencyKey != "" && !dry {
		if len(a.IdempotencyKey) > 200 || strings.ContainsAny(a.IdempotencyKey, "\r\n\x00") {
			return protocol.SendResult{}, protocol.Errorf(protocol.CodeInvalidInput, "idempotency_key must be at most 200 characters on one line")
		}
		release, rec, err := s.claim(ctx, idemOwner(req), a.IdempotencyKey)
		if err != nil {
			return protocol.SendResult{}, err
		}
		defer release()
		if rec != nil {
			res, err := s.Status(req.Mailbox, rec.SentID)
			if err != nil {
				return protocol.SendResult{}, err
			}
			res.Duplicate = true
			return res, nil
		}
	}
	domain := s.Domain()
	now := s.now()
	c, err := Compose(ComposeInput{FromName: req.FromName, FromAddress: req.FromAddress, Domain: domain, Args: a, Parent: req.Parent, Now: now})
	if err != nil {
		return protocol.SendResult{}, err
	}
	var keys []*Key
	if s.Keys != nil {
		keys = s.Keys()
	}
	signed, err := Sign(c.Raw, domain, keys)
	if err != nil {
		return protocol.SendResult{}, fmt.Errorf("signing: %w", err)
	}
	if dry {
		on := true
		pol.Enabled = &on // a dry run is allowed even when sending is off
	}
	if err := CheckPolicy(pol, c, c.AttachmentBytes, len(signed)); err != nil {
		return protocol.SendResult{}, err
	}
	res := protocol.SendResult{MessageID: c.MessageID, Envelope: c.Envelope, SizeBytes: len(signed)}
	if dry {
		res.Status = "dry_run"
		for _, r := range c.Envelope.RcptTo {
			res.Recipients = append(res.Recipients, protocol.RecipientStatus{Address: r, Status: StatusPending})
		}
		return res, nil
	}
	if s.Limiter != nil {
		if err := s.Limiter.Allow(req.Mailbox, pol, 1); err != nil {
			return protocol.SendResult{}, err
		}
	}
	held := pol.Hold != nil && *pol.Hold
	var rcpts []protocol.RecipientStatus
	for _, r := range c.Envelope.RcptTo {
		st := StatusPending
		if held {
			st = StatusHeld
		}
		rcpts = append(rcpts, protocol.RecipientStatus{Address: r, Status: st, UpdatedAt: now})
	}
	m := &store.Message{
		MessageID: c.MessageID, From: c.From, To: c.To, Cc: c.Cc, Bcc: c.Bcc, ReplyTo: c.ReplyTo,
		Subject: c.Subject, Date: now.UTC(), ReceivedAt: now.UTC(), SizeBytes: int64(len(signed)),
		InReplyTo: c.InReplyTo, References: c.References, AutoSubmitted: c.AutoSubmitted,
		Trusted: "none", Mailbox: req.Mailbox, Read: true, Outbound: true,
		DeliveryStatus: aggregate(rcpts), DeliveryDetails: toStoreDetails(rcpts),
	}
	m.ThreadID = threadID(c.MessageID, c.References, c.InReplyTo)
	sentID, _, err := s.Store.Deliver(req.Mailbox, protocol.FolderSent, m, c.Markdown, signed, c.Attachments)
	if err != nil {
		return protocol.SendResult{}, fmt.Errorf("writing the sent copy: %w", err)
	}
	// Remember the key before queueing: a crash after this point makes a
	// retry answer with this message instead of sending a second one.
	if a.IdempotencyKey != "" {
		if err := s.remember(idemOwner(req), a.IdempotencyKey, idemRecord{SentID: sentID, MessageID: c.MessageID, Created: now}); err != nil {
			s.log().Error("cannot record idempotency key", "mailbox", req.Mailbox, "id", sentID, "err", err)
		}
	}
	mailFrom := c.Envelope.MailFrom
	if s.ReturnPath != nil {
		mailFrom = s.ReturnPath(mailFrom, req.MailboxID, sentID)
	}
	it := &Item{ID: QueueID(req.Mailbox, sentID), Mailbox: req.Mailbox, MailboxID: req.MailboxID, SentID: sentID, MessageID: c.MessageID,
		MailFrom: mailFrom, Recipients: rcpts, Created: now, NextAttempt: now, Held: held, Data: signed}
	if err := s.Queue.Enqueue(it); err != nil {
		s.Store.Update(req.Mailbox, protocol.FolderSent, sentID, func(m *store.Message) error {
			m.DeliveryStatus = StatusFailed
			for i := range m.DeliveryDetails {
				m.DeliveryDetails[i].Status, m.DeliveryDetails[i].Detail = StatusFailed, "not queued: "+err.Error()
			}
			return nil
		})
		if a.IdempotencyKey != "" {
			os.Remove(s.idemPath(idemOwner(req), a.IdempotencyKey))
		}
		return protocol.SendResult{}, fmt.Errorf("queueing: %w", err)
	}
	s.log().Info("message queued", "mailbox", req.Mailbox, "id", sentID, "message_id", c.MessageID, "recipients", len(rcpts), "size", len(signed), "held", held)
	wait := s.FirstAttemptWait
	if wait <= 0 {
		wait = 10 * time.Second
	}
	if a.WaitMS > 0 {
		wait = min(time.Duration(a.WaitMS)*time.Millisecond, maxWait)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	got, err := s.Queue.WaitFirstAttempt(wctx, it.ID)
	if err != nil {
		return protocol.SendResult{}, err
	}
	return resultOf(got), nil
}

// Status reports the state of an earlier send from the queue while it is
// there, then from the sent copy (which also records later bounces).
func (s *Service) Status(mailbox, id string) (protocol.SendResult, error) {
	it, qerr := s.Queue.Get(QueueID(mailbox, id))
	if qerr == nil && !s.current(it) {
		qerr = notFound(it.ID) // an earlier mailbox's item under the same id
	}
	if qerr == nil && !it.Settled() {
		return resultOf(it), nil
	}
	m, _, err := s.Store.Get(mailbox, protocol.FolderSent, id)
	if err != nil || !m.Outbound {
		if qerr == nil {
			return resultOf(it), nil
		}
		return protocol.SendResult{}, protocol.Errorf(protocol.CodeNotFound, "no sent message %s in mailbox %s", id, mailbox)
	}
	res := protocol.SendResult{ID: id, MessageID: m.MessageID, SizeBytes: int(m.SizeBytes), Status: resultStatus(m.DeliveryStatus)}
	if a, err := parseAddress("from", m.From); err == nil {
		res.Envelope.MailFrom = a.Address
	}
	for _, d := range m.DeliveryDetails {
		res.Envelope.RcptTo = append(res.Envelope.RcptTo, d.Address)
		res.Recipients = append(res.Recipients, fromStoreDetail(d))
	}
	return res, nil
}

// current reports whether it belongs to the mailbox of its name as it is now.
func (s *Service) current(it *Item) bool {
	return s.CurrentID == nil || it.MailboxID == "" || s.CurrentID(it.Mailbox) == it.MailboxID
}

// orphaned reports whether it belongs to a mailbox deleted since it was
// queued: its outcome then goes to the log only.
func (s *Service) orphaned(it *Item) bool {
	if s.current(it) {
		return false
	}
	s.log().Info("queue item of a deleted mailbox: outcome not recorded", "id", it.ID, "recipients", it.Recipients)
	return true
}

// Updated implements Notifier: it brings the sent copy up to date.
func (s *Service) Updated(it *Item) {
	if s.orphaned(it) {
		return
	}
	now := s.now()
	err := s.Store.Update(it.Mailbox, protocol.FolderSent, it.SentID, func(m *store.Message) error {
		prev := map[string]store.RecipientStatus{}
		for _, d := range m.DeliveryDetails {
			prev[strings.ToLower(d.Address)] = d
		}
		details := toStoreDetails(it.Recipients)
		for i, d := range details {
			// A bounce that arrived meanwhile outranks "delivered".
			if p, ok := prev[strings.ToLower(d.Address)]; ok && p.Status == StatusBounced {
				details[i] = p
			}
		}
		m.DeliveryDetails = details
		m.DeliveryStatus = aggregate(fromStoreDetails(details))
		if m.DeliveryStatus == StatusDelivered && m.DeliveredAt == nil {
			t := now.UTC()
			m.DeliveredAt = &t
		}
		return nil
	})
	if err != nil {
		s.log().Error("cannot update the sent copy", "mailbox", it.Mailbox, "id", it.SentID, "err", err)
	}
	if s.OnUpdated != nil {
		s.OnUpdated(it.Mailbox, it.SentID, resultOf(it))
	}
}

// Settled implements Notifier.
func (s *Service) Settled(it *Item) {
	if s.OnSettled != nil && !s.orphaned(it) {
		s.OnSettled(it.Mailbox, it.SentID, resultOf(it))
	}
}

// ApplyDSN records a bounce that arrived after delivery: each recipient the
// report marks failed becomes "bounced" with the reason in the sent copy.
// authentic must confirm the report came back to the sent message it
// names (its return path); otherwise nothing changes. It reports whether
// the report was applied.
func (s *Service) ApplyDSN(mailbox string, originalMessageID string, recipients []DSNRecipient, authentic func(sentID string) bool) bool {
	mid := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(originalMessageID), "<"), ">")
	id, ok := s.Store.FindByMessageID(mailbox, protocol.FolderSent, mid)
	if !ok {
		if id, ok = s.Store.FindByMessageID(mailbox, protocol.FolderSent, "<"+mid+">"); !ok {
			s.log().Info("DSN for an unknown sent message", "mailbox", mailbox, "message_id", mid)
			return false
		}
	}
	if authentic == nil || !authentic(id) {
		s.log().Info("DSN not sent to the message's return path: kept as ordinary mail", "mailbox", mailbox, "id", id)
		return false
	}
	now := s.now().UTC()
	var changed bool
	err := s.Store.Update(mailbox, protocol.FolderSent, id, func(m *store.Message) error {
		for _, r := range recipients {
			if !strings.EqualFold(r.Action, "failed") {
				continue
			}
			for i := range m.DeliveryDetails {
				d := &m.DeliveryDetails[i]
				if !strings.EqualFold(d.Address, r.Address) {
					continue
				}
				d.Status = StatusBounced
				d.Detail = strings.TrimSpace("bounced: " + r.Status + " " + r.Diagnostic)
				t := now
				d.UpdatedAt = &t
				d.NextAttempt = nil
				changed = true
			}
		}
		m.DeliveryStatus = aggregate(fromStoreDetails(m.DeliveryDetails))
		return nil
	})
	if err != nil {
		s.log().Error("cannot record bounce", "mailbox", mailbox, "id", id, "err", err)
		return false
	}
	if changed && s.OnUpdated != nil {
		if res, err := s.Status(mailbox, id); err == nil {
			s.OnUpdated(mailbox, id, res)
		}
	}
	return true
}

// aggregate is the message-level status of its recipients.
func aggregate(rs []protocol.RecipientStatus) string {
	var held, pending, deferred, delivered, failed int
	for _, r := range rs {
		switch r.Status {
		case StatusHeld:
			held++
		case StatusDeferred:
			deferred++
		case StatusDelivered:
			delivered++
		case StatusFailed, StatusBounced:
			failed++
		default:
			pending++
		}
	}
	switch {
	case held > 0:
		return StatusHeld
	case deferred > 0:
		return StatusDeferred
	case pending > 0:
		return StatusPending
	case failed == 0:
		return StatusDelivered
	case delivered == 0:
		return StatusFailed
	default:
		return "partial"
	}
}

func resultStatus(agg string) string {
	if agg == StatusPending || agg == "" {
		return "queued"
	}
	return agg
}

func resultOf(it *Item) protocol.SendResult {
	res := protocol.SendResult{ID: it.SentID, MessageID: it.MessageID, Envelope: protocol.Envelope{MailFrom: it.MailFrom},
		SizeBytes: int(it.Size), Recipients: append([]protocol.RecipientStatus(nil), it.Recipients...)}
	for _, r := range it.Recipients {
		res.Envelope.RcptTo = append(res.Envelope.RcptTo, r.Address)
	}
	res.Status = resultStatus(aggregate(it.Recipients))
	return res
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func toStoreDetails(rs []protocol.RecipientStatus) []store.RecipientStatus {
	out := make([]store.RecipientStatus, 0, len(rs))
	for _, r := range rs {
		out = append(out, store.RecipientStatus{Address: r.Address, Status: r.Status, Detail: r.Detail, Code: r.Code,
			Attempts: r.Attempts, NextAttempt: timePtr(r.NextAttempt), UpdatedAt: timePtr(r.UpdatedAt), TLS: r.TLS})
	}
	return out
}

func fromStoreDetail(d store.RecipientStatus) protocol.RecipientStatus {
	r := protocol.RecipientStatus{Address: d.Address, Status: d.Status, Detail: d.Detail, Code: d.Code, Attempts: d.Attempts, TLS: d.TLS}
	if d.NextAttempt != nil {
		r.NextAttempt = *d.NextAttempt
	}
	if d.UpdatedAt != nil {
		r.UpdatedAt = *d.UpdatedAt
	}
	return r
}

func fromStoreDetails(ds []store.RecipientStatus) []protocol.RecipientStatus {
	var out []protocol.RecipientStatus
	for _, d := range ds {
		out = append(out, fromStoreDetail(d))
	}
	return out
}

// threadID matches the inbound side's derivation (daemon/ingest.ThreadID):
// 16 hex characters of SHA-256 over the thread's root Message-ID.
func threadID(messageID string, refs []string, inReplyTo string) string {
	root := messageID
	if len(refs) > 0 && refs[0] != "" {
		root = refs[0]
	} else if inReplyTo != "" {
		root = inReplyTo
	}
	sum := sha256.Sum256([]byte(root))
	return hex.EncodeToString(sum[:])[:16]
}

// idemOwner is what an idempotency key is scoped to: the mailbox's
// identity, so that a mailbox created later under the same name never
// answers with an earlier owner's message.
func idemOwner(req SendRequest) string {
	if req.MailboxID != "" {
		return "id:" + req.MailboxID
	}
	return req.Mailbox
}

// idemRecord remembers which message an idempotency key produced.
type idemRecord struct {
	SentID    string    `json:"sent_id"`
	MessageID string    `json:"message_id"`
	Created   time.Time `json:"created"`
}

func (s *Service) idemPath(mailbox, key string) string {
	sum := sha256.Sum256([]byte(mailbox + "\x00" + key))
	return filepath.Join(s.Queue.Dir(), "idempotency", hex.EncodeToString(sum[:])+".json")
}

// claim serializes sends with the same key: a concurrent retry waits for the
// first call to finish and then sees its record.
func (s *Service) claim(ctx context.Context, mailbox, key string) (release func(), rec *idemRecord, err error) {
	path := s.idemPath(mailbox, key)
	s.mu.Lock()
	for {
		ch, busy := s.inflight[path]
		if !busy {
			break
		}
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, nil, protocol.Errorf(protocol.CodeTimeout, "an earlier send with this idempotency key is still running")
		}
		s.mu.Lock()
	}
	data, err := os.ReadFile(path)
	if err == nil {
		var r idemRecord
		if json.Unmarshal(data, &r) == nil && r.SentID != "" {
			s.mu.Unlock()
			return func() {}, &r, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		s.mu.Unlock()
		return nil, nil, fmt.Errorf("reading idempotency record: %w", err)
	}
	if s.inflight == nil {
		s.inflight = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	s.inflight[path] = ch
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.inflight, path)
		close(ch)
		s.mu.Unlock()
	}, nil, nil
}

func (s *Service) remember(mailbox, key string, rec idemRecord) error {
	path := s.idemPath(mailbox, key)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, data, 0o600)
}
