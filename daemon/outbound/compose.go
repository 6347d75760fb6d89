package outbound

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"html"
	"io"
	"mime"
	"net/http"
	netmail "net/mail"
	"path/filepath"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/emersion/go-message/mail"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// ComposeInput is everything Compose needs. FromAddress comes from the
// mailbox the caller owns, never from the caller's arguments.
type ComposeInput struct {
	FromName, FromAddress, Domain string
	Args                          protocol.SendArgs
	Parent                        *store.Message // the message replied to, or nil
	Now                           time.Time
}

// Composed is a message ready to sign.
type Composed struct {
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

// markdown renders GFM without html.WithUnsafe: raw HTML in the Markdown is
// replaced by a comment and javascript: links are dropped, so an agent that
// pastes untrusted text cannot smuggle markup or scripts into the HTML part.
var markdown = goldmark.New(goldmark.WithExtensions(extension.GFM))

func invalid(format string, args ...any) error {
	return protocol.Errorf(protocol.CodeInvalidInput, format, args...)
}

// checkHeaderValue refuses values that would end a header line early or
// confuse parsers. Folding is the writer's job, never the caller's.
func checkHeaderValue(field, v string) error {
	if strings.ContainsAny(v, "\r\n\x00") {
		return invalid("%s contains a line break or NUL, which would inject headers", field)
	}
	if !utf8.ValidString(v) {
		return invalid("%s is not valid UTF-8", field)
	}
	return nil
}

// parseAddress accepts "addr" or "Name <addr>" and returns the parsed address.
func parseAddress(field, s string) (*mail.Address, error) {
	if err := checkHeaderValue(field, s); err != nil {
		return nil, err
	}
	a, err := netmail.ParseAddress(strings.TrimSpace(s))
	if err != nil {
		return nil, invalid("%s: %q is not an email address (%v)", field, s, err)
	}
	at := strings.LastIndexByte(a.Address, '@')
	if at <= 0 || at == len(a.Address)-1 {
		return nil, invalid("%s: %q has no domain", field, s)
	}
	dom := a.Address[at+1:]
	if strings.ContainsAny(dom, "[]") || !strings.Contains(dom, ".") && dom != "localhost" {
		return nil, invalid("%s: %q needs a domain name such as example.com", field, s)
	}
	if strings.ContainsAny(a.Address, "<> \t\"") {
		return nil, invalid("%s: %q is not a plain address", field, s)
	}
	return &mail.Address{Name: a.Name, Address: a.Address}, nil
}

func parseList(field string, in []string) ([]*mail.Address, error) {
	var out []*mail.Address
	for _, s := range in {
		a, err := parseAddress(field, s)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// displayAddr is the human form kept in the sent copy (not RFC 2047 encoded).
func displayAddr(a *mail.Address) string {
	if a.Name == "" {
		return a.Address
	}
	return fmt.Sprintf("%q <%s>", a.Name, a.Address)
}

func displayList(l []*mail.Address) []string {
	var out []string
	for _, a := range l {
		out = append(out, displayAddr(a))
	}
	return out
}

// msgID normalizes a Message-ID to its form without angle brackets and
// refuses anything that cannot be a msg-id.
func msgID(field, s string) (string, error) {
	if err := checkHeaderValue(field, s); err != nil {
		return "", err
	}
	s = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "<"), ">")
	if s == "" || strings.ContainsAny(s, "<> \t()[]\\,;:\"") || !strings.Contains(s, "@") {
		return "", invalid("%s: %q is not a Message-ID (left@right)", field, s)
	}
	return s, nil
}

// newMessageID is random@domain: unguessable, so it reveals nothing and a
// reply to it can be matched to this message.
func newMessageID(domain string) string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b) + "@" + domain
}

var pathLikeRE = regexp.MustCompile(`[/\\]|^\.\.?$|^~`)

