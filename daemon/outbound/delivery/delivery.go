// Package delivery holds what the queue and the delivery clients (remote MX
// or relay, local mailboxes) share: the outcome of an attempt for each
// recipient and the one error type that says temporary or permanent. It
// depends on the standard library only.
package delivery

import (
	"context"
	"fmt"
	"strings"
)

// The TLS recorded per recipient: the transport policy that applied to
// the MX delivery, "none" when the message went in plaintext, "verified"
// for the relay (its certificate always must verify).
const (
	TLSDANE          = "dane"            // the certificate matched the MX host's DNSSEC-validated TLSA records
	TLSMTASTSEnforce = "mta-sts enforce" // a policy MX host, TLS with a certificate valid for its name
	TLSMTASTSTesting = "mta-sts testing" // TLS as it could be had, failures reported, not enforced
	TLSOpportunistic = "opportunistic"   // no policy: STARTTLS when offered, certificate checked but not required
	TLSNone          = "none"            // plaintext (no policy, or local delivery)
	TLSVerified      = "verified"        // the relay's route: TLS whose certificate verified
	// TLSUnverified is the state of a handshake whose certificate did not
	// verify, before a policy names it.
	TLSUnverified = "unverified"
)

// Error is the one error type for delivery outcomes: temporary (retry later)
// or permanent, with what the remote server said.
type Error struct {
	Temporary bool
	Code      int
	Enhanced  string
	Message   string
	Host      string
	// TLS is what a failure before MAIL (an EHLO or AUTH refused) had
	// negotiated with Host; empty when it came before TLS.
	TLS string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Code != 0 {
		fmt.Fprintf(&b, "%d ", e.Code)
	}
	if e.Enhanced != "" {
		b.WriteString(e.Enhanced + " ")
	}
	b.WriteString(e.Message)
	if e.Host != "" {
		fmt.Fprintf(&b, " (from %s)", e.Host)
	}
	return b.String()
}

// Result is the outcome of one attempt for one recipient. It names its
// recipient, so results are matched by address, never by position.
type Result struct {
	Rcpt string
	Err  *Error // nil: delivered
	TLS  string // the policy that applied (TLSDANE, …, TLSNone)
	Host string // the host that answered; "local" for the daemon's own mailboxes
	// Captured names the local mailbox that took the message instead of
	// the recipient's server (`mailctl dev` captures outbound mail).
	Captured string
}

// Deliverer performs one delivery attempt for some recipients of a message
// and returns a result for each recipient it reached a decision on. A
// recipient without a result counts as a temporary failure.
type Deliverer interface {
	Deliver(ctx context.Context, from string, rcpts []string, data []byte) []Result
}

// AllFailed is the same failure for every recipient, with the TLS the
// failure came after (err.TLS).
func AllFailed(rcpts []string, err *Error) []Result {
	out := make([]Result, len(rcpts))
	for i, r := range rcpts {
		out[i] = Result{Rcpt: r, Err: err, Host: err.Host, TLS: err.TLS}
	}
	return out
}

// ByRcpt indexes results by recipient address, case-insensitively.
func ByRcpt(rs []Result) map[string]Result {
	m := make(map[string]Result, len(rs))
	for _, r := range rs {
		m[strings.ToLower(r.Rcpt)] = r
	}
	return m
}
