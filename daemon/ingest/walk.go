package ingest

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"mime"
	"runtime"
	"slices"
	"strings"
	"unicode/utf8"

	htmltomarkdown "github.com/JohannesKaufmann/html-to-markdown/v2"
	"github.com/emersion/go-message"

	"github.com/mailctl/mailctl/store"
)

// node is one MIME entity read into memory. The tree is built first and
// rendered afterwards because choosing among alternatives needs to see all
// of them, and go-message parts are one-pass streams.
type node struct {
	// contentID is the part's Content-Id, cleaned; the header itself is
	// not kept, as a part's header can be as large as the part.
	contentID string
	ctype     string
	params    map[string]string
	disp      string
	dparams   map[string]string
	body      []byte // decoded leaf body (of a spilled one, the start); nil for containers
	spill     *store.Spill
	tooBig    bool // body exceeded the attachment bound and was dropped
	cut       bool // a text part cut short (readText)
	children  []*node
}

// maxHTMLBytes bounds the HTML handed to the Markdown converter.
const maxHTMLBytes = 1 << 20

type walker struct {
	opts Options
	// sizeHint is the raw message's size, which bounds the decoded body of
	// a single-part message.
	sizeHint int64
	parts    int
	text     [][]byte // body fragments in order
	atts     []store.AttachmentData
	names    map[string]int
	dsn      *DSN
	notes    []string
	// textLeft is what text parts may still hold, of maxTextBytes;
	// truncated is set when a text part shown was cut short by it or by
	// MaxBodyChars.
	textLeft  int
	truncated bool
	spills    []*store.Spill // every spill made, for discardSpills
}

// read builds the tree below e. Every part counts against MaxParts; nesting
// beyond MaxDepth is kept as one opaque part.
func (w *walker) read(e *message.Entity, depth int) *node {
	w.parts++
	n := &node{contentID: cleanID(e.Header.Get("Content-Id"))}
	ct, cutCT := cutParams(e.Header.Get("Content-Type"))
	n.ctype, n.params = mediaType(ct)
	d, cutD := cutParams(e.Header.Get("Content-Disposition"))
	if cutCT || cutD {
		w.note(fmt.Sprintf("a part has more than %d parameters in its Content-Type or Content-Disposition: the rest were ignored; the raw message has them", MaxParams))
	}
	if d != "" {
		if disp, params, err := mime.ParseMediaType(d); err == nil {
			n.disp, n.dparams = strings.ToLower(disp), params
		} else {
			n.disp = strings.ToLower(strings.TrimSpace(strings.SplitN(d, ";", 2)[0]))
		}
	}
	// go-message reads as multipart what names a multipart type (checked
	// first: parsing a leaf's parameters again costs as much as the first
	// time), with the boundary of its own parse of the field.
	if depth < MaxDepth && strings.HasPrefix(strings.ToLower(strings.TrimSpace(e.Header.Get("Content-Type"))), "multipart/") {
		_, params, _ := e.Header.ContentType()
		e.Body = guardHeaders(e.Body, params["boundary"], false)
	}
	if mr := e.MultipartReader(); mr != nil && depth < MaxDepth {
		for w.parts < w.opts.MaxParts {
			part, err := mr.NextPart()
			if err != nil {
				switch {
				case isHeaderTooLarge(err):
					w.note(fmt.Sprintf("a part's header has more than %d fields or %d bytes: it and the parts after it were skipped; the raw message has them", MaxHeaderFields, MaxHeaderBytes))
				case err != io.EOF && !message.IsUnknownCharset(err) && !message.IsUnknownEncoding(err):
					w.note("part of the message could not be read")
				}
				if part == nil {
					break
				}
			}
			n.children = append(n.children, w.read(part, depth+1))
		}
		if w.parts >= w.opts.MaxParts {
			w.note(fmt.Sprintf("message has more than %d parts; the rest were skipped", w.opts.MaxParts))
		}
		return n
	}
	if strings.HasPrefix(n.ctype, "multipart/") {
		// Too deep: keep the undecoded body as one part.
		n.ctype = "application/octet-stream"
	}
	if !isAttachment(n) {
		// Text shown in the body: only as much as a body holds is kept.
		hint := int64(0)
		if depth == 0 {
			hint = w.sizeHint // a single-part message: no larger than the message
		}
		var err error
		if n.body, n.cut, err = w.readText(e.Body, n.ctype == "text/html", hint); err != nil {
			w.note("part of the message was damaged and may be incomplete")
		}
		return n
	}
	hint := int64(0)
	if depth == 0 {
		// The whole message is this one part: it is no larger than the
		// raw message. A part of a multipart has no such bound of its own.
		hint = w.sizeHint
	}
	limit := w.opts.MaxAttachmentBytes
	first := limit
	if w.opts.Spill != nil {
		first = min(limit, SpillAt)
	}
	body, err := readPart(e.Body, first+1, hint)
	if int64(len(body)) > first && first < limit {
		// Larger than SpillAt: the rest streams into a spill.
		body, err = w.spillPart(n, body, e.Body, limit)
	}
	if int64(len(body)) > limit || n.tooBig {
		_, _ = io.Copy(io.Discard, e.Body)
		n.tooBig = true
		body = nil
	} else if err != nil {
		// Broken base64 or quoted-printable: keep what decoded.
		w.note("part of the message was damaged and may be incomplete")
	}
	n.body = body
	return n
}

