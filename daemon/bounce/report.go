package bounce

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"mime"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// Failed is one recipient a delivery status notification reports.
type Failed struct {
	Address string
	// Code is the SMTP reply code of the last attempt (0 when none came).
	Code int
	// Detail is what the last attempt recorded ("550 5.1.1 no such user
	// (from mx.example.com)", or why the queue gave up).
	Detail string
	// Expired is true when the queue gave up after its retry window.
	Expired bool
}

// Report is a delivery status notification (RFC 3464) this daemon writes
// to the sender of a message it could not deliver. It is stored trusted (it
// comes from the daemon), so it carries the daemon's own words only: the
// recipients' addresses, status codes and fixed explanations. What the
// remote server said (which a hostile MX chooses) and the message's subject
// and display names (which may quote an outsider) stay in the sent copy,
// which the report is linked to.
type Report struct {
	ReportingMTA string    // this host's name
	From         string    // the report's author, e.g. MAILER-DAEMON@example.com
	To           string    // the sending mailbox's address
	Date         time.Time // when the report is made
	// Original is the header section of the undelivered message as it was
	// sent (returned as text/rfc822-headers, never its body).
	Original          []byte
	OriginalMessageID string    // without angle brackets
	ArrivalDate       time.Time // when the message was queued
	Recipients        []Failed
	// Delayed makes the report a delay warning (action "delayed"): the
	// recipients are not delivered yet and retries go on until
	// RetryUntil. Its Message-ID differs from the final report's.
	Delayed    bool
	RetryUntil time.Time
}

// maxOriginal bounds the returned header section.
const maxOriginal = 64 << 10

// MessageID is the report's Message-ID (without angle brackets): the same
// for the same message and the same set of failed recipients, so a report
// made again (after a restart) is recognised and not stored twice.
func (r *Report) MessageID() string {
	addrs := make([]string, len(r.Recipients))
	for i, f := range r.Recipients {
		addrs[i] = strings.ToLower(f.Address)
	}
	sort.Strings(addrs)
	key := r.OriginalMessageID + "\x00" + strings.Join(addrs, "\x00")
	if r.Delayed {
		key = "delayed\x00" + key
	}
	sum := sha256.Sum256([]byte(key))
	host := r.ReportingMTA
	if host == "" {
		host = "localhost"
	}
	return "dsn." + hex.EncodeToString(sum[:12]) + "@" + host
}

var messageIDRe = regexp.MustCompile(`(?im)^message-id:`)

var enhancedRe = regexp.MustCompile(`\b([245])\.(\d{1,3})\.(\d{1,3})\b`)

// Status is the RFC 3463 status code for a failed recipient: the one the
// remote server gave, else one that says what the daemon knows.
func (f Failed) Status() string {
	if m := enhancedRe.FindString(f.Detail); m != "" {
		return m
	}
	switch {
	case f.Expired:
		return "4.4.7" // delivery time expired
	case f.Code >= 500:
		return "5.0.0"
	case f.Code >= 400:
		return "4.0.0"
	}
	return "5.0.0"
}

// status is Status, or for a delay warning a 4.x.x code (RFC 3464 §2.3.4:
// a delayed recipient's status is transient).
func (f Failed) status(delayed bool) string {
	st := f.Status()
	if delayed && !strings.HasPrefix(st, "4.") {
		return "4.0.0"
	}
	return st
}

// explain says in the daemon's words why the recipient failed, or for a
// delay warning why it is not delivered yet.
func (f Failed) explain(delayed bool) string {
	if delayed {
		if f.Code >= 400 && f.Code < 500 {
			return fmt.Sprintf("the receiving server has not accepted it yet (%d, status %s)", f.Code, f.status(true))
		}
		return "no receiving server has accepted it yet (status " + f.status(true) + ")"
	}
	return f.explanation()
}

// explanation says in the daemon's words why the recipient failed.
func (f Failed) explanation() string {
	st := f.Status()
	switch {
	case f.Expired:
		return "no receiving server accepted it before the retry window ended (status " + st + ")"
	case f.Code >= 500:
		return fmt.Sprintf("the receiving server refused it (%d, status %s)", f.Code, st)
	case f.Code >= 400:
		return fmt.Sprintf("the receiving server did not accept it (%d, status %s)", f.Code, st)
	}
	return "it could not be delivered (status " + st + ")"
}

