// Package ingest turns a raw RFC 5322 message into the agent-facing view the
// store keeps: frontmatter fields, a Markdown body, attachment files and, for
// delivery status notifications, the per-recipient report.
//
// Input comes from the internet, so Parse is written for hostile bytes: it
// never panics, bounds nesting depth, part count and decoded sizes, and
// degrades to a best-effort result instead of failing on malformed MIME.
package ingest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/mail"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/emersion/go-message"
	_ "github.com/emersion/go-message/charset" // register every charset go-message knows
	gomail "github.com/emersion/go-message/mail"

	"github.com/mailctl/mailctl/store"
)

// Defaults for zero Options fields.
const (
	DefaultMaxParts           = 100
	DefaultMaxAttachmentBytes = 25 << 20
	DefaultMaxBodyChars       = 1 << 20
	// MaxDepth bounds multipart nesting; real mail rarely goes past 5.
	MaxDepth = 16
)

// Options bounds the work and memory Parse spends on one message.
type Options struct {
	// MaxParts is the most MIME parts (leaves and containers) examined;
	// parts beyond it are ignored. Default 100.
	MaxParts int
	// MaxAttachmentBytes is the largest decoded attachment kept; larger ones
	// are dropped and mentioned in the body. Default 25 MiB.
	MaxAttachmentBytes int64
	// MaxBodyChars bounds the Markdown body in characters; a longer body is
	// cut and marked as truncated. Default 1 Mi characters.
	MaxBodyChars int
	// Spill, when set, makes each attachment larger than SpillAt bytes: its
	// decoded bytes are written there as they stream in instead of being
	// held (a message too large to hold is parsed this way). The spills of
	// Parsed.Attachments are the caller's (see Parsed.Discard); the others
	// are discarded by the parse.
	Spill func() (*store.Spill, error)
}

// SpillAt is the size past which an attachment goes to Options.Spill.
const SpillAt = 64 << 10

// maxTextBytes bounds the text held from all text parts together (each is
// also bounded by MaxBodyChars), so that a message of many long text parts
// costs no more memory than one.
const maxTextBytes = 8 << 20

func (o Options) withDefaults() Options {
	if o.MaxParts <= 0 {
		o.MaxParts = DefaultMaxParts
	}
	if o.MaxAttachmentBytes <= 0 {
		o.MaxAttachmentBytes = DefaultMaxAttachmentBytes
	}
	if o.MaxBodyChars <= 0 {
		o.MaxBodyChars = DefaultMaxBodyChars
	}
	return o
}

// Parsed is the result of Parse.
type Parsed struct {
	// Msg has the header-derived fields filled. ID, Mailbox, DeliveredTo,
	// ReceivedAt and the trust fields are left for the caller.
	Msg store.Message
	// Body is the Markdown view of the message text.
	Body string
	// Attachments are the attachment and inline parts, names sanitized.
	Attachments []store.AttachmentData
	// DSN is set when the message is a delivery status notification
	// (multipart/report; report-type=delivery-status).
	DSN *DSN
}

// DSN is a parsed delivery status notification (RFC 3464).
type DSN struct {
	// OriginalMessageID is the Message-ID (without <>) of the message the
	// report is about, taken from the returned message or its headers.
	OriginalMessageID string
	Recipients        []DSNRecipient
}

// DSNRecipient is one per-recipient block of a delivery status report.
type DSNRecipient struct {
	Address    string // Final-Recipient (or Original-Recipient), without the address type
	Action     string // failed, delayed, delivered, relayed, expanded
	Status     string // e.g. "5.1.1"
	Diagnostic string // Diagnostic-Code, without the type
}

// ErrEmpty is returned for an input with no bytes at all.
var ErrEmpty = errors.New("ingest: empty message")

// Parse reads a raw message. It returns an error only when the input holds
// nothing usable; malformed parts are skipped or kept as opaque attachments.
func Parse(raw []byte, opts Options) (*Parsed, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, ErrEmpty
	}
	return ParseFrom(func() io.Reader { return bytes.NewReader(raw) }, int64(len(raw)), opts)
}

