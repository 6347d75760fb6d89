// Package trust authenticates inbound mail: SPF on the envelope sender (or
// the HELO name for bounces), every DKIM signature, and DMARC with
// relaxed/strict alignment on the organizational domain. It decides whether a
// message is authenticated for its From domain, and whether that From is one
// of a mailbox's trusted senders.
//
// Nothing inside the message is believed except what a signature covers: an
// Authentication-Results header already present in the incoming message is
// never read. All DNS goes through the resolver seam.
package trust

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"blitiri.com.ar/go/spf"
	"github.com/emersion/go-msgauth/dkim"
	"github.com/emersion/go-msgauth/dmarc"

	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/store"
)

// Input is what the SMTP session knows about one message.
type Input struct {
	RemoteIP net.IP
	Helo     string
	MailFrom string // envelope sender, "" for the null sender
	Raw      []byte // the message as received, when it is held in memory
	// Read, when Raw is nil, reads the message as received from its start:
	// a message too large to hold. Check reads its header, then the whole
	// message for DKIM, holding neither.
	Read func() io.Reader
}

// maxHeaderRead bounds the header Check reads from Input.Read; a longer
// header is checked as far as this.
const maxHeaderRead = 1 << 20

// header returns the message's header section (with the blank line after
// it), or as much of it as maxHeaderRead.
func (in Input) header() []byte {
	if in.Raw != nil || in.Read == nil {
		return in.Raw
	}
	var out []byte
	br := bufio.NewReader(io.LimitReader(in.Read(), maxHeaderRead))
	for {
		line, err := br.ReadSlice('\n')
		out = append(out, line...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil || len(bytes.TrimRight(line, "\r\n")) == 0 {
			return out
		}
	}
}

// message reads the whole message.
func (in Input) message() io.Reader {
	if in.Raw != nil || in.Read == nil {
		return bytes.NewReader(in.Raw)
	}
	return in.Read()
}

// Result is the outcome of a check.
type Result struct {
	// SPF: pass|fail|softfail|neutral|none|temperror|permerror. Domain is the
	// envelope sender's domain, or the HELO name when the sender is null.
	SPF store.AuthResult
	// SPFScope says which identity SPF checked: "mailfrom" or "helo".
	SPFScope string
	// DKIM has one entry per DKIM-Signature (pass|fail|temperror|permerror|
	// neutral, Domain = d=, Detail = "s=<selector>" then "; <reason>" when not
	// a pass), or a single "none" entry when the message is unsigned.
	DKIM []store.AuthResult
	// DMARC: pass|fail|none|temperror|permerror, Domain = the From domain,
	// Detail e.g. "p=reject".
	DMARC store.AuthResult
	// FromDomain and FromAddress are the single RFC 5322.From address (domain
	// lowercased); empty when the message has no usable From.
	FromDomain  string
	FromAddress string
	// Aligned is true when the From domain is authenticated with alignment:
	// an aligned DKIM pass or an aligned SPF pass.
	Aligned bool
	// Policy is the DMARC policy that applies to the From domain (none,
	// quarantine, reject) when a record exists: p=, or sp= when the record
	// was found at the organizational domain of a subdomain From.
	Policy string
	// Disposition is what the DMARC policy asks of this message (RFC 7489
	// §6.6.4): the Policy when DMARC failed and the message fell in the
	// pct= sample, the next less strict policy when it did not, "" when
	// DMARC did not fail. Whether it is applied is the Enforcement's call.
	Disposition string
	// SubmittedBy is the local mailbox that submitted the message over the
	// daemon's socket (see LocalSubmission); empty for network mail.
	SubmittedBy string
	// Generated is true when the daemon wrote the message itself (a delivery
	// status notification to one of its senders): nothing was received, so
	// nothing is checked, and it is trusted (see DaemonReport).
	Generated bool
}

// LocalSubmission records that mailbox handed the message in over the
// daemon's socket, where its owner is authenticated by uid (SO_PEERCRED),
// the way a submission server records SMTP AUTH (RFC 8601 "auth"). The daemon
// composed the From from the mailbox's own address, so when that address is
// in one of our domains the From is authenticated: Aligned. SPF, DKIM and
// DMARC keep what the checks found; nothing is invented for them.
func LocalSubmission(r *Result, mailbox string, fromIsOurs bool) {
	r.SubmittedBy = mailbox
	if fromIsOurs && r.FromAddress != "" {
		r.Aligned = true
	}
}

// DaemonSubmitter names the mail system itself where a Result names who
// submitted a message; it is a reserved local part, never a mailbox.
const DaemonSubmitter = "mailer-daemon"

// DaemonReport is the Result of a message the daemon wrote itself (a
// delivery status notification) from fromAddress, an address of one of its
// own domains. No one sent it, so no check ran: SPF, DKIM and DMARC are
// "none", not an invented pass; it is recorded as submitted by the mail
// system, the way LocalSubmission records a mailbox, and it is trusted
// whatever the mailbox's trusted senders, as its source is this daemon.
func DaemonReport(fromAddress string) Result {
	_, domain, _ := strings.Cut(fromAddress, "@")
	domain = strings.ToLower(domain)
	return Result{
		SPF: store.AuthResult{Result: "none"}, SPFScope: "mailfrom",
		DKIM:       []store.AuthResult{{Result: "none"}},
		DMARC:      store.AuthResult{Result: "none", Domain: domain},
		FromDomain: domain, FromAddress: fromAddress, Aligned: true,
		SubmittedBy: DaemonSubmitter, Generated: true,
	}
}

// Checker checks inbound messages. The zero value uses the system resolver.
type Checker struct {
	Resolver      resolver.Resolver
	Timeout       time.Duration // the whole check; default 10s
	MaxSignatures int           // DKIM signatures verified; default 10
	// Roll picks the number pct= sampling compares with: uniform in
	// [0, 100). Nil uses math/rand; tests give a fixed one.
	Roll func() int
}

// Lookup budgets per stage. SPF has its own RFC 7208 limits (10 terms that
// look up, 2 void lookups, 10 addresses per MX or PTR); this cap sits above
// them so one stage can never starve another or run away.
const (
	spfLookups   = 40
	dmarcLookups = 2
)

// Check authenticates one message. It never fails: problems become
// temperror/permerror results. It returns within the Timeout (or ctx's
// deadline, if sooner) plus the CPU time of hashing the message.
func (c *Checker) Check(ctx context.Context, in Input) Result {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r := c.Resolver
	if r == nil {
		r = resolver.New("", 0)
	}

	h := parseHeader(in.header())
	f := parseFrom(h.fields, h.err)
	res := Result{FromAddress: f.address, FromDomain: f.domain}

	var wg sync.WaitGroup
	wg.Go(func() { res.SPF, res.SPFScope = checkSPF(ctx, r, in) })
	res.DKIM = c.checkDKIM(ctx, r, in, h)
	wg.Wait()

	var pct int
	res.DMARC, res.Aligned, res.Policy, pct = checkDMARC(ctx, r, f, res.SPF, res.DKIM)
	if res.DMARC.Result == "fail" {
		roll := c.Roll
		if roll == nil {
			roll = func() int { return rand.IntN(100) }
		}
		res.Disposition = sample(res.Policy, pct, roll)
		if res.Disposition != res.Policy {
			res.DMARC.Detail += fmt.Sprintf(" pct=%d (not sampled: %s)", pct, res.Disposition)
		}
	}
	return res
}

// sample applies pct= (RFC 7489 §6.6.4): a message outside the sample gets
// the next less strict policy, reject becoming quarantine and quarantine
// none. roll is uniform in [0, 100).
func sample(policy string, pct int, roll func() int) string {
	if pct >= 100 || policy == "none" || policy == "" {
		return policy
	}
	if pct > 0 && roll() < pct {
		return policy
	}
	if policy == string(dmarc.PolicyReject) {
		return string(dmarc.PolicyQuarantine)
	}
	return string(dmarc.PolicyNone)
}

func checkSPF(ctx context.Context, r resolver.Resolver, in Input) (store.AuthResult, string) {
	scope, sender, domain := "mailfrom", in.MailFrom, ""
	if in.MailFrom == "" {
		// RFC 7208 §2.4: for the null sender check the HELO identity, as
		// postmaster@<helo>.
		scope, domain = "helo", normDomain(in.Helo)
		sender = "postmaster@" + domain
	} else if at := strings.LastIndexByte(in.MailFrom, '@'); at >= 0 {
		domain = normDomain(in.MailFrom[at+1:])
	}
	out := store.AuthResult{Domain: domain}
	if !validDomain(domain) {
		// RFC 7208 §4.3: a malformed domain gives "none". The library would
		// otherwise fall back to the HELO name for "user@".
		out.Domain = clean(domain)
		out.Result, out.Detail = "none", "no valid "+scope+" domain"
		return out, scope
	}
	if in.RemoteIP == nil || in.RemoteIP.IsUnspecified() {
		out.Result, out.Detail = "none", "no client IP"
		return out, scope
	}
	b := newBudget(ctx, r, spfLookups)
	got, err := spf.CheckHostWithSender(in.RemoteIP, normDomain(in.Helo), sender,
		spf.WithContext(ctx), spf.WithResolver(b))
	out.Result = string(got)
	if !slices.Contains(spfValues, out.Result) {
		out.Result = "permerror"
	}
	if err != nil && !errors.Is(err, spf.ErrNoResult) {
		out.Detail = shortReason(err.Error())
	}
	return out, scope
}

func (c *Checker) checkDKIM(ctx context.Context, r resolver.Resolver, in Input, h header) []store.AuthResult {
	var sigs []map[string]string // the d= and s= tags of each signature
	for _, f := range h.fields {
		if strings.EqualFold(f.name, "DKIM-Signature") {
			sigs = append(sigs, sigTags(f.value))
		}
	}
	if len(sigs) == 0 {
		return []store.AuthResult{{Result: "none"}}
	}
	max := c.MaxSignatures
	if max <= 0 {
		max = 10
	}
	if h.oversized {
		out := make([]store.AuthResult, 0, min(len(sigs), max))
		for _, s := range sigs[:min(len(sigs), max)] {
			out = append(out, store.AuthResult{Result: "permerror", Domain: clean(normDomain(s["d"])),
				Detail: "s=" + clean(s["s"]) + "; header field too large to verify"})
		}
		return out
	}
	b := newBudget(ctx, r, max)
	verifs, err := dkim.VerifyWithOptions(in.message(), &dkim.VerifyOptions{
		LookupTXT:        b.lookupTXT,
		MaxVerifications: max,
	})
	if err != nil && !errors.Is(err, dkim.ErrTooManySignatures) {
		return []store.AuthResult{{Result: "permerror", Detail: shortReason(err.Error())}}
	}
	out := make([]store.AuthResult, 0, len(verifs)+1)
	for i, v := range verifs {
		var s map[string]string
		if i < len(sigs) {
			s = sigs[i]
		}
		a := store.AuthResult{Domain: cmp.Or(clean(normDomain(v.Domain)), clean(normDomain(s["d"]))), Detail: "s=" + clean(s["s"])}
		switch {
		case v.Err == nil && !validDomain(normDomain(v.Domain)):
			// The stored domain is cleaned for display; alignment must never
			// see a cleaned name that differs from the one that signed.
			a.Result, a.Detail = "permerror", a.Detail+"; d= is not a valid DNS name"
		case v.Err == nil:
			a.Result = "pass"
		case dkim.IsTempFail(v.Err):
			a.Result = "temperror"
		case dkim.IsPermFail(v.Err):
			a.Result = "permerror"
		default:
			a.Result = "fail"
		}
		if v.Err != nil {
			a.Detail += "; " + shortReason(v.Err.Error())
		}
		out = append(out, a)
	}
	if len(sigs) > len(verifs) {
		out = append(out, store.AuthResult{Result: "neutral",
			Detail: fmt.Sprintf("%d more signatures not verified (limit %d)", len(sigs)-len(verifs), max)})
	}
	return out
}

// sigTags reads the d= and s= tags of a DKIM-Signature for reporting only;
// verification is the library's.
func sigTags(v string) map[string]string {
	tags := map[string]string{}
	for _, part := range strings.Split(v, ";") {
		k, val, ok := strings.Cut(part, "=")
		if !ok {
			continue
		}
		k = strings.TrimSpace(k)
		if k == "d" || k == "s" {
			tags[k] = strings.Join(strings.Fields(val), "")
		}
	}
	return tags
}

// checkDMARC evaluates DMARC for the From domain. It returns the result,
// whether the From is authenticated with alignment, the policy that applies
// (p=, or sp= for a subdomain) and the record's pct= (100 when absent).
func checkDMARC(ctx context.Context, r resolver.Resolver, f from, spfRes store.AuthResult, dkimRes []store.AuthResult) (store.AuthResult, bool, string, int) {
	out := store.AuthResult{Domain: clean(f.domain)}
	pct := 100
	if f.err != nil {
		// RFC 7489 §6.6.1: without exactly one usable From address there is
		// nothing to align with.
		out.Result, out.Detail = "permerror", shortReason(f.err.Error())
		return out, false, "", pct
	}

	b := newBudget(ctx, r, dmarcLookups)
	opts := &dmarc.LookupOptions{LookupTXT: b.lookupTXT}
	rec, err := dmarc.LookupWithOptions(f.domain, opts)
	org := OrgDomain(f.domain)
	fromOrg := false
	if errors.Is(err, dmarc.ErrNoPolicy) && org != f.domain {
		rec, err = dmarc.LookupWithOptions(org, opts)
		fromOrg = true
	}

	// Without a record alignment is relaxed (the DMARC default). When the
	// record could not be read we do not know what its owner asked for, so
	// only a strict match counts.
	strictDKIM, strictSPF := true, true
	var policy dmarc.Policy
	switch {
	case err == nil:
		strictDKIM = rec.DKIMAlignment == dmarc.AlignmentStrict
		strictSPF = rec.SPFAlignment == dmarc.AlignmentStrict
		policy = rec.Policy
		out.Result, out.Detail = "fail", "p="+string(policy)
		if fromOrg && rec.SubdomainPolicy != "" {
			policy = rec.SubdomainPolicy
			out.Detail += " sp=" + string(policy)
		}
		if rec.Percent != nil {
			pct = min(max(*rec.Percent, 0), 100)
		}
	case errors.Is(err, dmarc.ErrNoPolicy):
		strictDKIM, strictSPF = false, false
		out.Result, out.Detail = "none", "no DMARC record"
	case dmarc.IsTempFail(err):
		out.Result, out.Detail = "temperror", shortReason(err.Error())
	default:
		out.Result, out.Detail = "permerror", shortReason(err.Error())
	}

	ok := spfRes.Result == "pass" && aligned(spfRes.Domain, f.domain, strictSPF) ||
		slices.ContainsFunc(dkimRes, func(d store.AuthResult) bool {
			return d.Result == "pass" && aligned(d.Domain, f.domain, strictDKIM)
		})
	if ok && err == nil {
		out.Result = "pass"
	}
	return out, ok, string(policy), pct
}

// clean keeps a value safe to store and to put in a header: no spaces, no
// control characters (C0, DEL, C1), no characters with a meaning in
// Authentication-Results, and a bounded length. Values here come from the
// sender.
func clean(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == ' ' || unicode.IsControl(r) || strings.ContainsRune(`;()"\=`, r) || r == '\uFFFD' {
			continue
		}
		b.WriteRune(r)
		if b.Len() >= 255 {
			break
		}
	}
	return b.String()
}

// shortReason makes a library error fit in a Detail: one line, bounded,
// without control characters (C0, DEL and C1: a library quotes what the
// sender wrote, and a Detail reaches terminals). A run of them becomes one
// space; a rune cut at the bound is dropped.
func shortReason(s string) string {
	s = strings.Join(strings.FieldsFunc(s, unicode.IsControl), " ")
	return strings.ToValidUTF8(s[:min(len(s), 120)], "")
}
