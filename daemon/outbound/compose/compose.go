// Package compose turns a send request into an unsigned MIME message:
// addresses checked, threading from the parent, Markdown rendered to safe
// HTML with the Markdown as the text part, attachments typed.
package compose

import (
	"bytes"
	"cmp"
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
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/emersion/go-message/charset"
	"github.com/emersion/go-message/mail"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"

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
	// Other control characters (an ESC that starts a terminal sequence, a
	// backspace, C1 controls) end up in the header RFC 2047-encoded, and a
	// reader shows them as they are.
	if i := strings.IndexFunc(v, func(r rune) bool { return r != '\t' && unicode.IsControl(r) }); i >= 0 {
		r, _ := utf8.DecodeRuneInString(v[i:])
		return invalid("%s holds the control character %U: plain text only", field, r)
	}
	if n := longestWord(v); n > MaxHeaderWord {
		return invalid("%s has a word of %d bytes without a space; at most %d fit a header line (RFC 5322 allows 998 bytes per line)", field, n, MaxHeaderWord)
	}
	return nil
}

// MaxHeaderWord bounds a run of non-space bytes in any header value a
// caller gives (protocol.MaxHeaderWord).
const MaxHeaderWord = protocol.MaxHeaderWord

// longestWord is the length in bytes of the longest run without a space or tab.
func longestWord(s string) int {
	best := 0
	for _, w := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == '\t' }) {
		best = max(best, len(w))
	}
	return best
}

// Address lengths from RFC 5321 §4.5.3.1: a path is at most 256 octets
// with its angle brackets, a local part at most 64.
const (
	maxAddressLen = 254
	maxLocalLen   = 64
	// MaxFilenameLen is NAME_MAX: the attachment must be savable under its
	// name, and RFC 2231 percent-encoding of it still fits a header line.
	MaxFilenameLen = 255
)

// parseAddress accepts "addr" or "Name <addr>" and returns the parsed address.
func ParseAddress(field, s string) (*mail.Address, error) {
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
	if len(a.Address) > maxAddressLen || at > maxLocalLen {
		return nil, invalid("%s: %q is too long (RFC 5321: at most %d bytes, %d before the @)", field, a.Address, maxAddressLen, maxLocalLen)
	}
	dom := a.Address[at+1:]
	if strings.ContainsAny(dom, "[]") || !strings.Contains(dom, ".") && dom != "localhost" {
		return nil, invalid("%s: %q needs a domain name such as example.com", field, s)
	}
	if strings.ContainsAny(a.Address, "<> \t\"") || !dotAtom(a.Address[:at]) {
		return nil, invalid("%s: %q is not a plain address (a local part that needs quotes is not supported)", field, s)
	}
	return &mail.Address{Name: a.Name, Address: a.Address}, nil
}

// dotAtom reports whether a local part can be written without quotes (RFC
// 5322 dot-atom, with RFC 6532's UTF-8). net/mail unquotes a quoted local
// part, and the address goes into the SMTP envelope as it is: unquoted,
// "a,b"@example.com would be sent as the malformed <a,b@example.com>, and
// "x@elsewhere.test"@example.com as <x@elsewhere.test@example.com>.
func dotAtom(local string) bool {
	if local == "" || local[0] == '.' || local[len(local)-1] == '.' || strings.Contains(local, "..") {
		return false
	}
	for _, r := range local {
		switch {
		case r >= utf8.RuneSelf, 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
		case strings.ContainsRune(".!#$%&'*+-/=?^_`{|}~", r):
		default:
			return false
		}
	}
	return true
}

