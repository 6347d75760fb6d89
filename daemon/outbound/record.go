package outbound

import (
	"cmp"
	"errors"
	"log/slog"
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
	// after the sent copy has been updated (for watch events).
	OnUpdated func(mailbox, sentID string, res protocol.SendResult)
	// OnSettled follows the update that made every recipient final (for
	// after_send hooks).
	OnSettled func(mailbox, sentID string, res protocol.SendResult)
	// OnDelayed warns the sender that the recipients listed are not
	// delivered yet and are retried until the time given (queue.DelayWarner).
	// Nil: the queue makes no warnings.
	OnDelayed func(mailbox, sentID, messageID string, waiting []protocol.RecipientStatus, until time.Time) error
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

// orphaned reports whether it belongs to a mailbox deleted since it was
// queued, or carries no mailbox identity: its outcome then goes to the log
// only.
func (r *Recorder) orphaned(it *queue.Item) bool {
	if r.current(it) {
		return false
	}
	r.log().Info("queue item of a deleted mailbox, or without a mailbox identity: outcome not recorded", "id", it.ID, "recipients", it.Recipients)
	return true
}

// Queued implements queue.Notifier: it hands the sent copy of a new item,
// from the journal record the queue has just made durable, to the store,
// which writes it within SentCopyDelay, or as soon as it is read or the
// first attempt's state changes it. A failure is logged: the journal still
// holds the copy, and the next Updated or the next start writes it.
func (r *Recorder) Queued(it *queue.Item) {
	if len(it.Copy) == 0 || r.orphaned(it) {
		return
	}
	c, err := decodeCopy(it.Copy)
	if err == nil {
		applyState(c.Message, it, r.now())
		err = r.Store.CreateDeferred(it.Mailbox, protocol.FolderSent, it.SentID, c.Message, c.Body, it.Data, c.Attachments, cmp.Or(r.SentCopyDelay, time.Second))
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
	if r.orphaned(it) {
		return
	}
	if err := r.update(it); err != nil {
		r.log().Error("cannot update the sent copy", "mailbox", it.Mailbox, "id", it.SentID, "err", err)
	}
	if r.OnUpdated != nil {
		r.OnUpdated(it.Mailbox, it.SentID, resultOf(it))
	}
}

func (r *Recorder) update(it *queue.Item) error {
	now := r.now()
	set := func(m *store.Message) error {
		applyState(m, it, now)
		return nil
	}
	err := r.Store.UpdateUnsynced(it.Mailbox, protocol.FolderSent, it.SentID, set)
	if !errors.Is(err, store.ErrNotFound) || it.CopySize == 0 {
		return err
	}
	return r.createFromJournal(it)
}

// Flush makes the sent copies' updates durable; it is the queue's
// Options.Flush.
func (r *Recorder) Flush() error { return r.Store.Sync() }

// Settled implements queue.Notifier.
func (r *Recorder) Settled(it *queue.Item) {
	if r.OnSettled != nil && !r.orphaned(it) {
		r.OnSettled(it.Mailbox, it.SentID, resultOf(it))
	}
}

// Delayed implements queue.DelayWarner. An item of a mailbox deleted since
// warns no one, and counts as warned.
func (r *Recorder) Delayed(it *queue.Item, until time.Time) error {
	if r.OnDelayed == nil || r.orphaned(it) {
		return nil
	}
	var waiting []protocol.RecipientStatus
	for _, rc := range it.Recipients {
		if rc.Status == queue.StatusDeferred {
			waiting = append(waiting, rc)
		}
	}
	return r.OnDelayed(it.Mailbox, it.SentID, it.MessageID, waiting, until)
}

// applyDSN marks the recipients a report says failed as bounced in the sent
// copy it names. It returns the sent id, whether anything changed and
// whether the report was applied.
func (r *Recorder) applyDSN(mailbox string, originalMessageID string, recipients []DSNRecipient, authentic func(sentID string) bool) (string, bool, bool) {
	mid := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(originalMessageID), "<"), ">")
	id, ok := r.Store.FindByMessageID(mailbox, protocol.FolderSent, mid)
	if !ok {
		if id, ok = r.Store.FindByMessageID(mailbox, protocol.FolderSent, "<"+mid+">"); !ok {
			r.log().Info("DSN for an unknown sent message", "mailbox", mailbox, "message_id", mid)
			return "", false, false
		}
	}
	if authentic == nil || !authentic(id) {
		r.log().Info("DSN not sent to the message's return path: kept as ordinary mail", "mailbox", mailbox, "id", id)
		return "", false, false
	}
	now := r.now().UTC()
	var changed bool
	err := r.Store.Update(mailbox, protocol.FolderSent, id, func(m *store.Message) error {
		for _, rc := range recipients {
			if !strings.EqualFold(rc.Action, "failed") {
				continue
			}
			for i := range m.DeliveryDetails {
				d := &m.DeliveryDetails[i]
				if !strings.EqualFold(d.Address, rc.Address) {
					continue
				}
				d.Status = queue.StatusBounced
				d.Detail = strings.TrimSpace("bounced: " + rc.Status + " " + rc.Diagnostic)
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
		r.log().Error("cannot record bounce", "mailbox", mailbox, "id", id, "err", err)
		return "", false, false
	}
	return id, changed, true
}
