package control

import (
	"context"

	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/protocol"
)

// The bulk queue verbs act on the items a filter matches among those the
// caller may steer one by one: root any, an owner the items of its own
// mailboxes (as queue.retry and queue.drop), never another user's.

// filterOf is the filter of a bulk verb's arguments.
type filterOf interface {
	protocol.QueueFilter | protocol.QueueSummaryArgs
}

func queueFilter[A filterOf](a *A) protocol.QueueFilter {
	switch v := any(a).(type) {
	case *protocol.QueueFilter:
		return *v
	case *protocol.QueueSummaryArgs:
		return v.QueueFilter
	}
	return protocol.QueueFilter{}
}

// queueFilterTarget checks the filter and names its mailbox, if any: the
// caller must own it (root may name one since deleted, whose mail may still
// be queued).
func queueFilterTarget[A filterOf](s *Server, _ *call, a *A) (target, error) {
	f := queueFilter(a)
	if err := f.Check(); err != nil {
		return target{}, err
	}
	if _, err := s.sender(); err != nil {
		return target{}, err
	}
	if f.Mailbox == "" {
		return target{}, nil
	}
	return target{mailboxes: []string{f.Mailbox}, goneOK: true}, nil
}

// ownedItems are the queued items the caller may steer.
func (s *Server) ownedItems(c *call) []*queue.Item {
	var out []*queue.Item
	for _, it := range s.queue().List() {
		if s.ownsItem(c, it) {
			out = append(out, it)
		}
	}
	return out
}

func ownedIDs(items []*queue.Item) []string {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.ID
	}
	return ids
}

func handleQueueFlush(_ context.Context, s *Server, c *call, a *protocol.QueueFilter) (any, error) {
	res := s.queue().FlushMany(ownedIDs(s.ownedItems(c)), queue.NewMatch(*a, s.now()))
	s.log.Info("queue flushed", "uid", c.caller.UID, "filter", *a, "matched", res.Matched, "changed", res.Changed, "busy", res.Busy, "held", res.Held)
	return res, nil
}

func handleQueueDropMatching(_ context.Context, s *Server, c *call, a *protocol.QueueFilter) (any, error) {
	if a.Empty() && !a.All {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "give a filter (domain, mailbox, state, older_than), or all: true to drop every item you may")
	}
	res := s.queue().DropMany(ownedIDs(s.ownedItems(c)), queue.NewMatch(*a, s.now()))
	s.log.Info("queue items dropped", "uid", c.caller.UID, "filter", *a, "matched", res.Matched, "changed", res.Changed, "recipients", res.Recipients, "busy", res.Busy)
	return res, nil
}

// maxSummaryDomains bounds the rows of a summary.
const maxSummaryDomains = 1000

func handleQueueSummary(_ context.Context, s *Server, c *call, a *protocol.QueueSummaryArgs) (any, error) {
	n := a.MaxDomains
	switch {
	case n < 0:
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "max_domains: give a number from 1 to %d, or leave it out for 50", maxSummaryDomains)
	case n == 0:
		n = 50
	}
	n = min(n, maxSummaryDomains)
	m := queue.NewMatch(a.QueueFilter, s.now())
	var items []*queue.Item
	for _, it := range s.ownedItems(c) {
		if m.Matches(it) {
			items = append(items, it)
		}
	}
	return queue.Summarize(items, s.now(), n), nil
}
