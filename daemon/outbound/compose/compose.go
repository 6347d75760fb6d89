// Package compose turns a send request into an unsigned MIME message:
// addresses checked, threading from the parent, Markdown rendered to safe
// HTML with the Markdown as the text part, attachments typed.
package compose

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"github.com/emersion/go-message/mail"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// Input is everything Build needs. FromAddress comes from the
// mailbox the caller owns, never from the caller's arguments.
type Input struct {
	FromName, FromAddress, Domain string
	Args                          protocol.SendArgs
	Parent                        *store.Message // the message replied to, or nil
	Now                           time.Time
}

// Message is a message ready to sign.
type Message struct {
	Raw        []byte // unsigned, CRLF line endings
	MessageID  string // without <>
	Envelope   protocol.Envelope
	Subject    string
	From       string
	To, Cc     []string
	Bcc        []string
	ReplyTo    []string
	InReplyTo  string   // without <>
	References []string // without <>
	Markdown   string   // the body as the sent copy keeps it
	// Attachments are the attachments as sent, for the sent copy.
	Attachments     []store.AttachmentData
	AttachmentBytes int64
	AutoSubmitted   string
}

func invalid(format string, args ...any) error {
	return protocol.Errorf(protocol.CodeInvalidInput, format, args...)
}

// Build validates the request and renders the unsigned message. Every
// error is a *protocol.Error with code invalid_input. Each step decides one
// thing: who the message is from and to, where it sits in a thread, what it
// carries, and how it is written.
func Build(in Input) (*Message, error) {
	a := in.Args
	if in.Domain == "" {
		return nil, invalid("no mail domain is configured")
	}
	if a.HTMLBody != "" && a.TextOnly {
		return nil, invalid("html_body and text_only exclude each other: choose one")
	}
	if err := checkHeaderValue("subject", a.Subject); err != nil {
		return nil, err
	}
	p, err := parseParties(in)
	if err != nil {
		return nil, err
	}
	th, err := threadOf(in, p)
	if err != nil {
		return nil, err
	}
	if err := p.dedupe(); err != nil {
		return nil, err
	}
	th.refs = trimReferences(th.refs)
	if err := checkFieldSizes(th, p); err != nil {
		return nil, err
	}
	c := &Message{
		MessageID:  newMessageID(in.Domain),
		Subject:    th.subject,
		From:       displayAddr(p.from),
		To:         displayList(p.to),
		Cc:         displayList(p.cc),
		Bcc:        displayList(p.bcc),
		ReplyTo:    displayList(p.replyTo),
		InReplyTo:  th.inReplyTo,
		References: th.refs,
		Envelope:   protocol.Envelope{MailFrom: p.from.Address, RcptTo: p.rcpts()},
		Markdown:   a.Body,
	}
	if a.AutoReply {
		c.AutoSubmitted = "auto-replied"
	}
	if c.Attachments, c.AttachmentBytes, err = attachments(a.Attachments); err != nil {
		return nil, err
	}
	b, err := bodies(a)
	if err != nil {
		return nil, err
	}
	if b.markdown != "" {
		c.Markdown = b.markdown
	}
	now := in.Now
	if now.IsZero() {
		now = time.Now()
	}
	var out bytes.Buffer
	if err := writeBody(&out, header(c, p, now), b.text, b.html, c.Attachments); err != nil {
		return nil, fmt.Errorf("writing MIME: %w", err)
	}
	c.Raw = out.Bytes()
	return c, nil
}

// MaxFieldBytes bounds what one header field holds (its addresses, its
// subject). The MIME writer folds a field in time that grows with the
// square of its length, before the policy has counted the recipients:
// a request of a million addresses or a subject of megabytes of short
// words would hold the daemon for hours. 64 KiB is hundreds of
// recipients with long names.
const MaxFieldBytes = 64 << 10

// checkFieldSizes refuses a header field past MaxFieldBytes.
func checkFieldSizes(th thread, p *parties) error {
	if n := len(th.subject); n > MaxFieldBytes {
		return invalid("the subject is %d bytes, over the %d a header may hold", n, MaxFieldBytes)
	}
	for _, f := range []struct {
		name string
		l    []*mail.Address
	}{{"to", p.to}, {"cc", p.cc}, {"reply_to", p.replyTo}} {
		if n := addressBytes(f.l); n > MaxFieldBytes {
			return invalid("%s comes to %d bytes with %d addresses, over the %d a header may hold: send to fewer at once", f.name, n, len(f.l), MaxFieldBytes)
		}
	}
	return nil
}

// addressBytes is about what the addresses of l take in a header.
func addressBytes(l []*mail.Address) int {
	n := 0
	for _, a := range l {
		n += len(a.Name) + len(a.Address) + 6 // quotes, brackets, comma, space
	}
	return n
}

// parties are the addresses of a message.
type parties struct {
	from                 *mail.Address
	to, cc, bcc, replyTo []*mail.Address
}

// parseParties checks the sender (the caller's mailbox) and the caller's
// recipient lists.
func parseParties(in Input) (*parties, error) {
	if err := checkHeaderValue("from name", in.FromName); err != nil {
		return nil, err
	}
	from, err := ParseAddress("from", in.FromAddress)
	if err != nil {
		return nil, err
	}
	from.Name = in.FromName
	return parseRecipients(in.Args, from)
}

// parseRecipients checks the caller's recipient lists (and Reply-To) of a
// message from the sender given, already checked (nil for a draft).
func parseRecipients(a protocol.SendArgs, from *mail.Address) (*parties, error) {
	p := &parties{from: from}
	for _, l := range []struct {
		field string
		in    []string
		out   *[]*mail.Address
	}{{"to", a.To, &p.to}, {"cc", a.Cc, &p.cc}, {"bcc", a.Bcc, &p.bcc}, {"reply_to", a.ReplyTo, &p.replyTo}} {
		var err error
		if *l.out, err = parseEach(l.field, l.in, ParseAddress); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// dedupe removes recipients named twice across To, Cc and Bcc (first wins)
// and refuses a message without any.
func (p *parties) dedupe() error {
	seen := map[string]bool{}
	dedup := func(l []*mail.Address) []*mail.Address {
		var out []*mail.Address
		for _, x := range l {
			k := strings.ToLower(x.Address)
			if seen[k] {
				continue
			}
			seen[k] = true
			out = append(out, x)
		}
		return out
	}
	p.to, p.cc, p.bcc = dedup(p.to), dedup(p.cc), dedup(p.bcc)
	if len(p.to)+len(p.cc)+len(p.bcc) == 0 {
		return invalid("no recipient: give at least one of to, cc or bcc")
	}
	return nil
}

// rcpts is the envelope's recipient list: To, Cc, then Bcc.
func (p *parties) rcpts() []string {
	var out []string
	for _, l := range [][]*mail.Address{p.to, p.cc, p.bcc} {
		for _, x := range l {
			out = append(out, x.Address)
		}
	}
	return out
}
