package outbound

import (
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// aggregate is the message-level status of its recipients.
func aggregate(rs []protocol.RecipientStatus) string {
	var held, pending, deferred, delivered, failed int
	for _, r := range rs {
		switch r.Status {
		case queue.StatusHeld:
			held++
		case queue.StatusDeferred:
			deferred++
		case queue.StatusDelivered:
			delivered++
		case queue.StatusFailed, queue.StatusBounced:
			failed++
		default:
			pending++
		}
	}
	switch {
	case held > 0:
		return queue.StatusHeld
	case deferred > 0:
		return queue.StatusDeferred
	case pending > 0:
		return queue.StatusPending
	case failed == 0:
		return queue.StatusDelivered
	case delivered == 0:
		return queue.StatusFailed
	default:
		return "partial"
	}
}

func resultStatus(agg string) string {
	if agg == queue.StatusPending || agg == "" {
		return "queued"
	}
	return agg
}

func resultOf(it *queue.Item) protocol.SendResult {
	res := protocol.SendResult{ID: it.SentID, MessageID: it.MessageID, Envelope: protocol.Envelope{MailFrom: it.MailFrom},
		SizeBytes: int(it.Size), Recipients: append([]protocol.RecipientStatus(nil), it.Recipients...)}
	for _, r := range it.Recipients {
		res.Envelope.RcptTo = append(res.Envelope.RcptTo, r.Address)
	}
	res.Status = resultStatus(aggregate(it.Recipients))
	res.SendAt = timePtr(it.SendAt)
	if it.Scheduled() && !it.Held {
		res.Status = "scheduled"
	}
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
			Attempts: r.Attempts, NextAttempt: timePtr(r.NextAttempt), UpdatedAt: timePtr(r.UpdatedAt), TLS: r.TLS, Captured: r.Captured})
	}
	return out
}

// FromStoreDetail is one recipient's delivery state as the protocol says it.
func FromStoreDetail(d store.RecipientStatus) protocol.RecipientStatus {
	r := protocol.RecipientStatus{Address: d.Address, Status: d.Status, Detail: d.Detail, Code: d.Code, Attempts: d.Attempts, TLS: d.TLS, Captured: d.Captured}
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
		out = append(out, FromStoreDetail(d))
	}
	return out
}
