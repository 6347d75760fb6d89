// Package outbound is the send pipeline behind the `send` verb: each step
// decides one thing (compose, sign, policy, sent copy, queue, wait for the
// first attempt) and lives in its own package; this one puts them in order
// and keeps the sent copies in step with the queue.
package outbound

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/outbound/compose"
	"github.com/mailctl/mailctl/daemon/outbound/dkim"
	"github.com/mailctl/mailctl/daemon/outbound/policy"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// SentStore is what the send pipeline needs of the mailbox store; *store.Store
// satisfies it.
type SentStore interface {
	// Reserve holds an id for a sent copy written later with
	// CreateUnsyncedIn (ErrExists if it is there already); Has tells
	// whether it is.
	Reserve(mailbox, folder string, m *store.Message) (id string, release func(), err error)
	// CreateUnsyncedIn writes a sent copy into the mailbox of directory
	// identity in (MailboxIdentity) only, never into another made since
	// under the name.
	CreateUnsyncedIn(in, mailbox, folder, id string, m *store.Message, body string, raw []byte, atts []store.AttachmentData) error
	// CreateDeferredIn is CreateUnsyncedIn within a delay, or earlier
	// when the folder is read; an UpdateUnsynced meanwhile changes what
	// is written.
	CreateDeferredIn(in, mailbox, folder, id string, m *store.Message, body string, raw []byte, atts []store.AttachmentData, within time.Duration) error
	MailboxIdentity(name string) (string, error)
	Has(mailbox, folder, id string) bool
	Update(mailbox, folder, id string, fn func(*store.Message) error) error
	// UpdateUnsynced is Update without fsyncs; Sync makes such updates
	// durable. The queue's journal can redo them until then.
	// UpdateUnsyncedIn changes it in the mailbox of directory identity in
	// only.
	UpdateUnsyncedIn(in, mailbox, folder, id string, fn func(*store.Message) error) error
	Sync() error
	Get(mailbox, folder, id string) (*store.Message, string, error)
	// Header reads a message's frontmatter only, whatever its body.
	Header(mailbox, folder, id string) (*store.Message, error)
	FindByMessageID(mailbox, folder, messageID string) (id string, ok bool)
	// Version is the version of a message's file (a draft's, here): it
	// changes with any edit, and with any rewrite of the file.
	Version(mailbox, folder, id string) (string, error)
	// DraftDigest names a draft's content (store.Draft.Digest): the same
	// in a copy of its files, as a restore writes them.
	DraftDigest(mailbox, folder, id string) (string, error)
}

// HeaderReader reads a message's frontmatter: the store's Header, or one
// whose reads are charged to a caller (store.Charged.Header).
type HeaderReader func(mailbox, folder, id string) (*store.Message, error)

// Service is the whole send pipeline. It is built after the queue and the
// Recorder the queue reports to; nothing is patched in afterwards.
type Service struct {
	Domain           func() string
	Keys             func() []*dkim.Key
	Sent             *Recorder
	Queue            *queue.Queue
	Limiter          *policy.RateLimiter
	FirstAttemptWait time.Duration // default 10s
	Logger           *slog.Logger
	// ReturnPath, when set, gives a sent message its envelope sender from
	// its From address, its mailbox's identity and its sent id (a bounce
	// address only this daemon can make).
	ReturnPath func(from, mailboxID, sentID string) string
	// PendingReturnPath, with ReturnPath, is the envelope sender a dry run
	// reports: the return path with a placeholder for its tag. The tag is
	// made from the sent id, which a message gets only when it is stored
	// (its time, its subject's slug and a suffix against collisions), so
	// a dry run cannot know it.
	PendingReturnPath func(from string) string
	// LegacyReturnPath, when set, is the return path releases before
	// sent copies recorded their envelope gave a message (whose tag named
	// no mailbox); ReturnPath stands in for it when it is not set.
	LegacyReturnPath func(from, mailboxID, sentID string) string
	// KeyWindow is how long an idempotency key is remembered after its send
	// (DefaultKeyWindow when 0); a message still queued keeps its key
	// remembered longer.
	KeyWindow time.Duration
	// Deleted, when set, reports whether the mailbox named mailbox with
	// the identity mailboxID was deleted: the sweep removes its records.
	Deleted func(mailbox, mailboxID string) bool

	mu       sync.Mutex
	inflight map[string]chan struct{} // idempotency records held by a send or the sweep
	answers  answers
	sweep    keySweep
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
	// OwnerUID is the uid of the mailbox's owner: the rate limits count
	// per mailbox name and owner.
	OwnerUID uint32
	// Draft is the draft the message is sent from, as it was read; nil for
	// any other send. Its idempotency record is kept past the window for
	// as long as the draft is in drafts/ as it was sent (DraftSource).
	Draft *DraftSource
}

