package outbound

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// The sent copy has one writer, the Recorder, which follows the queue: its
// content travels in the queue's journal, in the same durable record as the
// signed message (queue.Item.Copy). When the queue announces a new item
// (Queued) the Recorder hands the copy to the store, which writes it once,
// with the first attempt's outcome when that comes soon (the usual case);
// when an attempt changes the state (Updated) it updates the copy, writing
// it from the journal if it is missing; and when the queue starts (Restore)
// it writes the copy of an item a crash left without one. The Service only
// queues and waits. The file is written without fsync; the queue forgets an
// item only after a checkpoint has made the sent copies durable.

// sentCopy is the content of a sent copy as the journal keeps it.
type sentCopy struct {
	Message     *store.Message         `json:"message"`
	Body        string                 `json:"body"`
	Attachments []store.AttachmentData `json:"attachments,omitempty"`
}

func encodeCopy(c sentCopy) ([]byte, error) { return json.Marshal(c) }

func decodeCopy(b []byte) (sentCopy, error) {
	var c sentCopy
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("the sent copy in the queue journal: %w", err)
	}
	if c.Message == nil {
		return c, errors.New("the sent copy in the queue journal is empty")
	}
	return c, nil
}

// applyState sets m's delivery status, envelope sender and scheduled time
// from the queue item, so that the copy answers for the message as the
// queue did once the item is gone (StatusRead). A bounce that arrived
// meanwhile outranks "delivered".
func applyState(m *store.Message, it *queue.Item, now time.Time) {
	m.MailFrom = it.MailFrom
	m.SendAt = timePtr(it.SendAt)
	prev := map[string]store.RecipientStatus{}
	for _, d := range m.DeliveryDetails {
		prev[strings.ToLower(d.Address)] = d
	}
	details := toStoreDetails(it.Recipients)
	for i, d := range details {
		if p, ok := prev[strings.ToLower(d.Address)]; ok && p.Status == queue.StatusBounced {
			details[i] = p
		}
	}
	m.DeliveryDetails = details
	m.DeliveryStatus = aggregate(fromStoreDetails(details))
	if m.DeliveryStatus == queue.StatusDelivered && m.DeliveredAt == nil {
		t := now.UTC()
		m.DeliveredAt = &t
	}
}

// createFromJournal writes the sent copy of it, with its current state,
// from what the queue's journal holds, into the mailbox of directory
// identity in (dirOf). It answers store.ErrExists when the copy is already
// there.
func (r *Recorder) createFromJournal(it *queue.Item, in string) error {
	if it.ReadCopy == nil || it.CopySize == 0 {
		return fmt.Errorf("sent copy %s is missing and the queue holds none to write", it.SentID)
	}
	data, err := it.ReadCopy()
	if err != nil {
		return err
	}
	c, err := decodeCopy(data)
	if err != nil {
		return err
	}
	raw, err := it.ReadMessage()
	if err != nil {
		return err
	}
	applyState(c.Message, it, r.now())
	return r.Store.CreateUnsyncedIn(in, it.Mailbox, protocol.FolderSent, it.SentID, c.Message, c.Body, raw, c.Attachments)
}

// Restore implements queue.Restorer: at start, it writes the sent copy of
// a queued item that a crash left without one.
func (r *Recorder) Restore(it *queue.Item) {
	if it.CopySize == 0 {
		return
	}
	in := r.dirOf(it.Mailbox)
	if !r.current(it) || r.Store.Has(it.Mailbox, protocol.FolderSent, it.SentID) {
		return
	}
	if err := r.createFromJournal(it, in); err != nil && !errors.Is(err, store.ErrExists) {
		r.log().Error("cannot write the sent copy of a queued message", "mailbox", it.Mailbox, "id", it.SentID, "err", err)
		return
	}
	r.log().Info("sent copy written from the queue journal", "mailbox", it.Mailbox, "id", it.SentID)
}