// spillPart writes an attachment larger than SpillAt into a spill: start,
// what was read of it, then the rest of r, up to limit bytes. It returns
// the part's start for the report parsers (a delivery status, the header of
// a returned message); the attachment is the spill. Over the limit, or when
// no spill can be made, the part is dropped (n.tooBig).
func (w *walker) spillPart(n *node, start []byte, r io.Reader, limit int64) ([]byte, error) {
	sp, err := w.opts.Spill()
	if err != nil {
		w.note("an attachment could not be stored: " + err.Error())
		n.tooBig = true
		return nil, nil
	}
	w.spills = append(w.spills, sp)
	if _, err := sp.Write(start); err != nil {
		n.tooBig = true
		return nil, nil
	}
	_, err = io.Copy(sp, io.LimitReader(r, limit+1-int64(len(start))))
	if sp.Size() > limit {
		n.tooBig = true
		sp.Discard()
		return nil, nil
	}
	n.spill = sp
	return start[:SpillAt], err
}

// discardSpills discards the spills made but for those of keep.
func (w *walker) discardSpills(keep []store.AttachmentData) {
	for _, sp := range w.spills {
		if !slices.ContainsFunc(keep, func(a store.AttachmentData) bool { return a.File == sp }) {
			sp.Discard()
		}
	}
}

// readText reads a text part that is shown in the body: as many characters
// as MaxBodyChars (CRs not counted, as CRLF becomes LF) and one more, so that
// the body knows it was cut, or for HTML as many bytes as the converter is
// given and one more (render cuts and says so), and never more than the
// text budget left. cut says the part was cut short. hint, when not 0, is
// a bound on the part's size (a single-part message's), so that the body is
// read into one array.
func (w *walker) readText(r io.Reader, html bool, hint int64) (body []byte, cut bool, err error) {
	budget := w.textLeft
	if html {
		budget = min(budget, maxHTMLBytes+1)
	}
	max := w.opts.MaxBodyChars
	body = make([]byte, 0, min(int64(budget), max64(hint+bytes.MinRead, 4<<10)))
	chars, counted := 0, 0 // characters in body[:counted]
	for {
		if len(body) == cap(body) {
			body = slices.Grow(body, min(len(body), budget-len(body)+1))
		}
		var k int
		k, err = r.Read(body[len(body):min(cap(body), budget)])
		body = body[:len(body)+k]
		over := len(body) >= budget
		if !html && len(body) > max {
			// Past max bytes there may be more than max characters:
			// count them (the bytes that start one), a block at a time,
			// and byte by byte in the block where the cut is.
			for counted < len(body) {
				end := min(counted+4096, len(body))
				if n := textChars(body[counted:end]); chars+n <= max {
					chars, counted = chars+n, end
					continue
				}
				for ; counted < end; counted++ {
					if textChars(body[counted:counted+1]) == 1 {
						if chars++; chars > max {
							body, over = body[:counted+1], true
							break
						}
					}
				}
				break
			}
		}
		if over {
			cut = !html || len(body) < maxHTMLBytes+1
			_, _ = io.Copy(io.Discard, r)
			err = nil
			break
		}
		if err != nil {
			break
		}
	}
	if err == io.EOF {
		err = nil
	}
	w.textLeft -= len(body)
	return body, cut, err
}

// textChars is how many characters b holds as the body counts them: the
// bytes that start a UTF-8 sequence, but CRs (CRLF becomes LF). ASCII text,
// most of mail, is counted eight bytes at a time.
func textChars(b []byte) int {
	n := len(b) - bytes.Count(b, []byte{'\r'})
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b)&0x8080808080808080 != 0 {
			for _, c := range b[:8] {
				if c&0xC0 == 0x80 {
					n--
				}
			}
		}
		b = b[8:]
	}
	for _, c := range b {
		if c&0xC0 == 0x80 {
			n--
		}
	}
	return n
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func (w *walker) note(s string) {
	if !slices.Contains(w.notes, s) {
		w.notes = append(w.notes, s)
	}
}