// ParseFrom is Parse for a message of size bytes that is read, as it is
// parsed, from open: nothing of it is held but the text of its body (at
// most MaxBodyChars characters per part) and, unless Options.Spill takes
// them, its attachments. open is called once, and a second time only when
// the message has no readable header.
func ParseFrom(open func() io.Reader, size int64, opts Options) (p *Parsed, err error) {
	if size == 0 {
		return nil, ErrEmpty
	}
	opts = opts.withDefaults()
	w := &walker{opts: opts, sizeHint: size, names: map[string]int{}, textLeft: maxTextBytes}
	defer func() {
		// The MIME and HTML libraries are large; a bug in them must cost one
		// message its Markdown view, never the daemon.
		if r := recover(); r != nil {
			w.discardSpills(nil)
			p = fallback(open, size, opts)
			err = nil
		}
	}()

	// The guard alone decides that the header is too large, as CheckHeader
	// does: go-message's own bound counts the blank line that ends the
	// header too, which the guard does not, so it is set past the guard's.
	ent, _ := message.ReadWithOptions(guardHeaders(open(), "", true), &message.ReadOptions{MaxHeaderBytes: MaxHeaderBytes + 2})
	if ent == nil {
		// Header could not be parsed at all: keep the bytes as text.
		return fallback(open, size, opts), nil
	}

	p = &Parsed{}
	for _, n := range fillHeader(&p.Msg, gomail.Header{Header: ent.Header}) {
		w.note(n)
	}
	p.Msg.SizeBytes = size

	root := w.read(ent, 0)
	w.render(root)
	w.discardSpills(w.atts)
	if w.dsn != nil {
		p.DSN = w.dsn
		p.Msg.IsDSN = true
		p.Msg.DSNFor = w.dsn.OriginalMessageID
	}
	p.Body = w.body(opts.MaxBodyChars)
	p.Attachments = w.atts
	for _, a := range w.atts {
		n := int64(len(a.Data))
		if a.File != nil {
			n = a.File.Size()
		}
		p.Msg.Attachments = append(p.Msg.Attachments, store.Attachment{
			Filename:    a.Filename,
			ContentType: a.ContentType,
			Size:        n,
		})
	}
	return p, nil
}

// Discard removes the attachments written to spills (Options.Spill) when
// the message is not stored; after a delivery it does nothing.
func (p *Parsed) Discard() {
	for _, a := range p.Attachments {
		a.File.Discard()
	}
}

// fallback is the view of a message whose structure could not be read: the
// input as plain text, as much of it as a body holds.
func fallback(open func() io.Reader, size int64, opts Options) *Parsed {
	w := &walker{opts: opts, textLeft: maxTextBytes}
	// No header to thread by: a thread of its own, keyed by the content.
	h := sha256.New()
	r := io.TeeReader(open(), h)
	text, cut, _ := w.readText(r, false, size)
	w.truncated = cut
	io.Copy(io.Discard, r) // the rest, for the hash
	w.addText(text)
	w.note(fmt.Sprintf("the message could not be read as MIME (its header may have more than %d fields or %d bytes): it is shown as raw text", MaxHeaderFields, MaxHeaderBytes))
	p := &Parsed{Body: w.body(opts.MaxBodyChars)}
	p.Msg.SizeBytes = size
	p.Msg.ThreadID = store.ThreadID(hex.EncodeToString(h.Sum(nil)), nil, "", "", time.Time{}, "")
	return p
}

// fillHeader sets the frontmatter fields that come from the top-level header.
// It returns notes on what of them was not kept.
func fillHeader(m *store.Message, h gomail.Header) (notes []string) {
	m.MessageID = firstMsgID(h.Get("Message-Id"))
	list := func(key string) []string {
		out, more := addresses(h, key)
		if more {
			notes = append(notes, fmt.Sprintf("%s has more than %d addresses: the first %d are kept; the raw message has them all", key, MaxAddresses, MaxAddresses))
		}
		return out
	}
	if from := list("From"); len(from) > 0 {
		m.From = from[0]
	}
	m.To = list("To")
	m.Cc = list("Cc")
	m.ReplyTo = list("Reply-To")
	m.Subject = decodeText(h.Header, "Subject")
	if d, err := mail.ParseDate(strings.TrimSpace(h.Get("Date"))); err == nil {
		m.Date = d
	}
	m.InReplyTo = firstMsgID(h.Get("In-Reply-To"))
	m.References = msgIDs(h.Get("References"), MaxReferences)
	m.ListID = cleanText(decodeText(h.Header, "List-Id"), 512)
	m.AutoSubmitted = cleanText(h.Get("Auto-Submitted"), 128)
	m.ThreadID = store.ThreadID(m.MessageID, m.References, m.InReplyTo, m.From, m.Date, m.Subject)
	return notes
}

// MaxReferences bounds the References list kept; the root (first) entry is
// what threading needs and it is always kept.
const MaxReferences = 100

// MaxAddresses bounds the addresses kept of one field (To, Cc...): every one
// is a string in the frontmatter, the index and each listing.
const MaxAddresses = 1000

// addresses returns the addresses of a header field formatted as
// "Name <addr>" or "addr", at most MaxAddresses of them; more says there
// were more. A field that does not parse as an address list is split on
// commas and kept as cleaned text so that no recipient is lost.
func addresses(h gomail.Header, key string) (out []string, more bool) {
	if strings.TrimSpace(h.Get(key)) == "" {
		return nil, false
	}
	list, err := h.AddressList(key)
	if err == nil {
		// Groups such as "undisclosed-recipients:;" parse to no address.
		for _, a := range list[:min(len(list), MaxAddresses)] {
			out = append(out, formatAddress(a.Name, a.Address))
		}
		return out, len(list) > MaxAddresses
	}
	// Best effort for broken lists: decode words and split on commas.
	for part := range strings.SplitSeq(decodeText(h.Header, key), ",") {
		if part = cleanText(part, 512); part != "" {
			if len(out) == MaxAddresses {
				return out, true
			}
			if a, err := mail.ParseAddress(part); err == nil {
				part = formatAddress(a.Name, a.Address)
			}
			out = append(out, part)
		}
	}
	return out, false
}

