package queue

import (
	"time"

	"github.com/mailctl/mailctl/protocol"
)

// Recipient states kept per recipient of a queued (and sent) message.
const (
	StatusPending   = "pending"
	StatusDeferred  = "deferred"
	StatusDelivered = "delivered"
	StatusFailed    = "failed"
	StatusBounced   = "bounced"
	StatusHeld      = "held"
)

// DetailDropped is the detail of a recipient the operator dropped from the
// queue: a decision, not a delivery failure, so its sender gets no bounce.
const DetailDropped = "dropped from the queue by the operator"

// DetailNotServed is the temporary failure of each recipient of an item
// whose mailbox is not served as the one that queued it (Options.Served):
// nothing was sent.
const DetailNotServed = "not sent: the mailbox that queued it is not served as it was " +
	"(its declaration taken out of config.toml, given another owner, or its owner not a user now); " +
	"it goes out when it is again"

// DetailCaptured starts the detail of a recipient captured by `mailctl
// dev`: the capture mailbox's name follows, quoted, then ", not sent".
const DetailCaptured = "captured in the mailbox "

// Final reports whether a recipient needs no more attempts.
func Final(status string) bool {
	return status == StatusDelivered || status == StatusFailed || status == StatusBounced
}

// Item is one queued message: the signed bytes and the state of each recipient.
type Item struct {
	ID      string `json:"id"`
	Mailbox string `json:"mailbox"`
	// MailboxID is the identity of the mailbox that sent the item: a
	// mailbox created later under the same name is not its owner.
	MailboxID   string                     `json:"mailbox_id,omitempty"`
	SentID      string                     `json:"sent_id"` // id of the sent copy in the mailbox's sent folder
	MessageID   string                     `json:"message_id"`
	MailFrom    string                     `json:"mail_from"`
	Recipients  []protocol.RecipientStatus `json:"recipients"`
	Created     time.Time                  `json:"created"`
	NextAttempt time.Time                  `json:"next_attempt"`
	Attempts    int                        `json:"attempts"`
	Held        bool                       `json:"held"`
	Size        int64                      `json:"size"`
	// SendAt is when a scheduled send goes out: no attempt is made before
	// it, and the retry window counts from it. Zero means at once.
	SendAt time.Time `json:"send_at,omitzero"`
	// DelayWarned is when the sender was warned that the item is delayed
	// (Options.DelayWarning); it is in the journal so that the warning is
	// made once, restarts included. Zero: not warned.
	DelayWarned time.Time `json:"delay_warned,omitzero"`
	// Dropping says the item is to be dropped once the attempt delivering
	// it ends (DropEventually: its mailbox was deleted meanwhile). The
	// journal keeps it on every later state of the item, so that a crash
	// before the attempt ends drops the item at the next start instead of
	// retrying it for days. A release before it ignores the key and
	// retries the item, as it did.
	Dropping bool `json:"dropping,omitempty"`
	// InFlight marks a copy taken while an attempt is under way. The queue
	// never stores it: it is set on the copies List and Get return.
	InFlight bool `json:"-"`
	// Data is the signed message for Enqueue. The queue keeps it only in
	// its journal and reads it per attempt, so a long queue does not hold
	// every message in memory; items it returns have Data nil.
	Data []byte `json:"-"`
	// Copy is what the sender needs to write the sent copy (opaque to the
	// queue), for Enqueue. It is kept after the message in the same
	// journal record, durable with it, and read back with ReadCopy.
	Copy     []byte `json:"-"`
	CopySize int64  `json:"copy_size,omitempty"`
	// ReadCopy returns Copy, and ReadMessage the signed message. They are
	// set on the items a Notifier gets.
	ReadCopy    func() ([]byte, error) `json:"-"`
	ReadMessage func() ([]byte, error) `json:"-"`
}

// Settled reports whether every recipient is final.
func (it *Item) Settled() bool {
	for _, r := range it.Recipients {
		if !Final(r.Status) {
			return false
		}
	}
	return true
}

// QueueItem is the item as the control protocol shows it.
func (it *Item) QueueItem() protocol.QueueItem {
	return protocol.QueueItem{ID: it.ID, Mailbox: it.Mailbox, MessageID: it.MessageID, MailFrom: it.MailFrom,
		Recipients: append([]protocol.RecipientStatus(nil), it.Recipients...), CreatedAt: it.Created,
		NextAttempt: it.NextAttempt, Held: it.Held, SizeBytes: it.Size, Delivering: it.InFlight,
		SendAt: timePtr(it.SendAt), Scheduled: it.Scheduled(), State: it.State(), DelayWarnedAt: timePtr(it.DelayWarned)}
}

// Scheduled reports whether the item waits for its send_at: no attempt has
// been made and its time has not come.
func (it *Item) Scheduled() bool {
	return !it.SendAt.IsZero() && it.Attempts == 0 && !it.Settled() && it.NextAttempt.Equal(it.SendAt)
}

// Due is when the item became due for its first attempt (its send_at for a
// scheduled send): the retry window, the delay warning and delivery latency
// count from it.
func (it *Item) Due() time.Time { return it.start() }

// start is when the item became due for its first attempt; the retry
// window counts from it.
func (it *Item) start() time.Time {
	if it.SendAt.After(it.Created) {
		return it.SendAt
	}
	return it.Created
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func (it *Item) clone() *Item {
	c := *it
	c.Recipients = append([]protocol.RecipientStatus(nil), it.Recipients...)
	return &c
}