func isText(n *node) bool {
	return n.ctype == "text/plain" || n.ctype == "text/html"
}

// isAttachment says whether a leaf is a file rather than message text.
func isAttachment(n *node) bool {
	// A text part with a file name that is not declared inline is a file.
	return n.disp == "attachment" || !isText(n) || n.disp != "inline" && filenameOf(n) != ""
}

// render walks the tree and collects text and attachments.
func (w *walker) render(n *node) {
	switch {
	case n.ctype == "multipart/alternative" && len(n.children) > 0:
		best := pickAlternative(n.children)
		for _, c := range n.children {
			if c == best {
				w.render(c)
			} else {
				w.collectFiles(c)
			}
		}
	case n.ctype == "multipart/related" && len(n.children) > 0:
		root := relatedRoot(n)
		w.render(root)
		for _, c := range n.children {
			if c != root {
				w.collectFiles(c)
			}
		}
	case n.ctype == "multipart/report" && strings.EqualFold(n.params["report-type"], "delivery-status"):
		w.renderReport(n)
	case strings.HasPrefix(n.ctype, "multipart/"):
		for _, c := range n.children {
			w.render(c)
		}
	case isAttachment(n):
		w.attach(n)
	default:
		if n.ctype == "text/html" && len(n.body) > maxHTMLBytes {
			// HTML conversion costs about a second per MiB: bound it.
			c := *n
			c.body = n.body[:maxHTMLBytes]
			n = &c
			w.note("the HTML part was cut at 1 MiB before conversion; the raw message has all of it")
		}
		w.truncated = w.truncated || n.cut
		w.addText(leafText(n))
	}
}

// collectFiles keeps the files of a part whose text is not shown, such as
// the images of an HTML alternative when the plain text was chosen.
func (w *walker) collectFiles(n *node) {
	if len(n.children) > 0 {
		for _, c := range n.children {
			w.collectFiles(c)
		}
		return
	}
	if isAttachment(n) && !strings.HasPrefix(n.ctype, "multipart/") {
		w.attach(n)
	}
}

// pickAlternative prefers text/plain (what the sender wrote for readers
// like ours), then HTML, then anything with text in it.
func pickAlternative(children []*node) *node {
	for _, want := range []string{"text/plain", "text/html"} {
		if i := slices.IndexFunc(children, func(c *node) bool { return containsType(c, want) }); i >= 0 {
			return children[i]
		}
	}
	return children[0]
}

func containsType(n *node, t string) bool {
	if n.ctype == t && !n.tooBig && n.disp != "attachment" {
		return true
	}
	switch n.ctype {
	case "multipart/related", "multipart/mixed", "multipart/alternative":
		return slices.ContainsFunc(n.children, func(c *node) bool { return containsType(c, t) })
	}
	return false
}

// relatedRoot finds the root of multipart/related: the part named by the
// start parameter, else the first part (RFC 2387).
func relatedRoot(n *node) *node {
	if start := cleanID(n.params["start"]); start != "" {
		if i := slices.IndexFunc(n.children, func(c *node) bool { return c.contentID == start }); i >= 0 {
			return n.children[i]
		}
	}
	return n.children[0]
}

// leafText is the Markdown of one inline text part. A plain text part's
// line ends are made LF in its node's own array (rendered once, the node's
// text is not read again), so that a large body is not copied for it: it
// is copied once, into the body string.
func leafText(n *node) []byte {
	if n.tooBig {
		return []byte("[text part omitted: too large]")
	}
	body := n.body
	if !utf8.Valid(body) {
		body = bytes.ToValidUTF8(body, []byte("\uFFFD"))
	}
	if n.ctype == "text/html" {
		return []byte(htmlToMarkdown(string(body)))
	}
	b := lfInPlace(body)
	if strings.EqualFold(n.params["format"], "flowed") {
		b = []byte(unflow(string(b), strings.EqualFold(n.params["delsp"], "yes")))
	}
	return b
}

// lfInPlace makes b's CRLF line ends LF, moving the bytes after each one
// back within b's own array, and returns what b then holds.
func lfInPlace(b []byte) []byte {
	i := bytes.Index(b, []byte("\r\n"))
	if i < 0 {
		return b
	}
	out := i
	for i >= 0 {
		b[out] = '\n'
		out++
		rest := b[i+2:]
		j := bytes.Index(rest, []byte("\r\n"))
		end := j
		if j < 0 {
			end = len(rest)
		}
		out += copy(b[out:], rest[:end])
		if j < 0 {
			break
		}
		i += 2 + j
	}
	return b[:out]
}