// quoter escapes a display name put in quotes; built once, as building it
// costs more than most names it quotes.
var quoter = strings.NewReplacer(`\`, `\\`, `"`, `\"`)

func formatAddress(name, addr string) string {
	name = cleanText(name, 256)
	addr = cleanText(addr, 512)
	if name == "" || name == addr {
		return addr
	}
	// Quote names that would otherwise change how the string re-parses.
	if strings.ContainsAny(name, `"(),.:;<>@[\]`) {
		name = `"` + quoter.Replace(name) + `"`
	}
	return name + " <" + addr + ">"
}

// decodeText returns a header field with RFC 2047 words decoded in any
// charset go-message knows; undecodable words are kept as written.
func decodeText(h message.Header, key string) string {
	if v, err := h.Text(key); err == nil {
		return cleanText(v, 4096)
	}
	return cleanText(h.Get(key), 4096)
}

// cleanText makes a header value safe for one-line frontmatter: valid UTF-8,
// no control characters, folded whitespace collapsed, bounded in bytes.
func cleanText(s string, maxBytes int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	var b strings.Builder
	space := false
	for _, r := range s {
		if r == '\t' || r == '\n' || r == '\r' || r == ' ' {
			space = true
			continue
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) {
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		if b.Len()+utf8.RuneLen(r) > maxBytes {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

// msgIDs extracts up to max message ids ("<...>" tokens, brackets removed)
// from a field such as References. Ids without brackets are accepted when
// the field holds nothing else, as some clients write them that way.
func msgIDs(v string, max int) []string {
	var out []string
	rest := v
	for len(out) < max {
		i := strings.IndexByte(rest, '<')
		if i < 0 {
			break
		}
		j := strings.IndexByte(rest[i+1:], '>')
		if j < 0 {
			break
		}
		if id := cleanID(rest[i+1 : i+1+j]); id != "" {
			out = append(out, id)
		}
		rest = rest[i+1+j+1:]
	}
	if len(out) == 0 {
		for _, f := range strings.Fields(v) {
			if len(out) >= max {
				break
			}
			if id := cleanID(f); id != "" && strings.Contains(f, "@") {
				out = append(out, id)
			}
		}
	}
	return out
}

func firstMsgID(v string) string {
	ids := msgIDs(v, 1)
	if len(ids) == 0 {
		return ""
	}
	return ids[0]
}

// cleanID keeps a message id printable and bounded; ids are used in file
// names and frontmatter by the store.
func cleanID(s string) string {
	s = strings.Trim(strings.TrimSpace(s), "<>")
	var b strings.Builder
	for _, r := range s {
		if r <= ' ' || r == 0x7f || r == '<' || r == '>' || !utf8.ValidRune(r) || r == utf8.RuneError {
			continue
		}
		if b.Len()+utf8.RuneLen(r) > 998 {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

// MaxParams bounds the parameters read of a Content-Type or
// Content-Disposition. Each is kept in the part's map for the whole parse, at
// about eight times its size in the field: a message of parts with a
// megabyte of parameters each held fifteen times its size. RFC 2231 splits a
// long value into parameters too; a hundred carry a name far longer than
// the 100 bytes an attachment's keeps.
const MaxParams = 100

// cutParams is v cut before its (MaxParams+1)th ';', and whether it was.
// Semicolons in quoted values count too: a field is never cut to more
// parameters than the bound, and one cut inside a quoted value parses as a
// bare type.
func cutParams(v string) (string, bool) {
	if strings.Count(v, ";") <= MaxParams {
		return v, false
	}
	i := 0
	for range MaxParams + 1 {
		i += strings.IndexByte(v[i:], ';') + 1
	}
	return v[:i-1], true
}

// mediaType parses a Content-Type, falling back to the RFC 2045 default for
// a missing field and to application/octet-stream for an unreadable one.
func mediaType(v string) (string, map[string]string) {
	if strings.TrimSpace(v) == "" {
		return "text/plain", map[string]string{}
	}
	t, params, err := mime.ParseMediaType(v)
	if err == nil || errors.Is(err, mime.ErrInvalidMediaParameter) && t != "" {
		return strings.ToLower(t), params
	}
	// A bare type without parameters often still parses by hand.
	t = strings.ToLower(strings.TrimSpace(strings.SplitN(v, ";", 2)[0]))
	if strings.Count(t, "/") == 1 && !strings.ContainsAny(t, " \t\"") {
		return t, map[string]string{}
	}
	return "application/octet-stream", map[string]string{}
}