// Compose validates the request and renders the unsigned message. Every
// error is a *protocol.Error with code invalid_input.
func Compose(in ComposeInput) (*Composed, error) {
	a := in.Args
	if in.Domain == "" {
		return nil, invalid("no mail domain is configured")
	}
	if a.HTMLBody != "" && a.TextOnly {
		return nil, invalid("html_body and text_only exclude each other: choose one")
	}
	if err := checkHeaderValue("from name", in.FromName); err != nil {
		return nil, err
	}
	from, err := parseAddress("from", in.FromAddress)
	if err != nil {
		return nil, err
	}
	from.Name = in.FromName
	if err := checkHeaderValue("subject", a.Subject); err != nil {
		return nil, err
	}
	to, err := parseList("to", a.To)
	if err != nil {
		return nil, err
	}
	cc, err := parseList("cc", a.Cc)
	if err != nil {
		return nil, err
	}
	bcc, err := parseList("bcc", a.Bcc)
	if err != nil {
		return nil, err
	}
	replyTo, err := parseList("reply_to", a.ReplyTo)
	if err != nil {
		return nil, err
	}

	// Threading: from the stored parent when there is one, else from the
	// caller's in_reply_to/references.
	subject := a.Subject
	var inReplyTo string
	var refs []string
	if p := in.Parent; p != nil {
		if inReplyTo, err = msgID("parent message_id", p.MessageID); err != nil {
			return nil, err
		}
		for _, r := range p.References {
			id, err := msgID("parent references", r)
			if err != nil {
				return nil, err
			}
			refs = append(refs, id)
		}
		refs = append(refs, inReplyTo)
		if subject == "" {
			subject = p.Subject
			if err := checkHeaderValue("parent subject", subject); err != nil {
				return nil, err
			}
		}
		if len(to) == 0 {
			// Answer where the parent asked answers to go.
			src := p.ReplyTo
			if len(src) == 0 {
				src = []string{p.From}
			}
			if to, err = parseList("parent sender", src); err != nil {
				return nil, err
			}
		}
		if a.ReplyAll {
			extra, err := parseList("parent recipients", append(append([]string{}, p.To...), p.Cc...))
			if err != nil {
				return nil, err
			}
			for _, x := range extra {
				if !strings.EqualFold(x.Address, from.Address) {
					cc = append(cc, x)
				}
			}
		}
	} else if a.InReplyTo != "" {
		if inReplyTo, err = msgID("in_reply_to", a.InReplyTo); err != nil {
			return nil, err
		}
		for _, r := range a.References {
			id, err := msgID("references", r)
			if err != nil {
				return nil, err
			}
			refs = append(refs, id)
		}
		if len(refs) == 0 || refs[len(refs)-1] != inReplyTo {
			refs = append(refs, inReplyTo)
		}
	} else if len(a.References) > 0 {
		return nil, invalid("references needs in_reply_to (or a reply to a stored message)")
	}
	if inReplyTo != "" && !hasRePrefix(subject) {
		subject = "Re: " + subject
	}

	// Deduplicate recipients across To, Cc and Bcc (first wins).
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
	to = dedup(to)
	cc = dedup(cc)
	bcc = dedup(bcc)
	if len(to)+len(cc)+len(bcc) == 0 {
		return nil, invalid("no recipient: give at least one of to, cc or bcc")
	}

	c := &Composed{
		MessageID:  newMessageID(in.Domain),
		Subject:    subject,
		From:       displayAddr(from),
		To:         displayList(to),
		Cc:         displayList(cc),
		Bcc:        displayList(bcc),
		ReplyTo:    displayList(replyTo),
		InReplyTo:  inReplyTo,
		References: refs,
		Envelope:   protocol.Envelope{MailFrom: from.Address},
		Markdown:   a.Body,
	}
	for _, l := range [][]*mail.Address{to, cc, bcc} {
		for _, x := range l {
			c.Envelope.RcptTo = append(c.Envelope.RcptTo, x.Address)
		}
	}
	if a.AutoReply {
		c.AutoSubmitted = "auto-replied"
	}

	now := in.Now
	if now.IsZero() {
		now = time.Now()
	}
	// go-message writes fields last-set first, so they are set in reverse of
	// the conventional order (Date, From, To, ... MIME-Version).
	var h mail.Header
	h.Set("MIME-Version", "1.0")
	if c.AutoSubmitted != "" {
		h.Set("Auto-Submitted", c.AutoSubmitted)
	}
	if inReplyTo != "" {
		h.SetMsgIDList("References", refs)
		h.SetMsgIDList("In-Reply-To", []string{inReplyTo})
	}
	h.SetMessageID(c.MessageID)
	h.SetSubject(subject)
	// Bcc is deliberately never set: it lives only in the envelope.
	h.SetAddressList("Reply-To", replyTo)
	h.SetAddressList("Cc", cc)
	h.SetAddressList("To", to)
	h.SetAddressList("From", []*mail.Address{from})
	h.SetDate(now)

	for _, att := range a.Attachments {
		if err := checkHeaderValue("attachment filename", att.Filename); err != nil {
			return nil, err
		}
		if strings.TrimSpace(att.Filename) == "" || pathLikeRE.MatchString(att.Filename) {
			return nil, invalid("attachment filename %q looks like a path: give the file's base name", att.Filename)
		}
		ct := att.ContentType
		if ct != "" {
			if err := checkHeaderValue("attachment content_type", ct); err != nil {
				return nil, err
			}
			if _, _, err := mime.ParseMediaType(ct); err != nil {
				return nil, invalid("attachment %q: content_type %q: %v", att.Filename, ct, err)
			}
		} else {
			ct = detectType(att.Filename, att.Data)
		}
		c.Attachments = append(c.Attachments, store.AttachmentData{Filename: att.Filename, ContentType: ct, Data: att.Data})
		c.AttachmentBytes += int64(len(att.Data))
	}

	text, htmlBody := a.Body, ""
	switch {
	case a.TextOnly:
	case a.HTMLBody != "":
		htmlBody = a.HTMLBody
		if strings.TrimSpace(text) == "" {
			text = htmlToText(a.HTMLBody)
			c.Markdown = text
		}
	default:
		var buf bytes.Buffer
		if err := markdown.Convert([]byte(a.Body), &buf); err != nil {
			return nil, fmt.Errorf("rendering Markdown: %w", err)
		}
		htmlBody = "<!DOCTYPE html>\r\n<html><head><meta charset=\"utf-8\"></head><body>\r\n" + buf.String() + "</body></html>\r\n"
	}

	var out bytes.Buffer
	if err := writeBody(&out, h, text, htmlBody, c.Attachments); err != nil {
		return nil, fmt.Errorf("writing MIME: %w", err)
	}
	c.Raw = out.Bytes()
	return c, nil
}

