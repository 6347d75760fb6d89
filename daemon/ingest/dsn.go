package ingest

import (
	"bufio"
	"bytes"
	"cmp"
	"maps"
	"net/textproto"
	"strings"

	"github.com/emersion/go-message"
)

// renderReport handles multipart/report; report-type=delivery-status
// (RFC 6522, RFC 3464): the human-readable part becomes the body, the
// machine-readable status becomes Parsed.DSN, and the status and returned
// message are also kept as attachments for an agent that wants details.
func (w *walker) renderReport(n *node) {
	dsn := &DSN{}
	for _, c := range n.children {
		switch {
		case c.ctype == "message/delivery-status" || c.ctype == "message/global-delivery-status":
			dsn.Recipients = append(dsn.Recipients, parseDeliveryStatus(c.body)...)
			w.attach(withName(c, "delivery-status.txt"))
		case c.ctype == "message/rfc822" || c.ctype == "text/rfc822-headers" ||
			c.ctype == "message/global" || c.ctype == "message/global-headers":
			if dsn.OriginalMessageID == "" {
				dsn.OriginalMessageID = originalMessageID(c.body)
			}
			if c.ctype == "text/rfc822-headers" || c.ctype == "message/global-headers" {
				w.attach(withName(c, "original-headers.txt"))
			} else {
				w.attach(withName(c, "original-message.eml"))
			}
		default:
			w.render(c)
		}
	}
	w.dsn = dsn
}

// withName returns a copy of n carrying a default file name when the sender
// gave none.
func withName(n *node, name string) *node {
	if filenameOf(n) != "" {
		return n
	}
	c := *n
	c.dparams = maps.Clone(n.dparams)
	if c.dparams == nil {
		c.dparams = map[string]string{}
	}
	c.dparams["filename"] = name
	return &c
}

// parseDeliveryStatus reads the per-message block and the per-recipient
// blocks of a message/delivery-status body.
func parseDeliveryStatus(body []byte) []DSNRecipient {
	r := textproto.NewReader(bufio.NewReader(bytes.NewReader(normalizeBlocks(body))))
	var out []DSNRecipient
	first := true
	for len(out) < 1000 {
		h, err := r.ReadMIMEHeader()
		if len(h) > 0 {
			if !first || h.Get("Final-Recipient") != "" || h.Get("Original-Recipient") != "" {
				if rcpt := recipientFrom(h); rcpt.Address != "" || rcpt.Status != "" {
					out = append(out, rcpt)
				}
			}
			first = false
		}
		if err != nil {
			break
		}
	}
	return out
}

// normalizeBlocks makes the blank lines between DSN blocks reliable: some
// generators add whitespace-only lines or several blank lines, which the
// header reader would otherwise take as folded content or stop at.
func normalizeBlocks(body []byte) []byte {
	var b strings.Builder
	blank := true // also drops leading blank lines
	for l := range strings.SplitSeq(strings.ReplaceAll(string(body), "\r\n", "\n"), "\n") {
		if strings.TrimSpace(l) == "" {
			if !blank {
				b.WriteString("\r\n")
			}
			blank = true
			continue
		}
		blank = false
		b.WriteString(l)
		b.WriteString("\r\n")
	}
	// Terminate the last block and add an empty one so the reader ends cleanly.
	b.WriteString("\r\n")
	return []byte(b.String())
}

func recipientFrom(h textproto.MIMEHeader) DSNRecipient {
	addr := cmp.Or(stripType(h.Get("Final-Recipient")), stripType(h.Get("Original-Recipient")))
	return DSNRecipient{
		Address:    cleanText(strings.Trim(addr, "<>"), 512),
		Action:     strings.ToLower(cleanText(h.Get("Action"), 64)),
		Status:     cleanText(firstField(h.Get("Status")), 32),
		Diagnostic: cleanText(stripType(h.Get("Diagnostic-Code")), 2048),
	}
}

// stripType removes the "rfc822;" or "smtp;" type prefix of DSN fields.
func stripType(v string) string {
	if _, after, ok := strings.Cut(v, ";"); ok {
		v = after
	}
	return strings.TrimSpace(v)
}

func firstField(v string) string {
	if f := strings.Fields(v); len(f) > 0 {
		return f[0]
	}
	return ""
}

// originalMessageID reads the Message-ID from a returned message or its
// headers.
func originalMessageID(body []byte) string {
	e, _ := message.Read(guardHeaders(bytes.NewReader(body), "", true))
	if e == nil {
		return ""
	}
	return firstMsgID(e.Header.Get("Message-Id"))
}
