package outbound

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// Recorder keeps the sent copies in step with the queue: it is the queue's
// Notifier, and needs nothing of the queue or of the Service.
type Recorder struct {
	Store  SentStore
	Clock  func() time.Time
	Logger *slog.Logger
	// OnUpdated follows every change of a sent message's delivery state,
	// after the sent copy has been updated (for watch events), with the
	// identity of the sending mailbox ("": the mailbox of that name now).
	OnUpdated func(mailbox, mailboxID, sentID string, res protocol.SendResult)
	// OnSettled follows the update that made every recipient final (for
	// after_send hooks), with the identity of the sending mailbox.
	OnSettled func(mailbox, mailboxID, sentID string, res protocol.SendResult)
	// OnDelayed warns the sender that the recipients listed are not
	// delivered yet and are retried until the time given (queue.DelayWarner),
	// with the identity of the sending mailbox. Nil: the queue makes no
	// warnings.
	OnDelayed func(mailbox, mailboxID, sentID, messageID string, waiting []protocol.RecipientStatus, until time.Time) error
	// CurrentID returns the identity of the mailbox named name now ("" when
	// there is none). An item whose mailbox has since been deleted (and
	// perhaps created again by someone else), or that carries no mailbox
	// identity at all (queued before items recorded one, so nothing proves
	// whose it is), changes no sent copy and reaches no callback. Nil:
	// every item is current.
	CurrentID func(name string) string
	// SentCopyDelay is how long the sent copy of a new item may wait to be
	// written (default 1s): the first attempt usually ends within it, and
	// the copy is then written once, with the outcome. Reads through the
	// store see it meanwhile.
	SentCopyDelay time.Duration
}

// DSNRecipient is one recipient reported by a delivery status notification.
type DSNRecipient struct {
	Address    string
	Action     string // failed, delayed, delivered, relayed, expanded
	Status     string // e.g. "5.1.1"
	Diagnostic string
}

// Report is a delivery status notification about a sent message.
type Report struct {
	// MessageID is the report's own Message-ID as its sender set it ("" for
	// none); OriginalMessageID the sent message's it reports on.
	MessageID, OriginalMessageID string
	Recipients                   []DSNRecipient
}