// DraftSource is a draft as draft.send read it: its id in the mailbox's
// drafts/, the version of its file and the digest of its content
// (store.Draft.Digest), which with the id makes the send's idempotency
// key. The draft leaves drafts/ once its message is queued; one still
// there with that content was sent but not removed (the daemon stopped in
// between, perhaps to be restored on another host), and a retry must
// answer the first send however late it comes, never send it again.
// VersionKey is the key an earlier release made of the same read, from
// the file's version: a record under it answers too.
type DraftSource struct{ ID, Version, Digest, VersionKey string }

// ErrMailboxGone is a send's answer when its mailbox was deleted between
// the caller's access check and the message's queueing: the message is
// dropped, not sent.
var ErrMailboxGone = errors.New("the mailbox was deleted")

// maxWait caps how long a caller may ask to wait for the first attempt.
const maxWait = 2 * time.Minute

func (s *Service) now() time.Time { return s.Sent.now() }

func (s *Service) log() *slog.Logger { return orDiscard(s.Logger) }

// QueueID is the queue id of a sent message: sent ids are unique per mailbox,
// and sent ids never contain a dot.
func QueueID(mailbox, sentID string) string { return mailbox + "." + sentID }

// signedMessage is a composed message with its signatures.
type signedMessage struct {
	*compose.Message
	signed []byte
}

// Send composes, checks, signs, stores and queues a message, then waits a
// bounded time for the first delivery attempt.
func (s *Service) Send(ctx context.Context, req SendRequest) (protocol.SendResult, error) {
	a := req.Args
	if !a.DryRun && req.Policy.DryRunOnly != nil && *req.Policy.DryRunOnly {
		return protocol.SendResult{}, protocol.Errorf(protocol.CodePolicyBlocked, "this mailbox may only dry-run (send.dry_run_only): retry with dry_run to validate")
	}
	if a.IdempotencyKey != "" && !a.DryRun {
		release, earlier, err := s.claim(ctx, req)
		if err != nil {
			return protocol.SendResult{}, err
		}
		if earlier != nil {
			// The key was used before: answer with the earlier message's state.
			res, err := s.Status(req.Mailbox, earlier.SentID)
			if err != nil {
				return protocol.SendResult{}, err
			}
			res.Duplicate = true
			return res, nil
		}
		defer release()
	}
	if err := CheckSendAt(a.SendAt, s.now()); err != nil {
		return protocol.SendResult{}, err
	}
	msg, err := s.build(req)
	if err != nil {
		return protocol.SendResult{}, err
	}
	if err := s.admit(req, msg); err != nil {
		return protocol.SendResult{}, err
	}
	if a.DryRun {
		return s.dryRunResult(msg), nil
	}
	now := s.now()
	it := s.newItem(req, msg, now)
	c := sentCopy{Message: s.sentMessage(req, msg, it.Recipients, now), Body: msg.Markdown, Attachments: msg.Attachments}
	sentID, release, err := s.Sent.Store.Reserve(req.Mailbox, protocol.FolderSent, c.Message)
	if err != nil {
		return protocol.SendResult{}, fmt.Errorf("reserving the sent copy: %w", err)
	}
	defer release()
	it.ID, it.SentID = QueueID(req.Mailbox, sentID), sentID
	if s.ReturnPath != nil {
		it.MailFrom = s.ReturnPath(it.MailFrom, req.MailboxID, sentID)
	}
	if it.Copy, err = encodeCopy(c); err != nil {
		return protocol.SendResult{}, err
	}
	answered := s.answering(it.ID)
	if err := s.Queue.Enqueue(it); err != nil {
		answered(protocol.SendResult{})
		return protocol.SendResult{}, fmt.Errorf("queueing: %w", err)
	}
	if req.MailboxID != "" && !s.Sent.current(it) {
		// The mailbox was deleted (and perhaps created again) since the
		// caller's access check. Its delete dropped what was queued
		// then; this item came after, so it goes the same way.
		if err := s.Queue.DropEventually(it.ID); err != nil {
			s.log().Error("cannot drop a message queued for a deleted mailbox", "item", it.ID, "err", err)
		}
		answered(protocol.SendResult{})
		return protocol.SendResult{}, fmt.Errorf("send from %s: %w", req.Mailbox, ErrMailboxGone)
	}
	s.rememberKey(req, sentID, msg.MessageID, now)
	s.log().Info("message queued", "mailbox", req.Mailbox, "id", sentID, "item", it.ID, "message_id", msg.MessageID, "recipients", len(it.Recipients), "size", len(msg.signed), "held", it.Held)
	res, err := s.waitFirst(ctx, req, it.ID)
	answered(res)
	return res, err
}

