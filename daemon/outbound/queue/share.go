package queue

import (
	"strconv"
)

// Attempts in flight per sender, bounded by OwnerShare, so that one local
// user whose mail goes to a few slow or tarpitting domains (each within
// MaxPerDestination) cannot hold every place while everyone else's mail
// waits (see dispatch).

// OwnerShare is how many of a queue's places (MaxConcurrent) the attempts
// of one owner's items may hold at once: all but one, at least one, as
// hooks.OwnerShare gives of the hook slots.
func OwnerShare(places int) int { return max(1, places-1) }

// nullSender is the share of the mail with the null sender, which only the
// daemon sends (reports of its own): it has a share of its own, so a user
// holding a share cannot starve it, nor it the users.
const nullSender = "null sender"

// shareKey is whose share an attempt of it counts against: the owner (uid)
// of its mailbox when Options.Owner knows it, else the mailbox itself;
// mail with the null sender, whichever mailbox queued it, counts against
// nullSender. Call with q.mu held.
func (q *Queue) shareKey(it *Item) string {
	if it.MailFrom == "" {
		return nullSender
	}
	if q.opts.Owner != nil {
		if uid, ok := q.opts.Owner(it.Mailbox, it.MailboxID); ok {
			return "uid " + strconv.FormatUint(uint64(uid), 10)
		}
	}
	return "mailbox " + it.Mailbox + " " + it.MailboxID
}

// shareLeft reports whether who has an attempt's place left under
// OwnerShare. Call with q.mu held.
func (q *Queue) shareLeft(who string) bool {
	return q.sharing[who] < OwnerShare(q.opts.MaxConcurrent)
}