// Key identifies what a report says: its own Message-ID, the message it is
// about and each recipient's action, status and diagnostic. Neither the
// envelope nor the path it came by is part of it, so the same report sent
// again from another address, or through another relay, has the same key:
// a sent copy records the keys of the reports applied to it, and one it
// holds is not applied, stored or announced again.
func (r Report) Key() string {
	h := sha256.New()
	field := func(v string) { fmt.Fprintf(h, "%d:%s,", len(v), v) }
	field(r.MessageID)
	field(r.OriginalMessageID)
	for _, rc := range r.Recipients {
		field(strings.ToLower(rc.Address))
		field(strings.ToLower(rc.Action))
		field(rc.Status)
		field(rc.Diagnostic)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func (r *Recorder) now() time.Time {
	if r.Clock != nil {
		return r.Clock()
	}
	return time.Now()
}

func (r *Recorder) log() *slog.Logger { return orDiscard(r.Logger) }

// orDiscard is l, or a logger that drops every line when l is nil.
func orDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// current reports whether it belongs to the mailbox of its name as it is now.
func (r *Recorder) current(it *queue.Item) bool {
	return r.CurrentID == nil || (it.MailboxID != "" && r.CurrentID(it.Mailbox) == it.MailboxID)
}

// dirOf is the identity of the mailbox directory under name now. Taken
// before current's check, it is where a copy that check allows may be
// written (store.CreateUnsyncedIn): a mailbox deleted and made again under
// the name between the check and the write is another directory, and never
// gets the first one's copy. A name with no directory gives an identity no
// mailbox has.
func (r *Recorder) dirOf(name string) string {
	in, err := r.Store.MailboxIdentity(name)
	if err != nil {
		return "none"
	}
	return in
}

// orphaned reports whether it belongs to a mailbox deleted since it was
// queued, or carries no mailbox identity: its outcome then goes to the log
// only, once for each state the queue reports (Updated; Settled and
// Delayed, which follow it, say nothing more).
func (r *Recorder) orphaned(it *queue.Item) bool {
	if r.current(it) {
		return false
	}
	rcpts := make([]string, len(it.Recipients))
	for i, rc := range it.Recipients {
		rcpts[i] = rc.Address + ": " + rc.Status
	}
	r.log().Info("queue item of a deleted mailbox, or without a mailbox identity: outcome not recorded", "id", it.ID, "recipients", strings.Join(rcpts, ", "))
	return true
}

// Queued implements queue.Notifier: it hands the sent copy of a new item,
// from the journal record the queue has just made durable, to the store,
// which writes it within SentCopyDelay, or as soon as it is read or the
// first attempt's state changes it. A failure is logged: the journal still
// holds the copy, and the next Updated or the next start writes it.
func (r *Recorder) Queued(it *queue.Item) {
	if len(it.Copy) == 0 {
		return
	}
	in := r.dirOf(it.Mailbox)
	if r.orphaned(it) {
		return
	}
	c, err := decodeCopy(it.Copy)
	if err == nil {
		applyState(c.Message, it, r.now())
		err = r.Store.CreateDeferredIn(in, it.Mailbox, protocol.FolderSent, it.SentID, c.Message, c.Body, it.Data, c.Attachments, cmp.Or(r.SentCopyDelay, time.Second))
	}
	if err != nil && !errors.Is(err, store.ErrExists) {
		r.log().Error("cannot write the sent copy", "mailbox", it.Mailbox, "id", it.SentID, "err", err)
	}
}

// Updated implements queue.Notifier: it brings the sent copy up to date, or
// writes it from the journal when it is missing (Queued could not write it,
// or its owner removed it). The file is replaced without fsync: the queue's
// journal holds the state until a checkpoint has called Flush.
func (r *Recorder) Updated(it *queue.Item) {
	in := r.dirOf(it.Mailbox)
	if r.orphaned(it) {
		return
	}
	if err := r.update(it, in); err != nil {
		r.log().Error("cannot update the sent copy", "mailbox", it.Mailbox, "id", it.SentID, "err", err)
	}
	if r.OnUpdated != nil {
		r.OnUpdated(it.Mailbox, it.MailboxID, it.SentID, resultOf(it))
	}
}

// update brings the sent copy in the mailbox of directory identity in up
// to date.
func (r *Recorder) update(it *queue.Item, in string) error {
	now := r.now()
	set := func(m *store.Message) error {
		applyState(m, it, now)
		return nil
	}
	err := r.Store.UpdateUnsyncedIn(in, it.Mailbox, protocol.FolderSent, it.SentID, set)
	if !errors.Is(err, store.ErrNotFound) || it.CopySize == 0 {
		return err
	}
	return r.createFromJournal(it, in)
}

// Flush makes the sent copies' updates durable; it is the queue's
// Options.Flush.
func (r *Recorder) Flush() error { return r.Store.Sync() }

// Settled implements queue.Notifier.
func (r *Recorder) Settled(it *queue.Item) {
	if r.OnSettled != nil && r.current(it) {
		r.OnSettled(it.Mailbox, it.MailboxID, it.SentID, resultOf(it))
	}
}

// Delayed implements queue.DelayWarner. An item of a mailbox deleted since
// warns no one, and counts as warned.
func (r *Recorder) Delayed(it *queue.Item, until time.Time) error {
	if r.OnDelayed == nil || !r.current(it) {
		return nil
	}
	var waiting []protocol.RecipientStatus
	for _, rc := range it.Recipients {
		if rc.Status == queue.StatusDeferred {
			waiting = append(waiting, rc)
		}
	}
	return r.OnDelayed(it.Mailbox, it.MailboxID, it.SentID, it.MessageID, waiting, until)
}

// applyDSN marks the recipients a report says failed as bounced in the sent
// copy it names, and records the report's key on the copy. It returns the
// sent id, whether any recipient's state changed and whether the report was
// applied. A report that says what the copy already records (the same
// recipients, the same status and detail) changes no state; the copy is
// written only to record a key it does not hold yet, and not at all when
// it holds it.
func (r *Recorder) applyDSN(mailbox string, rep Report, authentic func(sentID string) bool) (string, bool, bool) {
	id, ok := r.reportedSent(mailbox, rep, authentic)
	if !ok {
		return "", false, false
	}
	now := r.now().UTC()
	key := rep.Key()
	var changed bool
	err := r.Store.Update(mailbox, protocol.FolderSent, id, func(m *store.Message) error {
		for _, rc := range rep.Recipients {
			if !strings.EqualFold(rc.Action, "failed") {
				continue
			}
			detail := strings.TrimSpace("bounced: " + rc.Status + " " + rc.Diagnostic)
			for i := range m.DeliveryDetails {
				d := &m.DeliveryDetails[i]
				if !strings.EqualFold(d.Address, rc.Address) || (d.Status == queue.StatusBounced && d.Detail == detail) {
					continue
				}
				d.Status = queue.StatusBounced
				d.Detail = detail
				t := now
				d.UpdatedAt = &t
				d.NextAttempt = nil
				changed = true
			}
		}
		recorded := slices.Contains(m.BounceReports, key)
		if !changed && recorded {
			return errUnchanged
		}
		if !recorded {
			m.BounceReports = append(m.BounceReports, key)
			if n := len(m.BounceReports); n > store.MaxBounceReports {
				m.BounceReports = m.BounceReports[n-store.MaxBounceReports:]
			}
		}
		m.DeliveryStatus = aggregate(fromStoreDetails(m.DeliveryDetails))
		return nil
	})
	if err != nil && !errors.Is(err, errUnchanged) {
		r.log().Error("cannot record bounce", "mailbox", mailbox, "id", id, "err", err)
		return "", false, false
	}
	return id, changed, true
}

// errUnchanged aborts an update that would write what the file holds.
var errUnchanged = errors.New("nothing to change")

// reportedSent is the sent copy a report names, if the report came back to
// that copy's return path (authentic).
func (r *Recorder) reportedSent(mailbox string, rep Report, authentic func(sentID string) bool) (string, bool) {
	mid := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(rep.OriginalMessageID), "<"), ">")
	id, ok := r.Store.FindByMessageID(mailbox, protocol.FolderSent, mid)
	if !ok {
		if id, ok = r.Store.FindByMessageID(mailbox, protocol.FolderSent, "<"+mid+">"); !ok {
			r.log().Info("DSN for an unknown sent message", "mailbox", mailbox, "message_id", mid)
			return "", false
		}
	}
	if authentic == nil || !authentic(id) {
		r.log().Info("DSN not sent to the message's return path: kept as ordinary mail", "mailbox", mailbox, "id", id)
		return "", false
	}
	return id, true
}

// reportApplied reports whether the sent copy the report names, reached at
// its own return path, records the report already.
func (r *Recorder) reportApplied(mailbox string, rep Report, authentic func(sentID string) bool) bool {
	id, ok := r.reportedSent(mailbox, rep, authentic)
	if !ok {
		return false
	}
	m, err := r.Store.Header(mailbox, protocol.FolderSent, id)
	return err == nil && slices.Contains(m.BounceReports, rep.Key())
}
