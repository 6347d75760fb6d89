package queue

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/mailctl/mailctl/protocol"
)

// What an operator does to many items at once: flush or drop the items a
// filter matches, and count them per destination domain.

// State is the item's one state among protocol.QueueStates, InFlight aside
// (the queue sets that on the copies it returns; see entry.state).
func (it *Item) State() string {
	switch {
	case it.InFlight:
		return protocol.QueueStateDelivering
	case it.Held:
		return protocol.QueueStateHeld
	case it.Scheduled():
		return protocol.QueueStateScheduled
	case it.Attempts == 0:
		return protocol.QueueStatePending
	}
	return protocol.QueueStateDeferred
}

// Match is a parsed protocol.QueueFilter. Zero fields match anything.
type Match struct {
	Domain  string // lower case
	Mailbox string
	State   string
	// CreatedBefore matches items queued at or before it.
	CreatedBefore time.Time
}

// NewMatch parses f against now; f must have passed f.Check.
func NewMatch(f protocol.QueueFilter, now time.Time) Match {
	m := Match{Domain: strings.ToLower(strings.TrimSuffix(strings.TrimSpace(f.Domain), ".")), Mailbox: f.Mailbox, State: f.State}
	if f.OlderThan != "" {
		if age, err := protocol.ParseAge(f.OlderThan); err == nil {
			m.CreatedBefore = now.Add(-age)
		}
	}
	return m
}

// atDomain reports whether addr's domain is dom (lower case).
func atDomain(addr, dom string) bool {
	i := strings.LastIndexByte(addr, '@')
	return i >= 0 && strings.EqualFold(strings.TrimSuffix(addr[i+1:], "."), dom)
}

// Matches reports whether it (its state as State says) is one the filter picks.
func (m Match) Matches(it *Item) bool {
	if m.Mailbox != "" && it.Mailbox != m.Mailbox {
		return false
	}
	if m.State != "" && it.State() != m.State {
		return false
	}
	if !m.CreatedBefore.IsZero() && it.Created.After(m.CreatedBefore) {
		return false
	}
	if m.Domain == "" {
		return !it.Settled()
	}
	for _, r := range it.Recipients {
		if !Final(r.Status) && atDomain(r.Address, m.Domain) {
			return true
		}
	}
	return false
}

// picks reports whether recipient r is one the filter acts on.
func (m Match) picks(r *protocol.RecipientStatus) bool {
	return !Final(r.Status) && (m.Domain == "" || atDomain(r.Address, m.Domain))
}

// Why bulk's fn left an item as it was, when it did so on purpose.
const (
	keptNone      = iota
	keptHeld      // awaiting approval (a flush)
	keptScheduled // waiting for its send_at (a flush that did not ask for it)
)

// bulk applies fn to each of ids still queued that m matches, saving every
// change with one fsync, then tells the Notifier. fn returns how many
// recipients it changed (0: the item is left as it was), how many of those
// are not at m's domain (OtherDomains), and why it kept an item as it was,
// which the result counts (keptHeld, keptScheduled).
func (q *Queue) bulk(ids []string, m Match, fn func(it *Item, now time.Time) (n, other, kept int)) protocol.QueueBulkResult {
	res := protocol.QueueBulkResult{IDs: []string{}}
	type told struct {
		e       *entry
		seq     uint64
		out     *Item
		settled bool
	}
	var tells []told
	q.mu.Lock()
	now := q.opts.Clock()
	var last uint64
	for _, id := range ids {
		e, ok := q.items[id]
		if !ok || !m.Matches(e.view()) {
			continue
		}
		res.Matched++
		if e.inflight || e.warning {
			res.Busy++
			continue
		}
		backup := e.it.clone()
		n, other, kept := fn(e.it, now)
		switch kept {
		case keptHeld:
			res.Held++
			continue
		case keptScheduled:
			res.Scheduled++
			continue
		}
		if n == 0 {
			continue
		}
		w, err := q.j.put(e.it)
		if err != nil {
			q.log.Error("queue change not recorded; item left as it was", "item", id, "err", err)
			e.it = backup
			res.Busy++
			continue
		}
		last = max(last, w)
		res.Changed++
		res.Recipients += n
		res.OtherDomains += other
		if len(res.IDs) < protocol.MaxBulkIDs {
			res.IDs = append(res.IDs, id)
		}
		settled := e.it.Settled()
		if settled {
			q.settle(e)
		}
		tells = append(tells, told{e, e.next(), e.it.clone(), settled})
	}
	// One fsync for the lot, before anyone (the sent copies, a reader of
	// the queue) hears of a change.
	var err error
	if last > 0 {
		err = q.j.commit(last)
	}
	q.mu.Unlock()
	if err != nil {
		q.log.Error("queue changes not synced", "items", len(tells), "err", err)
	}
	for _, t := range tells {
		if t.settled {
			q.notify(t.e, t.seq, t.out, true)
		} else {
			q.tell(t.e, t.seq, t.out, false)
		}
	}
	q.Kick()
	return res
}