// parseEach parses every entry of in, stopping at the first error.
func parseEach[T any](field string, in []string, parse func(field, s string) (T, error)) ([]T, error) {
	var out []T
	for _, s := range in {
		x, err := parse(field, s)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
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

// MaxReferences bounds the ids a message's References carries: the first
// (the thread's root) and the last ones (the nearest parents), which are
// what threading readers use. A longer list, the caller's or a parent's,
// loses the ones in between.
const MaxReferences = 100

func trimReferences(refs []string) []string {
	if len(refs) <= MaxReferences {
		return refs
	}
	return append(refs[:1:1], refs[len(refs)-(MaxReferences-1):]...)
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

// thread is where a message sits in a conversation.
type thread struct {
	subject   string
	inReplyTo string
	refs      []string
}

// threadOf threads a message from the stored parent when there is one, else
// from the caller's in_reply_to and references. A reply to a stored parent
// also takes its recipients (and, with reply_all, the parent's other
// recipients) when the caller names none.
func threadOf(in Input, p *parties) (thread, error) {
	a := in.Args
	th := thread{subject: a.Subject}
	var err error
	switch {
	case in.Parent != nil:
		if th, err = replyThread(in.Parent, th); err != nil {
			return th, err
		}
		if a.AutoReply {
			to, err := autoReplyTo(in.Parent, a)
			if err != nil {
				return th, err
			}
			p.to = []*mail.Address{to}
		} else if err := replyRecipients(in.Parent, a.ReplyAll, p); err != nil {
			return th, err
		}
		if !hasRePrefix(th.subject) {
			th.subject = "Re: " + th.subject
		}
		return th, nil
	case a.InReplyTo != "":
		if th.inReplyTo, err = msgID("in_reply_to", a.InReplyTo); err != nil {
			return th, err
		}
		if th.refs, err = parseEach("references", a.References, msgID); err != nil {
			return th, err
		}
		if len(th.refs) == 0 || th.refs[len(th.refs)-1] != th.inReplyTo {
			th.refs = append(th.refs, th.inReplyTo)
		}
	case len(a.References) > 0:
		return th, invalid("references needs in_reply_to (or a reply to a stored message)")
	}
	if th.inReplyTo != "" && !hasRePrefix(th.subject) {
		th.subject = "Re: " + th.subject
	}
	return th, nil
}

func replyThread(parent *store.Message, th thread) (thread, error) {
	th.inReplyTo, th.refs = ReplyThread(parent)
	if th.subject == "" {
		th.subject = ReplySubject(parent.Subject)
	}
	return th, nil
}

// ReplyThread is what a reply to parent carries in In-Reply-To and
// References: the parent's Message-ID and its References followed by it.
// The parent's headers are its sender's: an id among them that could not
// be written as a msg-id is left out (the parent's own as well, the reply
// then threading by References alone), never a reason to refuse the reply.
func ReplyThread(parent *store.Message) (inReplyTo string, refs []string) {
	for _, r := range parent.References {
		if id, err := msgID("references", r); err == nil {
			refs = append(refs, id)
		}
	}
	if id, err := msgID("message_id", parent.MessageID); err == nil {
		inReplyTo = id
		refs = append(refs, id)
	}
	return inReplyTo, refs
}

// ReplySubject is the subject of a reply to a message with subject s: "Re: "
// before it unless it has one, made to fit a header as the caller's subject
// must (checkHeaderValue): the parent's sender chose it, and a reply that
// names none takes it. A line break or NUL becomes a space, bytes that are
// not UTF-8 become U+FFFD, and a word past MaxHeaderWord bytes is cut there.
func ReplySubject(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' || r == 0 {
			return ' '
		}
		return r
	}, s)
	s = protocol.CutWords(s, MaxHeaderWord)
	if !hasRePrefix(s) {
		s = "Re: " + s
	}
	return s
}

// replySource is where a reply to parent goes when the caller names no
// one: where the parent asked answers to go, its Reply-To, else its From.
func replySource(parent *store.Message) []string {
	if len(parent.ReplyTo) > 0 {
		return parent.ReplyTo
	}
	return []string{parent.From}
}

