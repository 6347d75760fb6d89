package compose

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"mime"
	"regexp"
	"strings"
	"time"

	"github.com/emersion/go-message/mail"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// markdown renders GFM without html.WithUnsafe: raw HTML in the Markdown is
// replaced by a comment and javascript: links are dropped, so an agent that
// pastes untrusted text cannot smuggle markup or scripts into the HTML part.
var markdown = goldmark.New(goldmark.WithExtensions(extension.GFM))

// header is the top-level header. go-message writes fields last-set first,
// so they are set in reverse of the conventional order (Date, From, To, ...
// MIME-Version).
func header(c *Message, p *parties, now time.Time) mail.Header {
	var h mail.Header
	h.Set("MIME-Version", "1.0")
	if c.AutoSubmitted != "" {
		h.Set("Auto-Submitted", c.AutoSubmitted)
	}
	if len(c.References) > 0 {
		h.SetMsgIDList("References", c.References)
	}
	if c.InReplyTo != "" {
		h.SetMsgIDList("In-Reply-To", []string{c.InReplyTo})
	}
	h.SetMessageID(c.MessageID)
	h.SetSubject(c.Subject)
	// Bcc is deliberately never set: it lives only in the envelope.
	h.SetAddressList("Reply-To", p.replyTo)
	h.SetAddressList("Cc", p.cc)
	h.SetAddressList("To", p.to)
	h.SetAddressList("From", []*mail.Address{p.from})
	h.SetDate(now)
	return h
}

// body is what the message says, as text and as HTML ("" for text only).
// markdown, when set, replaces the caller's body in the sent copy.
type body struct {
	text, html, markdown string
}

// bodies renders the caller's body: Markdown to HTML with the Markdown as the
// text part (text only when rendering it would take too long: renderable),
// plain text only, or the caller's HTML with a text fallback.
func bodies(a protocol.SendArgs) (body, error) {
	b := body{text: a.Body}
	switch {
	case a.TextOnly:
	case a.HTMLBody == "" && !renderable(a.Body):
		// Markdown goldmark would take too long over goes as text only.
	case a.HTMLBody != "":
		b.html = a.HTMLBody
		if strings.TrimSpace(b.text) == "" {
			b.text = htmlToText(a.HTMLBody)
			b.markdown = b.text
		}
	default:
		var buf bytes.Buffer
		if err := markdown.Convert([]byte(a.Body), &buf); err != nil {
			return b, fmt.Errorf("rendering Markdown: %w", err)
		}
		b.html = "<!DOCTYPE html>\r\n<html><head><meta charset=\"utf-8\"></head><body>\r\n" + buf.String() + "</body></html>\r\n"
	}
	return b, nil
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
	if len(atts) == 0 {
		return writeInline(w, h, text, htmlBody)
	}
	mw, err := mail.CreateWriter(w, h)
	if err != nil {
		return err
	}
	if err := writeMixedText(mw, text, htmlBody); err != nil {
		return err
	}
	for _, a := range atts {
		if err := writeAttachment(mw, a); err != nil {
			return err
		}
	}
	return mw.Close()
}

// writeInline writes a message without attachments: a single text/plain
// body, or text and HTML as multipart/alternative.
func writeInline(w io.Writer, h mail.Header, text, htmlBody string) error {
	if htmlBody == "" {
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("Content-Transfer-Encoding", "quoted-printable")
		sw, err := mail.CreateSingleInlineWriter(w, h)
		if err != nil {
			return err
		}
		return writeText(sw, text)
	}
	iw, err := mail.CreateInlineWriter(w, h)
	if err != nil {
		return err
	}
	return writeAlternative(iw, text, htmlBody)
}

// writeMixedText writes the first part of a multipart/mixed message: the
// text, or text and HTML as multipart/alternative.
func writeMixedText(mw *mail.Writer, text, htmlBody string) error {
	if htmlBody == "" {
		sw, err := mw.CreateSingleInline(textHeader("text/plain"))
		if err != nil {
			return err
		}
		return writeText(sw, text)
	}
	iw, err := mw.CreateInline()
	if err != nil {
		return err
	}
	return writeAlternative(iw, text, htmlBody)
}

// writeAlternative writes the text and the HTML as the parts of iw, in
// that order, so that clients prefer the HTML.
func writeAlternative(iw *mail.InlineWriter, text, htmlBody string) error {
	for _, p := range []struct{ ct, body string }{{"text/plain", text}, {"text/html", htmlBody}} {
		pw, err := iw.CreatePart(textHeader(p.ct))
		if err != nil {
			return err
		}
		if err := writeText(pw, p.body); err != nil {
			return err
		}
	}
	return iw.Close()
}

// writeText writes s to the part pw and closes it.
func writeText(pw io.WriteCloser, s string) error {
	if _, err := io.WriteString(pw, s); err != nil {
		return err
	}
	return pw.Close()
}

// writeAttachment writes a as the next attachment part of mw.
func writeAttachment(mw *mail.Writer, a store.AttachmentData) error {
	var ah mail.AttachmentHeader
	ah.Set("Content-Type", a.ContentType)
	// mime.FormatMediaType writes RFC 2231 (filename*=utf-8''...) for
	// non-ASCII names, which every current client decodes.
	ah.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": a.Filename}))
	// RFC 2046 5.2.1 allows a message/rfc822 part no encoding but 7bit,
	// 8bit or binary; the writer would otherwise make every attachment
	// base64. One that cannot go as 7bit still does (clients read it), as
	// mail to a server without 8BITMIME must stay 7-bit.
	if mt, _, err := mime.ParseMediaType(a.ContentType); err == nil && mt == "message/rfc822" && sevenBit(a.Data) {
		ah.Set("Content-Transfer-Encoding", "7bit")
	}
	aw, err := mw.CreateAttachment(ah)
	if err != nil {
		return err
	}
	if _, err := aw.Write(a.Data); err != nil {
		return err
	}
	return aw.Close()
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