// build composes the message and signs it with every active key.
func (s *Service) build(req SendRequest) (*signedMessage, error) {
	domain := s.Domain()
	c, err := compose.Build(compose.Input{FromName: req.FromName, FromAddress: req.FromAddress, Domain: domain, Args: req.Args, Parent: req.Parent, Now: s.now()})
	if err != nil {
		return nil, err
	}
	var keys []*dkim.Key
	if s.Keys != nil {
		keys = s.Keys()
	}
	signed, err := dkim.Sign(c.Raw, domain, keys)
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	c.Raw = nil // the signed bytes are the message from here on
	return &signedMessage{Message: c, signed: signed}, nil
}

// admit applies the mailbox's policy and, for a real send, its rate limits.
// A dry run is checked as if sending were on.
func (s *Service) admit(req SendRequest, msg *signedMessage) error {
	pol := req.Policy
	if req.Args.DryRun {
		on := true
		pol.Enabled = &on
	}
	if err := policy.Check(pol, msg.Envelope.RcptTo, len(msg.Attachments), msg.AttachmentBytes, len(msg.signed)); err != nil {
		return err
	}
	if req.Args.DryRun || s.Limiter == nil {
		return nil
	}
	return s.Limiter.Allow(req.Mailbox, req.OwnerUID, pol, 1)
}

// dryRunResult is what a dry run reports: the message as it would be
// queued, its envelope sender the return path it would go out with.
func (s *Service) dryRunResult(msg *signedMessage) protocol.SendResult {
	res := protocol.SendResult{MessageID: msg.MessageID, Envelope: msg.Envelope, SizeBytes: len(msg.signed), Status: "dry_run"}
	if s.ReturnPath != nil && s.PendingReturnPath != nil {
		res.Envelope.MailFrom = s.PendingReturnPath(res.Envelope.MailFrom)
	}
	for _, r := range msg.Envelope.RcptTo {
		res.Recipients = append(res.Recipients, protocol.RecipientStatus{Address: r, Status: queue.StatusPending})
	}
	return res
}

// newItem is the queue item for msg, without its ids yet.
func (s *Service) newItem(req SendRequest, msg *signedMessage, now time.Time) *queue.Item {
	held := req.Policy.Hold != nil && *req.Policy.Hold
	st := queue.StatusPending
	if held {
		st = queue.StatusHeld
	}
	var rcpts []protocol.RecipientStatus
	for _, r := range msg.Envelope.RcptTo {
		rcpts = append(rcpts, protocol.RecipientStatus{Address: r, Status: st, UpdatedAt: now})
	}
	return &queue.Item{Mailbox: req.Mailbox, MailboxID: req.MailboxID, MessageID: msg.MessageID,
		MailFrom: msg.Envelope.MailFrom, Recipients: rcpts, Created: now, NextAttempt: now, Held: held, Data: msg.signed,
		SendAt: sendAt(req.Args.SendAt, now)}
}