// ReplyRecipients is replySource without the addresses a reply cannot be
// sent to (as the address strings the parent has), or the error of the
// first when none is left.
func ReplyRecipients(parent *store.Message) ([]string, error) {
	var out []string
	for _, s := range replySource(parent) {
		if _, err := ParseAddress("parent sender", s); err == nil {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		_, err := usable("parent sender", replySource(parent))
		return nil, err
	}
	return out, nil
}

func replyRecipients(parent *store.Message, all bool, p *parties) error {
	if len(p.to) == 0 {
		var err error
		if p.to, err = usable("parent sender", replySource(parent)); err != nil {
			return err
		}
	}
	if !all {
		return nil
	}
	// The parent's other recipients are its sender's list: one address
	// that cannot be sent to costs the reply that recipient, not the reply.
	extra, _ := usable("parent recipients", slices.Concat(parent.To, parent.Cc))
	for _, x := range extra {
		if !strings.EqualFold(x.Address, p.from.Address) {
			p.cc = append(p.cc, x)
		}
	}
	return nil
}

// autoReplyTo is the one address an automatic reply to parent goes to
// (RFC 3834 section 4): the envelope sender the parent came with, never
// its Reply-To or its other recipients, so that one message naming many
// addresses cannot make an agent's responder write to each of them. A
// parent stored before its return path was recorded is answered at the
// first usable address of its Reply-To, else its From. As section 2 asks,
// nothing automatic answers a bounce (the null sender) or a message that
// is itself automatic, whatever a hook was set to fire on.
func autoReplyTo(parent *store.Message, a protocol.SendArgs) (*mail.Address, error) {
	const why = "an automatic reply goes to the return path of the message answered and nowhere else (RFC 3834)"
	switch {
	case a.ReplyAll:
		return nil, invalid("auto_reply and reply_all exclude each other: %s", why)
	case parent.Outbound:
		return nil, invalid("auto_reply answers mail received, and the message answered is one this mailbox sent: leave out auto_reply")
	case len(a.To)+len(a.Cc)+len(a.Bcc) > 0:
		return nil, invalid("auto_reply takes no to, cc or bcc: %s", why)
	case protocol.IsAutoSubmitted(parent.AutoSubmitted):
		return nil, invalid("the message answered is itself automatic (its Auto-Submitted is not \"no\"): nothing automatic answers it, so that two responders do not answer each other forever (RFC 3834); leave out auto_reply only if a person wrote this reply")
	}
	sender, recorded := parent.EnvelopeSender()
	switch {
	case recorded && sender == "", parent.IsDSN:
		return nil, invalid("the message answered came from the null sender <> (a bounce or another delivery report): nothing automatic answers it (RFC 3834)")
	case recorded:
		return ParseAddress("parent return path", sender)
	}
	l, err := usable("parent sender", replySource(parent))
	if err != nil {
		return nil, err
	}
	if len(l) == 0 {
		return nil, invalid("the message answered names no sender to reply to")
	}
	return l[0], nil
}

// usable parses the addresses of list a reply may send to, leaving out
// those it cannot (a local part that needs quotes, no domain, a broken
// header's fragment); none usable is the first one's error.
func usable(field string, list []string) ([]*mail.Address, error) {
	var out []*mail.Address
	var first error
	for _, s := range list {
		a, err := ParseAddress(field, s)
		if err != nil {
			first = cmp.Or(first, err)
			continue
		}
		out = append(out, a)
	}
	if len(out) == 0 && first != nil {
		return nil, first
	}
	return out, nil
}

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

// attachments checks the caller's attachments and gives each a type.
func attachments(in []protocol.SendAttachment) ([]store.AttachmentData, int64, error) {
	var out []store.AttachmentData
	var total int64
	for _, att := range in {
		if err := checkHeaderValue("attachment filename", att.Filename); err != nil {
			return nil, 0, err
		}
		if len(att.Filename) > MaxFilenameLen {
			return nil, 0, invalid("attachment filename has %d bytes; at most %d", len(att.Filename), MaxFilenameLen)
		}
		// A format character (a bidi override, a zero-width space) shows
		// another name than the file has: "invoice\u202Efdp.exe" reads as
		// "invoiceexe.pdf". Received names are stripped of them (store.SanitizeFilename).
		if i := strings.IndexFunc(att.Filename, func(r rune) bool { return unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp) || r == '\t' }); i >= 0 {
			r, _ := utf8.DecodeRuneInString(att.Filename[i:])
			return nil, 0, invalid("attachment filename %q holds %U, which shows another name than the file has: give the name as it reads", att.Filename, r)
		}
		if strings.TrimSpace(att.Filename) == "" || pathLikeRE.MatchString(att.Filename) {
			return nil, 0, invalid("attachment filename %q looks like a path: give the file's base name", att.Filename)
		}
		ct, data := att.ContentType, att.Data
		if ct != "" {
			if err := checkHeaderValue("attachment content_type", ct); err != nil {
				return nil, 0, err
			}
			mt, params, err := mime.ParseMediaType(ct)
			if err != nil {
				return nil, 0, invalid("attachment %q: content_type %q: %v", att.Filename, ct, err)
			}
			// The writer would put a multipart type's bytes in the message
			// unencoded, as MIME structure: what went out would not be the file.
			if strings.HasPrefix(mt, "multipart/") {
				return nil, 0, invalid("attachment %q: content_type %q: an attachment is one file, not a multipart entity: give application/octet-stream, or message/rfc822 for a whole message", att.Filename, ct)
			}
			if cs := params["charset"]; cs != "" && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "us-ascii") {
				ct, data = toUTF8(mt, params, data)
			}
			if strings.EqualFold(mt, "message/rfc822") {
				data = canonicalMessage(data)
			}
		} else {
			ct = detectType(att.Filename, att.Data)
		}
		out = append(out, store.AttachmentData{Filename: att.Filename, ContentType: ct, Data: data})
		total += int64(len(data))
	}
	return out, total, nil
}