// FlushMany makes the items among ids that m matches due now, as Retry
// does one. Held items are counted, not released: approval is separate.
// Scheduled items keep their send_at unless m asks for scheduled items by
// state: a flush after a destination's outage must not send next week's
// mail now (retry of the one id, or --state scheduled, does that).
//
// An item has one due time, and its attempt tries every recipient not
// yet final (attempt): a flush by domain makes the whole item due, so its
// recipients at other domains are tried now too. Each of them is counted
// in the result (OtherDomains) and shown due now, as it is.
func (q *Queue) FlushMany(ids []string, m Match) protocol.QueueBulkResult {
	return q.bulk(ids, m, func(it *Item, now time.Time) (int, int, int) {
		if it.Held {
			return 0, 0, keptHeld
		}
		if it.Scheduled() && m.State != protocol.QueueStateScheduled {
			return 0, 0, keptScheduled
		}
		picked, n, other := false, 0, 0
		for i := range it.Recipients {
			r := &it.Recipients[i]
			if Final(r.Status) || r.Status == StatusHeld {
				continue
			}
			picked = picked || m.picks(r)
			n++
			if !m.picks(r) {
				other++
			}
		}
		if !picked {
			return 0, 0, keptNone
		}
		for i := range it.Recipients {
			if r := &it.Recipients[i]; r.Status == StatusDeferred {
				r.NextAttempt = now
			}
		}
		it.NextAttempt = now
		return n, other, keptNone
	})
}

// DropMany drops, from the items among ids that m matches, the recipients
// not yet final (only those at m.Domain when it is set), as Drop does: they
// are marked failed by the operator, and their sender gets no bounce. An
// item with no recipient left to deliver settles.
func (q *Queue) DropMany(ids []string, m Match) protocol.QueueBulkResult {
	return q.bulk(ids, m, func(it *Item, now time.Time) (int, int, int) {
		n := 0
		for i := range it.Recipients {
			r := &it.Recipients[i]
			if m.picks(r) {
				n++
				r.Status, r.Detail, r.UpdatedAt, r.NextAttempt = StatusFailed, DetailDropped, now, time.Time{}
			}
		}
		return n, 0, keptNone
	})
}

// Summarize counts items per destination domain in age buckets
// (protocol.QueueAgeBuckets, by time since queued), like qshape: an item
// counts once in each domain it still has a recipient not final at. Only
// the maxDomains busiest domains get a row; the rest are added up.
func Summarize(items []*Item, now time.Time, maxDomains int) protocol.QueueSummary {
	bucket := func(it *Item) int {
		age := now.Sub(it.Created)
		for i, b := range protocol.QueueAgeBuckets {
			if age <= time.Duration(b)*time.Minute {
				return i
			}
		}
		return len(protocol.QueueAgeBuckets)
	}
	width := len(protocol.QueueAgeBuckets) + 1
	row := func(dom string) *protocol.QueueSummaryRow {
		return &protocol.QueueSummaryRow{Domain: dom, Buckets: make([]int, width)}
	}
	out := protocol.QueueSummary{BucketMinutes: protocol.QueueAgeBuckets, Total: *row("TOTAL"), Domains: []protocol.QueueSummaryRow{}}
	rows := map[string]*protocol.QueueSummaryRow{}
	for _, it := range items {
		b := bucket(it)
		out.Total.Items++
		out.Total.Buckets[b]++
		seen := map[string]bool{}
		for _, r := range it.Recipients {
			if Final(r.Status) {
				continue
			}
			dom := "(no domain)"
			if i := strings.LastIndexByte(r.Address, '@'); i >= 0 {
				dom = strings.ToLower(strings.TrimSuffix(r.Address[i+1:], "."))
			}
			if seen[dom] {
				continue
			}
			seen[dom] = true
			if rows[dom] == nil {
				rows[dom] = row(dom)
			}
			rows[dom].Items++
			rows[dom].Buckets[b]++
		}
	}
	all := make([]*protocol.QueueSummaryRow, 0, len(rows))
	for _, r := range rows {
		all = append(all, r)
	}
	slices.SortFunc(all, func(a, b *protocol.QueueSummaryRow) int {
		return cmp.Or(cmp.Compare(b.Items, a.Items), strings.Compare(a.Domain, b.Domain))
	})
	for i, r := range all {
		if i < maxDomains {
			out.Domains = append(out.Domains, *r)
			continue
		}
		if out.Other == nil {
			out.Other = row("(other domains)")
		}
		out.OtherDomains++
		out.Other.Items += r.Items
		for k, n := range r.Buckets {
			out.Other.Buckets[k] += n
		}
	}
	return out
}
