package protocol

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Verbs that steer or describe many queue items at once.
const (
	VerbQueueFlush        = "queue.flush"
	VerbQueueDropMatching = "queue.drop_matching"
	VerbQueueSummary      = "queue.summary"
)

// Queue item states, as the filters and the summary name them. An item is
// in exactly one: held (waiting for the operator's approval), scheduled
// (waiting for its send_at), pending (due, never attempted), deferred
// (attempted, waiting for its next attempt) or delivering (an attempt is
// under way).
const (
	QueueStateHeld       = "held"
	QueueStateScheduled  = "scheduled"
	QueueStatePending    = "pending"
	QueueStateDeferred   = "deferred"
	QueueStateDelivering = "delivering"
)

// QueueStates lists the item states in a fixed order.
var QueueStates = []string{QueueStateHeld, QueueStateScheduled, QueueStatePending, QueueStateDeferred, QueueStateDelivering}

// QueueFilter picks queue items for VerbQueueFlush, VerbQueueDropMatching
// and VerbQueueSummary. Every field given must match; a caller other than
// root only ever reaches the items of its own mailboxes.
type QueueFilter struct {
	// Domain matches items with a recipient not yet final at this domain;
	// queue.drop_matching then drops only those recipients.
	Domain string `json:"domain,omitempty"`
	// Mailbox matches the items the mailbox sent.
	Mailbox string `json:"mailbox,omitempty"`
	// State is one of QueueStates but delivering.
	State string `json:"state,omitempty"`
	// OlderThan matches items queued at least this long ago: a duration
	// such as 90m, 4h or 2d.
	OlderThan string `json:"older_than,omitempty"`
	// All must be true for queue.drop_matching without any other filter,
	// so that an empty request never empties the queue.
	All bool `json:"all,omitempty"`
}

// Empty reports whether the filter names nothing to match on.
func (f QueueFilter) Empty() bool {
	return f.Domain == "" && f.Mailbox == "" && f.State == "" && f.OlderThan == ""
}

// MaxAge bounds older_than: ten years.
const MaxAge = 10 * 365 * 24 * time.Hour

// ParseAge reads an age such as 90s, 30m, 4h or 2d (Go durations, plus d
// for days). It is what older_than takes on the wire and on the command line.
func ParseAge(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	bad := fmt.Errorf("bad age %q: use forms like 30m, 4h or 2d", s)
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.ParseFloat(n, 64)
		if err != nil || days < 0 || days > MaxAge.Hours()/24 {
			return 0, bad
		}
		d = time.Duration(days * float64(24*time.Hour))
	} else {
		v, err := time.ParseDuration(s)
		if err != nil || v < 0 {
			return 0, bad
		}
		d = v
	}
	if d > MaxAge {
		return 0, fmt.Errorf("age %q is more than ten years", s)
	}
	return d, nil
}

// Check refuses a filter the daemon could not apply, saying what to send.
func (f QueueFilter) Check() error {
	if f.State != "" && (f.State == QueueStateDelivering || !contains(QueueStates, f.State)) {
		return Errorf(CodeInvalidInput, "state %q: use one of held, scheduled, pending, deferred", f.State)
	}
	if f.OlderThan != "" {
		if _, err := ParseAge(f.OlderThan); err != nil {
			return Errorf(CodeInvalidInput, "older_than: %v", err)
		}
	}
	if len(f.Domain) > 255 || strings.ContainsAny(f.Domain, "@ \t\r\n") {
		return Errorf(CodeInvalidInput, "domain %q: give a domain name such as example.org, without a local part", f.Domain)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// QueueBulkResult answers VerbQueueFlush and VerbQueueDropMatching: how
// many items the filter matched among the caller's, and what became of them.
type QueueBulkResult struct {
	Matched int `json:"matched"`
	// Changed items were made due now (flush) or had recipients dropped.
	Changed int `json:"changed"`
	// Recipients is how many recipients were made due or dropped. A flush
	// makes a whole item due, so it counts every recipient of the changed
	// items that is not yet delivered and not held: an attempt tries them
	// all, at whichever domain.
	Recipients int `json:"recipients"`
	// OtherDomains is how many of a flush's Recipients are not at the
	// filter's domain: tried now with the items that have a recipient
	// there. Left out when none (and always for a drop, which drops only
	// the domain's).
	OtherDomains int `json:"other_domains,omitempty"`
	// Busy items were being delivered and were left alone: run the
	// request again in a moment.
	Busy int `json:"busy"`
	// Held items match a flush but wait for approval (queue.approve),
	// which a flush does not give.
	Held int `json:"held"`
	// Scheduled items match a flush but keep their send_at: only a flush
	// whose state filter is scheduled sends them now.
	Scheduled int `json:"scheduled,omitempty"`
	// IDs are the changed items, at most MaxBulkIDs of them.
	IDs []string `json:"ids"`
}

// MaxBulkIDs bounds the ids a bulk answer lists; the counts are complete.
const MaxBulkIDs = 1000

// QueueSummaryArgs asks for VerbQueueSummary: the filter's items (any
// filter field) counted per destination domain.
type QueueSummaryArgs struct {
	QueueFilter
	// MaxDomains is how many domain rows to return, the busiest first
	// (default 50, at most 1000); the rest are added up in one row.
	MaxDomains int `json:"max_domains,omitempty"`
}

// QueueSummary answers VerbQueueSummary: items per destination domain in
// age buckets, like Postfix's qshape. An item counts once in each domain
// it still has a recipient not final at, in the bucket of its age.
type QueueSummary struct {
	// BucketMinutes are the upper bounds of the age columns in minutes; the
	// last column (one more than these) holds everything older.
	BucketMinutes []int `json:"bucket_minutes"`
	// Total counts every item once.
	Total QueueSummaryRow `json:"total"`
	// Domains are the busiest domains, most items first, then by name.
	Domains []QueueSummaryRow `json:"domains"`
	// Other adds up the domains past MaxDomains; OtherDomains says how many.
	Other        *QueueSummaryRow `json:"other,omitempty"`
	OtherDomains int              `json:"other_domains,omitempty"`
}

// QueueSummaryRow is one domain's items (or all of them) by age.
type QueueSummaryRow struct {
	Domain  string `json:"domain"`
	Items   int    `json:"items"`
	Buckets []int  `json:"buckets"`
}

// QueueAgeBuckets are the summary's column bounds in minutes, qshape's.
var QueueAgeBuckets = []int{5, 10, 20, 40, 80, 160, 320, 640, 1280}