// Bytes renders the report: multipart/report with a human-readable part, a
// message/delivery-status part and the original headers. It is marked
// Auto-Submitted so that no hook or autoresponder answers it by default.
func (r *Report) Bytes() []byte {
	var b bytes.Buffer
	// A random boundary: the returned headers are the sender's own text,
	// and must not be able to close a part.
	nonce := make([]byte, 12)
	rand.Read(nonce)
	boundary := "dsn-" + hex.EncodeToString(nonce)
	subject := "Undelivered mail returned to sender"
	action := "failed"
	if r.Delayed {
		subject, action = "Delayed mail (still being retried)", "delayed"
	}
	hdr := func(k, v string) { fmt.Fprintf(&b, "%s: %s\r\n", k, v) }
	hdr("From", "Mail Delivery System <"+oneLine(r.From, 320)+">")
	hdr("To", "<"+oneLine(r.To, 320)+">")
	hdr("Subject", mime.QEncoding.Encode("utf-8", subject))
	hdr("Date", r.Date.Format(time.RFC1123Z))
	hdr("Message-ID", "<"+r.MessageID()+">")
	if id := oneLine(r.OriginalMessageID, 900); id != "" {
		hdr("In-Reply-To", "<"+id+">")
		hdr("References", "<"+id+">")
	}
	hdr("Auto-Submitted", "auto-replied")
	hdr("MIME-Version", "1.0")
	hdr("Content-Type", `multipart/report; report-type=delivery-status; boundary="`+boundary+`"`)
	b.WriteString("\r\n")

	fmt.Fprintf(&b, "--%s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n", boundary)
	fmt.Fprintf(&b, "This is the mail system at %s.\r\n\r\n", oneLine(r.ReportingMTA, 255))
	if r.Delayed {
		b.WriteString("Your message has not been delivered yet to the recipients below.\r\n")
		if !r.RetryUntil.IsZero() {
			fmt.Fprintf(&b, "The mail system keeps trying until %s; you need do nothing\r\n", r.RetryUntil.UTC().Format(time.RFC1123Z))
			b.WriteString("unless the message is urgent. If it fails for good, a second report\r\nfollows.")
		}
		b.WriteString(" What the receiving servers answered is in the\r\nsent copy's delivery status.\r\n\r\n")
	} else {
		b.WriteString("Your message could not be delivered to the recipients below. What\r\n")
		b.WriteString("the receiving servers answered is in the sent copy's delivery status.\r\n\r\n")
	}
	for _, f := range r.Recipients {
		fmt.Fprintf(&b, "<%s>: %s\r\n", oneLine(f.Address, 320), f.explain(r.Delayed))
	}
	b.WriteString("\r\n")

	fmt.Fprintf(&b, "--%s\r\nContent-Type: message/delivery-status\r\n\r\n", boundary)
	fmt.Fprintf(&b, "Reporting-MTA: dns; %s\r\n", oneLine(r.ReportingMTA, 255))
	if !r.ArrivalDate.IsZero() {
		fmt.Fprintf(&b, "Arrival-Date: %s\r\n", r.ArrivalDate.Format(time.RFC1123Z))
	}
	for _, f := range r.Recipients {
		b.WriteString("\r\n")
		fmt.Fprintf(&b, "Final-Recipient: rfc822; %s\r\n", oneLine(f.Address, 320))
		fmt.Fprintf(&b, "Action: %s\r\n", action)
		fmt.Fprintf(&b, "Status: %s\r\n", f.status(r.Delayed))
		if f.Code >= 200 && f.Code <= 599 {
			fmt.Fprintf(&b, "Diagnostic-Code: smtp; %d %s\r\n", f.Code, f.status(r.Delayed))
		}
		if r.Delayed && !r.RetryUntil.IsZero() {
			fmt.Fprintf(&b, "Will-Retry-Until: %s\r\n", r.RetryUntil.Format(time.RFC1123Z))
		}
	}
	b.WriteString("\r\n")

	fmt.Fprintf(&b, "--%s\r\nContent-Type: text/rfc822-headers\r\n\r\n", boundary)
	orig := headerSection(r.Original)
	if !messageIDRe.Match(orig) && r.OriginalMessageID != "" {
		// The report is linked to the sent message by this header.
		orig = append([]byte("Message-ID: <"+oneLine(r.OriginalMessageID, 900)+">\r\n"), orig...)
	}
	b.Write(orig)
	fmt.Fprintf(&b, "\r\n--%s--\r\n", boundary)
	return b.Bytes()
}

// headerSection is the header section of raw, with CRLF line ends, bounded.
func headerSection(raw []byte) []byte {
	raw = bytes.ReplaceAll(raw, []byte("\r\n"), []byte("\n"))
	if i := bytes.Index(raw, []byte("\n\n")); i >= 0 {
		raw = raw[:i+1]
	}
	if len(raw) > maxOriginal {
		raw = raw[:maxOriginal]
		if i := bytes.LastIndexByte(raw, '\n'); i >= 0 {
			raw = raw[:i+1]
		}
	}
	// Only the Message-ID and Date fields (and their folded lines) are
	// returned: they identify the message, and the other fields may quote
	// an outsider (a subject or display name copied from a reply).
	var out []byte
	kept := false
	for _, line := range bytes.Split(bytes.TrimRight(raw, "\n"), []byte("\n")) {
		line = bytes.TrimRight(line, "\r")
		folded := len(line) > 0 && (line[0] == ' ' || line[0] == '\t')
		if folded && kept || !folded && fieldRe.Match(line) {
			out = append(append(out, line...), '\r', '\n')
			kept = true
			continue
		}
		kept = false
	}
	return out
}

var fieldRe = regexp.MustCompile(`(?i)^(message-id|date):`)

// oneLine keeps s on one header line: control characters become spaces,
// runs of space collapse, and it is cut to max bytes on a rune boundary.
func oneLine(s string, max int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	for len(s) > max {
		_, n := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-n]
	}
	return s
}