// htmlSlots bounds the HTML conversions that run at once to the processors
// that run them. The converter holds about 120 times the HTML it is given
// (a tree of every element), 120 MB for the 1 MiB it may be given, so that
// messages converted side by side, as many as there are SMTP sessions,
// would hold that many times over; one at a time per processor, they take
// no longer in all.
var htmlSlots = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))

// htmlToMarkdown converts HTML mail to Markdown; links and image references
// are kept, scripts and styles dropped. A converter failure falls back to
// the text with tags stripped rather than losing the body.
func htmlToMarkdown(s string) (out string) {
	htmlSlots <- struct{}{}
	defer func() { <-htmlSlots }()
	defer func() {
		if r := recover(); r != nil {
			out = stripTags(s)
		}
	}()
	md, err := htmltomarkdown.ConvertString(s)
	if err != nil {
		return stripTags(s)
	}
	return md
}

// stripTags is the last-resort HTML to text conversion.
func stripTags(s string) string {
	var b strings.Builder
	in := false
	for _, r := range s {
		switch {
		case r == '<':
			in = true
		case r == '>':
			in = false
		case !in:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// unflow joins format=flowed soft line breaks (RFC 3676).
func unflow(s string, delsp bool) string {
	lines := strings.Split(s, "\n")
	var b strings.Builder
	for i, l := range lines {
		last := i == len(lines)-1
		soft := !last && l != "-- " && strings.HasSuffix(l, " ")
		if soft && delsp {
			l = l[:len(l)-1]
		}
		b.WriteString(l)
		if !soft && !last {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func (w *walker) addText(s []byte) {
	if bytes.IndexByte(s, 0) >= 0 {
		s = bytes.ReplaceAll(s, []byte{0}, nil)
	}
	if !utf8.Valid(s) { // checked fast; ToValidUTF8 decodes rune by rune
		s = bytes.ToValidUTF8(s, []byte("\uFFFD"))
	}
	if len(bytes.TrimSpace(s)) == 0 {
		return
	}
	w.text = append(w.text, bytes.TrimRight(s, " \t\r\n"))
}

// readPart reads r up to max bytes into a buffer that starts at hint bytes
// (a bound on the decoded size when one is known: quoted-printable and
// base64 decode to less than they take), so that a large single-part
// message is read without regrowing. Without a hint (a part of a
// multipart) io.ReadAll reads it in growing blocks and copies them once
// into an array of its size, where a doubling buffer would copy the part
// at each doubling and keep up to twice its size until the delivery ends.
func readPart(r io.Reader, max, hint int64) ([]byte, error) {
	if hint == 0 {
		return io.ReadAll(io.LimitReader(r, max))
	}
	var buf bytes.Buffer
	buf.Grow(int(min(max, hint+bytes.MinRead)))
	_, err := buf.ReadFrom(io.LimitReader(r, max))
	return buf.Bytes(), err
}

// body joins the text fragments, bounds them, and appends the notes about
// what was skipped (after the cut, so that they are never cut themselves).
func (w *walker) body(maxChars int) string {
	var s []byte
	if len(w.text) == 1 {
		s = w.text[0] // bytes.Join would copy it
	} else {
		s = bytes.Join(w.text, []byte("\n\n"))
	}
	// A text of at most maxChars bytes has at most maxChars characters:
	// only a longer one is counted.
	if len(s) > maxChars && utf8.RuneCount(s) > maxChars {
		cut := 0
		for range maxChars {
			_, size := utf8.DecodeRune(s[cut:])
			cut += size
		}
		s = s[:cut]
		w.truncated = true
	}
	tail := ""
	if w.truncated {
		s = bytes.TrimRight(s, " \t\r\n")
		tail = "\n\n> mailctl: body truncated; the raw message has the rest"
	}
	// One copy of the text, into an array of the body's size: adding each
	// part to s would copy all of it again each time.
	size := len(s) + len(tail) + 1
	for _, n := range w.notes {
		size += len("\n\n> mailctl: ") + len(n)
	}
	var b strings.Builder
	b.Grow(size)
	b.Write(s)
	b.WriteString(tail)
	for _, n := range w.notes {
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString("> mailctl: ")
		b.WriteString(n)
	}
	if b.Len() > 0 {
		b.WriteByte('\n')
	}
	return b.String()
}

// attach stores a leaf as an attachment with a sanitized, unique name.
func (w *walker) attach(n *node) {
	name := filenameOf(n)
	if name == "" {
		name = defaultName(n, len(w.atts)+1)
	}
	name = w.unique(store.SanitizeFilename(name))
	if n.tooBig {
		w.note(fmt.Sprintf("attachment %q omitted: larger than %d bytes", name, w.opts.MaxAttachmentBytes))
		return
	}
	a := store.AttachmentData{Filename: name, ContentType: attachmentType(n), Data: n.body}
	if n.spill != nil {
		if slices.ContainsFunc(w.atts, func(b store.AttachmentData) bool { return b.File == n.spill }) {
			return // one file, one attachment
		}
		a.Data, a.File = nil, n.spill
	}
	w.atts = append(w.atts, a)
}

// attachmentType is the Content-Type an attachment is stored with. A text
// part's charset says what the stored bytes are: UTF-8 where go-message
// converted them (a charset it knows) or where none was declared and the
// text is UTF-8 (checked for one held in memory; one spilled to disk is
// taken to be), the sender's charset where it could not convert them (the
// bytes are kept as sent), and none where nothing says.
func attachmentType(n *node) string {
	if !strings.HasPrefix(n.ctype, "text/") {
		return n.ctype
	}
	cs := strings.ToLower(strings.TrimSpace(n.params["charset"]))
	switch {
	case cs == "":
		if n.spill == nil && !utf8.Valid(n.body) {
			return n.ctype
		}
	case !knownCharset(cs):
		if charsetName(cs) {
			return n.ctype + "; charset=" + cs
		}
		return n.ctype
	}
	return n.ctype + "; charset=utf-8"
}

// charsetName says whether cs can be a charset's name (RFC 2978's
// mime-charset, at most 40 characters), so that it is kept as it came.
func charsetName(cs string) bool {
	if cs == "" || len(cs) > 40 {
		return false
	}
	for _, c := range []byte(cs) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'+-^_`{}~", c) >= 0) {
			return false
		}
	}
	return true
}

// knownCharset says whether go-message converts text in charset cs (lower
// case) to UTF-8.
func knownCharset(cs string) bool {
	if cs == "utf-8" || cs == "us-ascii" {
		return true
	}
	if message.CharsetReader == nil {
		return false
	}
	_, err := message.CharsetReader(cs, strings.NewReader(""))
	return err == nil
}

// unique makes names distinct within one message: "a.txt", "a-2.txt".
func (w *walker) unique(name string) string {
	key := strings.ToLower(name)
	w.names[key]++
	if w.names[key] == 1 {
		return name
	}
	for k := w.names[key]; ; k++ {
		cand := store.NumberedFilename(name, k)
		if w.names[strings.ToLower(cand)] == 0 {
			w.names[strings.ToLower(cand)] = 1
			return cand
		}
	}
}

// filenameOf returns the sender's name for a part: the Content-Disposition
// filename (RFC 2231 decoded by mime), else the Content-Type name, with
// RFC 2047 words decoded since many clients use them there.
func filenameOf(n *node) string {
	name := cmp.Or(n.dparams["filename"], n.params["name"])
	if name == "" {
		return ""
	}
	if strings.Contains(name, "=?") {
		if dec, err := wordDecoder.DecodeHeader(name); err == nil {
			name = dec
		}
	}
	return name
}

var wordDecoder = &mime.WordDecoder{CharsetReader: message.CharsetReader}

// mailExts are the extensions of the types mail carries most, whatever the
// system's MIME table says.
var mailExts = map[string]string{"message/rfc822": ".eml", "text/plain": ".txt", "text/html": ".html"}

// defaultName names a part that came without one, from its Content-ID or
// its position, with an extension for its type.
func defaultName(n *node, i int) string {
	stem := fmt.Sprintf("attachment-%d", i)
	if cid := n.contentID; cid != "" {
		if at := strings.IndexByte(cid, '@'); at > 0 {
			cid = cid[:at]
		}
		stem = "inline-" + cid
	}
	if ext, ok := mailExts[n.ctype]; ok {
		return stem + ext
	}
	if exts, _ := mime.ExtensionsByType(n.ctype); len(exts) > 0 {
		return stem + exts[0]
	}
	if i := strings.IndexByte(n.ctype, '/'); i > 0 && i < len(n.ctype)-1 && len(n.ctype)-i < 12 {
		if sub := n.ctype[i+1:]; isToken(sub) {
			return stem + "." + sub
		}
	}
	return stem + ".bin"
}

func isToken(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-')
	})
}
