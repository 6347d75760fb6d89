package store

import (
	"strings"
	"time"
)

// Message is the TOML frontmatter of a stored message. Field names follow the
// reference store so agents' existing habits keep working.
type Message struct {
	ID             string       `toml:"id"`
	MessageID      string       `toml:"message_id"`
	ThreadID       string       `toml:"thread_id"`
	From           string       `toml:"from"`
	To             []string     `toml:"to"`
	Cc             []string     `toml:"cc"`
	Bcc            []string     `toml:"bcc,omitempty"`
	ReplyTo        []string     `toml:"reply_to"`
	DeliveredTo    string       `toml:"delivered_to"`
	Tag            string       `toml:"tag,omitempty"` // the +tag of the address it reached
	Subject        string       `toml:"subject"`
	Date           time.Time    `toml:"date"`
	ReceivedAt     time.Time    `toml:"received_at"`
	ReceivedFromIP string       `toml:"received_from_ip,omitempty"`
	ReturnPath     string       `toml:"return_path,omitempty"` // received mail's envelope sender (ReturnPathOf)
	SizeBytes      int64        `toml:"size_bytes"`
	Attachments    []Attachment `toml:"attachments"`
	InReplyTo      string       `toml:"in_reply_to"`
	References     []string     `toml:"references"`
	ListID         string       `toml:"list_id"`
	AutoSubmitted  string       `toml:"auto_submitted"`
	DKIM           []AuthResult `toml:"dkim"`
	SPF            AuthResult   `toml:"spf"`
	DMARC          AuthResult   `toml:"dmarc"`
	Trusted        string       `toml:"trusted"` // a protocol.Verdict: "true", "false" or "none"
	// SubmittedBy is the local mailbox that handed the message to the daemon
	// over its socket (its owner authenticated by uid); empty for mail that
	// came over SMTP or LMTP.
	SubmittedBy string     `toml:"submitted_by,omitempty"`
	Mailbox     string     `toml:"mailbox"`
	Read        bool       `toml:"read"`
	ReadAt      *time.Time `toml:"read_at,omitempty"`
	Labels      []string   `toml:"labels"`
	Starred     bool       `toml:"starred,omitempty"` // flagged by the owner or its agent
	IsDSN       bool       `toml:"is_dsn,omitempty"`  // a delivery status notification
	DSNFor      string     `toml:"dsn_for,omitempty"` // Message-ID of the sent message a DSN reports on
	// Junk says why the message was put in the junk folder (a DMARC
	// quarantine policy, a blocklist listing); empty otherwise.
	Junk string `toml:"junk,omitempty"`
	// DNSBL names the DNS lists that listed the sending client at connect,
	// with their answers ("bl.example=127.0.0.2 weight 1").
	DNSBL []string `toml:"dnsbl,omitempty"`

	// Sent copies only.
	Outbound       bool       `toml:"outbound,omitempty"`
	DeliveryStatus string     `toml:"delivery_status,omitempty"` // pending, delivered, deferred, failed, partial, held
	DeliveredAt    *time.Time `toml:"delivered_at,omitempty"`
	// MailFrom is the envelope sender the message went out with (its
	// return path, which the From address is not). Copies written before
	// it was recorded have none.
	MailFrom string `toml:"mail_from,omitempty"`
	// BounceReports are the keys of the delivery reports applied to the
	// copy (the last MaxBounceReports): a report it holds is a replay.
	BounceReports   []string          `toml:"bounce_reports,omitempty"`
	DeliveryDetails []RecipientStatus `toml:"delivery_details,omitempty"`

	// Drafts: when the draft, once sent, goes out. Sent copies: when the
	// send was scheduled for (none for one sent at once).
	SendAt *time.Time `toml:"send_at,omitempty"`
}

// MaxReturnPath bounds the envelope sender a received message records, in
// bytes without its angle brackets: RFC 5321 4.5.3.1.3 allows a path of
// 256 octets with them.
const MaxReturnPath = 254

// ReturnPathOf is the ReturnPath of a message received with envelope
// sender (SMTP MAIL FROM) mailFrom, "" for the null sender: in angle
// brackets as a Return-Path field writes it, so that a bounce's "<>" is
// told from none recorded (messages stored before the field, sent copies,
// drafts). It comes from the envelope only, never from a header. A sender
// past MaxReturnPath is kept cut, with "..." after the cut: no address can
// end so, and a reply is not sent to a part of one.
func ReturnPathOf(mailFrom string) string {
	if len(mailFrom) > MaxReturnPath {
		mailFrom = strings.ToValidUTF8(mailFrom[:MaxReturnPath], "") + "..."
	}
	return "<" + mailFrom + ">"
}

// EnvelopeSender is the envelope sender ReturnPath records, without its
// angle brackets ("" for the null sender), and whether one is recorded.
func (m *Message) EnvelopeSender() (sender string, recorded bool) {
	if m.ReturnPath == "" {
		return "", false
	}
	return strings.TrimSuffix(strings.TrimPrefix(m.ReturnPath, "<"), ">"), true
}

// MaxBounceReports bounds the report keys a sent copy keeps.
const MaxBounceReports = 64

// Attachment describes one attachment file stored beside the message.
type Attachment struct {
	Filename    string `toml:"filename"`
	ContentType string `toml:"content_type"`
	Size        int64  `toml:"size"`
	Path        string `toml:"path"` // relative to the mailbox folder
}

// AuthResult is one authentication result and the domain it concerns.
type AuthResult struct {
	Result string `toml:"result"`
	Domain string `toml:"domain,omitempty"`
	Detail string `toml:"detail,omitempty"`
}

// RecipientStatus is the delivery state of one recipient of a sent message.
type RecipientStatus struct {
	Address     string     `toml:"address"`
	Status      string     `toml:"status"`
	Detail      string     `toml:"detail,omitempty"`
	Code        int        `toml:"code,omitempty"`
	Attempts    int        `toml:"attempts,omitempty"`
	NextAttempt *time.Time `toml:"next_attempt,omitempty"`
	UpdatedAt   *time.Time `toml:"updated_at,omitempty"`
	TLS         string     `toml:"tls,omitempty"`
	// Captured: delivered to the capture mailbox of `mailctl dev`, not
	// sent.
	Captured bool `toml:"captured,omitempty"`
}

// AttachmentData is an attachment to be written with a new message: Data,
// or, for a large one, File, already written in the message's folder.
type AttachmentData struct {
	Filename    string // sanitized by the store before use
	ContentType string
	Data        []byte
	File        *Spill
}