// sentMessage is the sent copy's frontmatter as queued.
func (s *Service) sentMessage(req SendRequest, msg *signedMessage, rcpts []protocol.RecipientStatus, now time.Time) *store.Message {
	return &store.Message{
		MessageID: msg.MessageID, From: msg.From, To: msg.To, Cc: msg.Cc, Bcc: msg.Bcc, ReplyTo: msg.ReplyTo,
		Subject: msg.Subject, Date: now.UTC(), ReceivedAt: now.UTC(), SizeBytes: int64(len(msg.signed)),
		InReplyTo: msg.InReplyTo, References: msg.References, AutoSubmitted: msg.AutoSubmitted,
		Trusted: string(protocol.NoPolicy), Mailbox: req.Mailbox, Read: true, Outbound: true,
		DeliveryStatus: aggregate(rcpts), DeliveryDetails: toStoreDetails(rcpts),
		// The inbound side's derivation, so that replies join the thread;
		// a composed message always has a Message-ID to fall back on.
		ThreadID: store.ThreadID(msg.MessageID, msg.References, msg.InReplyTo, "", time.Time{}, ""),
	}
}

// rememberKey records the send's idempotency key once the message is
// queued: a retry after this answers with this message instead of sending
// a second one. (A crash between the two can send a retry twice; before
// the queue had it, a retry would have been answered with a message that
// was never sent.)
func (s *Service) rememberKey(req SendRequest, sentID, messageID string, now time.Time) {
	if req.Args.IdempotencyKey == "" {
		return
	}
	rec := idemRecord{SentID: sentID, MessageID: messageID, Created: now,
		Mailbox: req.Mailbox, MailboxID: req.MailboxID, Key: req.Args.IdempotencyKey}
	if req.Draft != nil {
		rec.Draft, rec.DraftVersion, rec.DraftDigest = req.Draft.ID, req.Draft.Version, req.Draft.Digest
	}
	if err := s.remember(req, rec); err != nil {
		s.log().Error("cannot record idempotency key", "mailbox", req.Mailbox, "id", sentID, "err", err)
	}
}

