package control

import (
	"context"

	"github.com/mailctl/mailctl/daemon/outbound"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/protocol"
)

// dropQueued drops the queued mail of a mailbox being deleted, so that
// none of it is sent, or bounces, after the name may have a new owner.
// An item in the middle of an attempt is left to finish and dropped when it
// ends; its outcome is then only logged, as the mailbox it belongs to is
// gone.
func (s *Server) dropQueued(mailboxID string) {
	o := s.b.Outbound()
	if o == nil || mailboxID == "" {
		return
	}
	for _, it := range o.Queue().List() {
		if it.MailboxID == mailboxID && !it.Settled() {
			if err := o.Queue().DropEventually(it.ID); err != nil {
				s.log.Warn("queued mail of a deleted mailbox not dropped", "id", it.ID, "err", err)
			}
		}
	}
}

// queue is the outbound queue of a request whose access check found its
// item there, so sending is available.
func (s *Server) queue() Queue { return s.b.Outbound().Queue() }

func noQueueItem(id string) error {
	return notFound(protocol.MissingQueueItem, []string{id}, "among yours")
}

// queueTarget is the mailbox a queue item was sent from. Another user's item
// reads as missing; root may still act on mail queued by a mailbox since
// deleted. An orphan (an item without a mailbox identity) is root's alone.
func queueTarget(s *Server, _ *call, a *protocol.QueueIDArgs) (target, error) {
	o, err := s.sender()
	if err != nil {
		return target{}, err
	}
	it, err := o.Queue().Get(a.ID)
	if err != nil {
		return target{}, noQueueItem(a.ID)
	}
	t := target{mailboxes: []string{it.Mailbox}, missing: noQueueItem(a.ID), goneOK: true, boundID: it.MailboxID}
	if orphanItem(it) {
		t.rootOnly = noQueueItem(a.ID)
	}
	return t, nil
}

// orphanItem reports whether it carries no mailbox identity: it was queued
// before items recorded one (2e01477), so nothing proves which owner of its
// mailbox name queued it. The name may have changed hands since, so only
// root sees and steers it, and its outcome changes no sent copy.
func orphanItem(it *queue.Item) bool { return it.MailboxID == "" }

// ownsItem reports whether the caller may see queue item it: root any,
// others the items of their mailboxes as they are now (never an orphan).
func (s *Server) ownsItem(c *call, it *queue.Item) bool {
	if c.caller.Root() {
		return true
	}
	if orphanItem(it) {
		return false
	}
	m, ok := s.b.Mailbox(it.Mailbox)
	return ok && c.visible(m) && it.MailboxID == m.ID
}

func handleQueueList(_ context.Context, s *Server, c *call, _ *protocol.Empty) (any, error) {
	o, err := s.sender()
	if err != nil {
		return nil, err
	}
	out := protocol.QueueList{Items: []protocol.QueueItem{}}
	for _, it := range o.Queue().List() {
		if s.ownsItem(c, it) {
			out.Items = append(out.Items, it.QueueItem())
		}
	}
	return out, nil
}

func handleQueueShow(_ context.Context, s *Server, _ *call, a *protocol.QueueIDArgs) (any, error) {
	it, err := s.queue().Get(a.ID)
	if err != nil {
		return nil, noQueueItem(a.ID)
	}
	return it.QueueItem(), nil
}

// queueAction applies act to an item the access check let through and
// answers with the item as it is afterwards.
func queueAction(s *Server, a *protocol.QueueIDArgs, act func(q Queue, id string) error) (any, error) {
	if err := act(s.queue(), a.ID); err != nil {
		if protocol.CodeOf(err) == protocol.CodeNotFound {
			return nil, noQueueItem(a.ID) // gone since the access check: the one wording
		}
		return nil, err
	}
	it, err := s.queue().Get(a.ID)
	if err != nil {
		return protocol.QueueItem{ID: a.ID}, nil
	}
	return it.QueueItem(), nil
}

func handleQueueRetry(_ context.Context, s *Server, _ *call, a *protocol.QueueIDArgs) (any, error) {
	return queueAction(s, a, Queue.Retry)
}

func handleQueueDrop(_ context.Context, s *Server, _ *call, a *protocol.QueueIDArgs) (any, error) {
	return queueAction(s, a, Queue.Drop)
}

func handleQueueApprove(_ context.Context, s *Server, _ *call, a *protocol.QueueIDArgs) (any, error) {
	return queueAction(s, a, Queue.Approve)
}

func handleQueueReschedule(_ context.Context, s *Server, _ *call, a *protocol.QueueRescheduleArgs) (any, error) {
	if a.SendAt.IsZero() {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "send_at: give the new time (RFC 3339), e.g. 2026-03-02T09:00:00Z")
	}
	if err := outbound.CheckSendAt(&a.SendAt, s.now()); err != nil {
		return nil, err
	}
	return queueAction(s, &protocol.QueueIDArgs{ID: a.ID}, func(q Queue, id string) error { return q.Reschedule(id, a.SendAt) })
}

func queueRescheduleTarget(s *Server, c *call, a *protocol.QueueRescheduleArgs) (target, error) {
	return queueTarget(s, c, &protocol.QueueIDArgs{ID: a.ID})
}
