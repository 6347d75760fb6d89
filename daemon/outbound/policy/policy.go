// Package policy applies a mailbox's send policy: allow-lists, recipient and
// size limits, and rate limits per mailbox.
package policy

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/protocol"
)

// Check applies a mailbox's send policy to a message for rcpts of size bytes
// (signed) carrying attachments files of attachmentBytes in all. It does not
// look at rate limits (RateLimiter does) or at dry_run_only (the Service
// does, since a dry run is always allowed).
func Check(p config.SendPolicy, rcpts []string, attachments int, attachmentBytes int64, size int) error {
	if p.Enabled != nil && !*p.Enabled {
		return protocol.Errorf(protocol.CodePolicyBlocked, "sending is disabled for this mailbox (send.enabled = false); dry runs still work")
	}
	if p.MaxRecipients > 0 && len(rcpts) > p.MaxRecipients {
		return protocol.Errorf(protocol.CodeInvalidInput, "%d recipients exceed this mailbox's limit of %d (send.max_recipients): split the message", len(rcpts), p.MaxRecipients)
	}
	if p.MaxAttachments > 0 && attachments > p.MaxAttachments {
		return protocol.Errorf(protocol.CodeTooLarge, "%d attachments, over this mailbox's limit of %d (send.max_attachments): send fewer, or put them in one archive", attachments, p.MaxAttachments)
	}
	if p.MaxAttachmentBytes > 0 && attachmentBytes > p.MaxAttachmentBytes {
		return protocol.Errorf(protocol.CodeTooLarge, "attachments total %d bytes, over the %d-byte limit (send.max_attachment_bytes)", attachmentBytes, p.MaxAttachmentBytes)
	}
	if p.MaxMessageBytes > 0 && int64(size) > p.MaxMessageBytes {
		return protocol.Errorf(protocol.CodeTooLarge, "the message is %d bytes, over the %d-byte limit (send.max_message_bytes)", size, p.MaxMessageBytes)
	}
	if len(p.AllowDomains) == 0 && len(p.AllowAddresses) == 0 {
		return nil
	}
	for _, r := range rcpts {
		if !allowed(p, r) {
			return protocol.Errorf(protocol.CodePolicyBlocked, "recipient %s is not allowed by this mailbox's send policy (send.allow_domains / send.allow_addresses)", r)
		}
	}
	return nil
}

// allowed matches an address against the allow-lists. A domain entry also
// covers its subdomains ("example.com" allows "eu.example.com"); an address
// entry matches exactly, case-insensitively.
func allowed(p config.SendPolicy, addr string) bool {
	addr = strings.ToLower(addr)
	for _, a := range p.AllowAddresses {
		if strings.ToLower(strings.TrimSpace(a)) == addr {
			return true
		}
	}
	at := strings.LastIndexByte(addr, '@')
	if at <= 0 {
		return false // no domain, or no local part: not an address at any domain
	}
	dom := addr[at+1:]
	for _, d := range p.AllowDomains {
		d = strings.ToLower(strings.TrimPrefix(strings.TrimSpace(d), "@"))
		d = strings.TrimPrefix(d, "*.")
		if d != "" && (dom == d || strings.HasSuffix(dom, "."+d)) {
			return true
		}
	}
	return false
}

// rateWindow is one sliding window of a send policy's rate limits.
type rateWindow struct {
	limit int
	d     time.Duration
	key   string
}

func rateWindows(p config.SendPolicy) []rateWindow {
	return []rateWindow{{p.PerMinute, time.Minute, "send.per_minute"}, {p.PerHour, time.Hour, "send.per_hour"}, {p.PerDay, 24 * time.Hour, "send.per_day"}}
}

// since is the part of ts (oldest first) after start.
func since(ts []time.Time, start time.Time) []time.Time {
	i := 0
	for i < len(ts) && !ts[i].After(start) {
		i++
	}
	return ts[i:]
}

// notAfter makes the sends of ts (oldest first) recorded after now count
// as made now. The wall clock stepped back since they were recorded (an
// NTP step, a clock set a year ahead and corrected, read back from the log
// after a restart): they still count, and they leave each window that
// window's length from now, not once the clock reaches their time again,
// which would hold the mailbox for as long as the step. It keeps ts in
// order, so that a send made now goes at its end.
func notAfter(ts []time.Time, now time.Time) {
	for i := len(ts) - 1; i >= 0 && ts[i].After(now); i-- {
		ts[i] = now
	}
}