func hasRePrefix(s string) bool {
	return len(s) >= 3 && strings.EqualFold(s[:3], "re:")
}

// detectType picks a content type from the file name, then the content.
func detectType(name string, data []byte) string {
	if t := mime.TypeByExtension(strings.ToLower(filepath.Ext(name))); t != "" {
		return t
	}
	return http.DetectContentType(data)
}

func textHeader(ct string) mail.InlineHeader {
	var ih mail.InlineHeader
	ih.Set("Content-Type", ct+"; charset=utf-8")
	ih.Set("Content-Transfer-Encoding", "quoted-printable")
	return ih
}

// writeBody writes the header and the MIME structure: text (or
// text+HTML as multipart/alternative), wrapped in multipart/mixed when there
// are attachments.
func writeBody(w io.Writer, h mail.Header, text, htmlBody string, atts []store.AttachmentData) error {
	text = toCRLF(text)
	writeAlt := func(iw *mail.InlineWriter) error {
		for _, p := range []struct{ ct, body string }{{"text/plain", text}, {"text/html", htmlBody}} {
			pw, err := iw.CreatePart(textHeader(p.ct))
			if err != nil {
				return err
			}
			if _, err := io.WriteString(pw, p.body); err != nil {
				return err
			}
			if err := pw.Close(); err != nil {
				return err
			}
		}
		return iw.Close()
	}
	if len(atts) == 0 {
		if htmlBody == "" {
			h.Set("Content-Type", "text/plain; charset=utf-8")
			h.Set("Content-Transfer-Encoding", "quoted-printable")
			sw, err := mail.CreateSingleInlineWriter(w, h)
			if err != nil {
				return err
			}
			if _, err := io.WriteString(sw, text); err != nil {
				return err
			}
			return sw.Close()
		}
		iw, err := mail.CreateInlineWriter(w, h)
		if err != nil {
			return err
		}
		return writeAlt(iw)
	}
	mw, err := mail.CreateWriter(w, h)
	if err != nil {
		return err
	}
	if htmlBody == "" {
		sw, err := mw.CreateSingleInline(textHeader("text/plain"))
		if err != nil {
			return err
		}
		if _, err := io.WriteString(sw, text); err != nil {
			return err
		}
		if err := sw.Close(); err != nil {
			return err
		}
	} else {
		iw, err := mw.CreateInline()
		if err != nil {
			return err
		}
		if err := writeAlt(iw); err != nil {
			return err
		}
	}
	for _, a := range atts {
		var ah mail.AttachmentHeader
		ah.Set("Content-Type", a.ContentType)
		// mime.FormatMediaType writes RFC 2231 (filename*=utf-8''...) for
		// non-ASCII names, which every current client decodes.
		ah.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": a.Filename}))
		aw, err := mw.CreateAttachment(ah)
		if err != nil {
			return err
		}
		if _, err := aw.Write(a.Data); err != nil {
			return err
		}
		if err := aw.Close(); err != nil {
			return err
		}
	}
	return mw.Close()
}

func toCRLF(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	return strings.ReplaceAll(s, "\n", "\r\n")
}

var (
	dropBlockRE = regexp.MustCompile(`(?is)<(script|style|head)\b.*?</(script|style|head)\s*>`)
	breakRE     = regexp.MustCompile(`(?i)<(br|/p|/div|/li|/h[1-6]|/tr)\b[^>]*>`)
	tagRE       = regexp.MustCompile(`(?s)<[^>]*>`)
	blankRE     = regexp.MustCompile(`\n{3,}`)
)

// htmlToText is the text fallback of caller-supplied HTML when no Markdown
// body came with it.
func htmlToText(s string) string {
	s = dropBlockRE.ReplaceAllString(s, "")
	s = breakRE.ReplaceAllString(s, "\n")
	s = tagRE.ReplaceAllString(s, "")
	s = html.UnescapeString(s)
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		lines = append(lines, strings.TrimSpace(l))
	}
	return strings.TrimSpace(blankRE.ReplaceAllString(strings.Join(lines, "\n"), "\n\n")) + "\n"
}