// canonicalMessage gives an attached message in ASCII CRLF line ends (a
// .eml saved with LF is common), so that it can go unencoded as RFC 2046
// 5.2.1 asks of message/rfc822; a message holding other bytes is left as
// it is, and goes base64.
func canonicalMessage(data []byte) []byte {
	for _, b := range data {
		if b >= 0x80 || b == 0 {
			return data
		}
	}
	if !bytes.ContainsAny(data, "\r\n") {
		return data
	}
	s := strings.ReplaceAll(string(data), "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	return []byte(strings.ReplaceAll(s, "\n", "\r\n"))
}

// sevenBit reports whether data can go as a 7bit part: ASCII without NUL,
// every line end CRLF, no line over 998 bytes (RFC 5322 2.1.1).
func sevenBit(data []byte) bool {
	line := 0
	for i, b := range data {
		switch {
		case b >= 0x80 || b == 0:
			return false
		case b == '\r':
			if i+1 >= len(data) || data[i+1] != '\n' {
				return false
			}
		case b == '\n':
			if i == 0 || data[i-1] != '\r' {
				return false
			}
			line = 0
			continue
		}
		if b != '\r' {
			line++
		}
		if line > 998 {
			return false
		}
	}
	return true
}

// toUTF8 converts data, declared in a charset other than UTF-8 or US-ASCII
// (which the MIME writer refuses), to UTF-8 and says so in the type, as
// inbound text attachments are stored; a charset it does not know is
// dropped from the type and the bytes go as they are.
func toUTF8(mt string, params map[string]string, data []byte) (string, []byte) {
	cs := params["charset"]
	delete(params, "charset")
	if r, err := charset.Reader(cs, bytes.NewReader(data)); err == nil {
		if conv, err := io.ReadAll(r); err == nil {
			params["charset"] = "utf-8"
			data = conv
		}
	}
	return cmp.Or(mime.FormatMediaType(mt, params), mt), data
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

func hasRePrefix(s string) bool {
	return len(s) >= 3 && strings.EqualFold(s[:3], "re:")
}

// detectType picks a content type from the file name, then the content.
// Both say charset=utf-8 for any text (Go's MIME table adds it to every text
// type): text that is not UTF-8 loses the claim, so that a receiver does not
// read a Latin-1 file as broken UTF-8.
func detectType(name string, data []byte) string {
	t := mime.TypeByExtension(strings.ToLower(filepath.Ext(name)))
	if t == "" {
		t = http.DetectContentType(data)
	}
	mt, params, err := mime.ParseMediaType(t)
	if err != nil || !strings.HasPrefix(mt, "text/") || !strings.EqualFold(params["charset"], "utf-8") || utf8.Valid(data) {
		return t
	}
	delete(params, "charset")
	return mime.FormatMediaType(mt, params)
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