// sender is what the rate limits count per: a mailbox name and the uid of
// its owner. A user who deletes a mailbox and creates it again keeps its
// counts; another user who creates the name starts at zero.
type sender struct {
	mailbox string
	uid     uint32
}

func (a sender) compare(b sender) int {
	if c := strings.Compare(a.mailbox, b.mailbox); c != 0 {
		return c
	}
	return cmp.Compare(a.uid, b.uid)
}

// RateLimiter counts sends per mailbox and owner in sliding windows of a
// minute, an hour and a day. Opened on a file (OpenRateLimiter), it
// survives restarts.
type RateLimiter struct {
	clock func() time.Time
	mu    sync.Mutex
	sent  map[sender][]time.Time // oldest first, last 24h
	log   *sendLog               // nil: in memory only
}

// NewRateLimiter returns an in-memory limiter reading time from clock
// (time.Now if nil).
func NewRateLimiter(clock func() time.Time) *RateLimiter {
	if clock == nil {
		clock = time.Now
	}
	return &RateLimiter{clock: clock, sent: map[sender][]time.Time{}}
}

// Allow records n sends for mailbox, owned by uid, if all three windows have
// room, and otherwise returns a rate_limited error whose RetryAfterMS says
// when the tightest window frees enough room.
func (r *RateLimiter) Allow(mailbox string, uid uint32, p config.SendPolicy, n int) error {
	if n <= 0 {
		n = 1
	}
	key := sender{mailbox, uid}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock()
	notAfter(r.sent[key], now)
	// Forget sends older than the longest window.
	ts := since(r.sent[key], now.Add(-24*time.Hour))
	var wait time.Duration
	var which string
	var limit int
	for _, w := range rateWindows(p) {
		if w.limit <= 0 {
			continue
		}
		if n > w.limit {
			return protocol.Errorf(protocol.CodePolicyBlocked, "%d sends exceed %s = %d", n, w.key, w.limit)
		}
		in := since(ts, now.Add(-w.d))
		if over := len(in) + n - w.limit; over > 0 {
			// The window has room again once the over-th oldest send in it
			// leaves: at that send's time plus the window length.
			free := in[over-1].Add(w.d).Sub(now)
			if free > wait {
				wait, which, limit = free, w.key, w.limit
			}
		}
	}
	if wait > 0 {
		r.sent[key] = ts
		e := protocol.Errorf(protocol.CodeRateLimited, "this mailbox may send %d messages per %s (%s): try again in %s", limit, strings.TrimPrefix(which, "send.per_"), which, wait.Round(time.Second))
		e.RetryAfterMS = max(wait.Milliseconds(), 1)
		return e
	}
	ts = append(ts, slices.Repeat([]time.Time{now}, n)...)
	r.sent[key] = ts
	if r.log != nil {
		r.log.record(key, now, n, r.sent)
	}
	return nil
}

// Usage reports, for each window p limits, how many sends mailbox, owned by
// uid, made in it and how many it has left, so that an owner can plan
// instead of probing with failures. It records nothing. Windows without a
// limit are left out.
func (r *RateLimiter) Usage(mailbox string, uid uint32, p config.SendPolicy) []protocol.SendRate {
	out := []protocol.SendRate{}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock()
	ts := r.sent[sender{mailbox, uid}]
	notAfter(ts, now)
	for _, w := range rateWindows(p) {
		if w.limit <= 0 {
			continue
		}
		in := since(ts, now.Add(-w.d))
		rate := protocol.SendRate{Window: strings.TrimPrefix(w.key, "send.per_"), Limit: w.limit, Used: len(in), Remaining: max(w.limit-len(in), 0)}
		if rate.Remaining == 0 {
			// One more send fits once the oldest send that fills the
			// window leaves it.
			free := in[len(in)-w.limit].Add(w.d).Sub(now)
			rate.NextFreeMS = max(free.Milliseconds(), 1)
		}
		out = append(out, rate)
	}
	return out
}
