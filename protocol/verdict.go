package protocol

// Verdict is a message's trust verdict, the frontmatter field "trusted".
// daemon/trust decides it; everyone else compares against these constants.
type Verdict string

const (
	// Trusted: the From domain is authenticated with alignment and the From
	// address matches one of the mailbox's trusted sender patterns.
	Trusted Verdict = "true"
	// Untrusted: the mailbox has trusted senders and this message is not
	// from one of them (or is not authenticated).
	Untrusted Verdict = "false"
	// NoPolicy: the mailbox has no trusted senders, so nothing is trusted.
	NoPolicy Verdict = "none"
)

// IsTrusted reports whether v is Trusted, the only verdict that fires hooks
// and lifts the fence around message text.
func (v Verdict) IsTrusted() bool { return v == Trusted }