// waitFirst waits a bounded time (the caller's wait_ms, capped, or the
// configured default) for the first attempt and answers with the state then.
func (s *Service) waitFirst(ctx context.Context, req SendRequest, id string) (protocol.SendResult, error) {
	wait := s.FirstAttemptWait
	if wait <= 0 {
		wait = 10 * time.Second
	}
	if req.Args.WaitMS > 0 {
		wait = min(time.Duration(req.Args.WaitMS)*time.Millisecond, maxWait)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	got, err := s.Queue.WaitFirstAttempt(wctx, id)
	if err != nil {
		return protocol.SendResult{}, err
	}
	return resultOf(got), nil
}

// Status reports the state of an earlier send from the queue while it is
// there, then from the sent copy (which also records later bounces).
func (s *Service) Status(mailbox, id string) (protocol.SendResult, error) {
	return s.StatusRead(mailbox, id, s.Sent.Store.Header)
}

// StatusRead is Status reading the sent copy's frontmatter (never its
// body) with header.
func (s *Service) StatusRead(mailbox, id string, header HeaderReader) (protocol.SendResult, error) {
	it, err := s.Queue.Get(QueueID(mailbox, id))
	// An earlier mailbox's item under the same id is not this message.
	queued := err == nil && s.Sent.current(it)
	if queued && !it.Settled() {
		return resultOf(it), nil
	}
	m, err := header(mailbox, protocol.FolderSent, id)
	if err != nil || !m.Outbound {
		if queued {
			return resultOf(it), nil
		}
		return protocol.SendResult{}, protocol.Errorf(protocol.CodeNotFound, "no sent message %s in mailbox %s", id, mailbox)
	}
	res := protocol.SendResult{ID: id, MessageID: m.MessageID, SizeBytes: int(m.SizeBytes), Status: resultStatus(m.DeliveryStatus),
		Envelope: protocol.Envelope{MailFrom: m.MailFrom}}
	if m.SendAt != nil {
		res.SendAt = timePtr(*m.SendAt)
	}
	older := m.MailFrom == "" // written before the copy recorded its envelope
	if older {
		res.Envelope.MailFrom = s.olderReturnPath(mailbox, id, m.From)
	}
	for _, d := range m.DeliveryDetails {
		r := FromStoreDetail(d)
		if older && r.Status == queue.StatusDelivered && strings.HasPrefix(r.Detail, queue.DetailCaptured) {
			r.Captured = true // the queue's own words, which older copies kept
		}
		res.Envelope.RcptTo = append(res.Envelope.RcptTo, d.Address)
		res.Recipients = append(res.Recipients, r)
	}
	return res, nil
}

// olderReturnPath is the envelope sender of a sent copy that does not
// record it (written by a release before mail_from): the return path the
// daemon gives every message, made again from the mailbox's identity and
// the sent id; the From address when there is none to make.
func (s *Service) olderReturnPath(mailbox, id, from string) string {
	a, err := compose.ParseAddress("from", from)
	if err != nil {
		return ""
	}
	if s.ReturnPath == nil || s.Sent.CurrentID == nil {
		return a.Address
	}
	mailboxID := s.Sent.CurrentID(mailbox)
	if mailboxID == "" {
		return a.Address
	}
	if s.LegacyReturnPath != nil {
		return s.LegacyReturnPath(a.Address, mailboxID, id)
	}
	return s.ReturnPath(a.Address, mailboxID, id)
}

// ApplyDSN records a bounce that arrived after delivery: each recipient the
// report marks failed becomes "bounced" with the reason in the sent copy.
// authentic must confirm the report came back to the sent message it
// names (its return path); otherwise nothing changes. It reports whether
// the report was applied. Watchers hear of it only when a recipient's state
// changed.
func (s *Service) ApplyDSN(mailbox string, rep Report, authentic func(sentID string) bool) bool {
	id, changed, ok := s.Sent.applyDSN(mailbox, rep, authentic)
	if changed && s.Sent.OnUpdated != nil {
		if res, err := s.Status(mailbox, id); err == nil {
			s.Sent.OnUpdated(mailbox, "", id, res)
		}
	}
	return ok
}

// ReportApplied reports whether rep, reaching the sent message's own return
// path, has been applied to it already (its key is on the sent copy): a
// replay, from whatever sender, that is not to be stored or applied again.
func (s *Service) ReportApplied(mailbox string, rep Report, authentic func(sentID string) bool) bool {
	return s.Sent.reportApplied(mailbox, rep, authentic)
}

// Bounds of send_at: a time up to SendAtSkew in the past (a caller's clock
// a little behind ours) means now; more than SendAtMax ahead is refused.
const (
	SendAtSkew = 5 * time.Minute
	SendAtMax  = 366 * 24 * time.Hour
)

// CheckSendAt refuses a scheduled time too far in the past or the future.
func CheckSendAt(at *time.Time, now time.Time) error {
	if at == nil {
		return nil
	}
	if at.Before(now.Add(-SendAtSkew)) {
		return protocol.Errorf(protocol.CodeInvalidInput, "send_at %s is in the past (now is %s): give a future time, or none to send at once",
			at.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if at.After(now.Add(SendAtMax)) {
		return protocol.Errorf(protocol.CodeInvalidInput, "send_at %s is more than a year ahead: schedule at most a year out", at.UTC().Format(time.RFC3339))
	}
	return nil
}

// sendAt is the queue's send time for a checked send_at: zero (at once)
// when none is given or it is already due.
func sendAt(at *time.Time, now time.Time) time.Time {
	if at == nil || !at.After(now) {
		return time.Time{}
	}
	return at.UTC()
}
