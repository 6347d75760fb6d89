package store

import (
	"bytes"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// writeFrontmatter writes m as TOML, byte for byte what BurntSushi/toml's
// encoder writes for the message after sanitizeMessage (FuzzRenderMatches
// holds the two side by side): the fields in the Message's order, tables
// and arrays of tables after the other keys, omitempty fields left out
// when empty, strings repaired to UTF-8 and quoted, times the TOML can
// carry. Every message written goes through here, and the reflective
// encoder was most of what writing a sent copy cost in CPU. The struct's
// tags stay the one source of the schema: the tests fill every field of
// Message by reflection (TestEveryFieldIsWritten, FuzzRenderMatches), so a
// field added there and not here fails them.
func writeFrontmatter(b *bytes.Buffer, m *Message) {
	w := fmWriter{b: b}
	w.str("id", m.ID)
	w.str("message_id", m.MessageID)
	w.str("thread_id", m.ThreadID)
	w.str("from", m.From)
	w.strs("to", m.To)
	w.strs("cc", m.Cc)
	if len(m.Bcc) > 0 {
		w.strs("bcc", m.Bcc)
	}
	w.strs("reply_to", m.ReplyTo)
	w.str("delivered_to", m.DeliveredTo)
	w.strOmit("tag", m.Tag)
	w.str("subject", m.Subject)
	w.time("date", m.Date)
	w.time("received_at", m.ReceivedAt)
	w.strOmit("received_from_ip", m.ReceivedFromIP)
	w.strOmit("return_path", m.ReturnPath)
	w.int("size_bytes", m.SizeBytes)
	w.noTables("attachments", m.Attachments != nil && len(m.Attachments) == 0)
	w.str("in_reply_to", m.InReplyTo)
	w.strs("references", m.References)
	w.str("list_id", m.ListID)
	w.str("auto_submitted", m.AutoSubmitted)
	w.noTables("dkim", m.DKIM != nil && len(m.DKIM) == 0)
	w.str("trusted", m.Trusted)
	w.strOmit("submitted_by", m.SubmittedBy)
	w.str("mailbox", m.Mailbox)
	w.bool("read", m.Read)
	w.timePtr("read_at", m.ReadAt)
	w.strs("labels", m.Labels)
	w.boolOmit("starred", m.Starred)
	w.boolOmit("is_dsn", m.IsDSN)
	w.strOmit("dsn_for", m.DSNFor)
	w.strOmit("junk", m.Junk)
	if len(m.DNSBL) > 0 {
		w.strs("dnsbl", m.DNSBL)
	}
	w.boolOmit("outbound", m.Outbound)
	w.strOmit("delivery_status", m.DeliveryStatus)
	w.timePtr("delivered_at", m.DeliveredAt)
	w.strOmit("mail_from", m.MailFrom)
	if len(m.BounceReports) > 0 {
		w.strs("bounce_reports", m.BounceReports)
	}
	w.timePtr("send_at", m.SendAt)

	w.indent = "  "
	for _, a := range m.Attachments {
		w.table("[[attachments]]")
		w.str("filename", a.Filename)
		w.str("content_type", a.ContentType)
		w.int("size", a.Size)
		w.str("path", a.Path)
	}
	for _, r := range m.DKIM {
		w.table("[[dkim]]")
		w.authResult(r)
	}
	w.table("[spf]")
	w.authResult(m.SPF)
	w.table("[dmarc]")
	w.authResult(m.DMARC)
	for _, d := range m.DeliveryDetails {
		w.table("[[delivery_details]]")
		w.str("address", d.Address)
		w.str("status", d.Status)
		w.strOmit("detail", d.Detail)
		// The encoder's omitempty leaves integers in.
		w.int("code", int64(d.Code))
		w.int("attempts", int64(d.Attempts))
		w.timePtr("next_attempt", d.NextAttempt)
		w.timePtr("updated_at", d.UpdatedAt)
		w.strOmit("tls", d.TLS)
		w.boolOmit("captured", d.Captured)
	}
}

// fmWriter writes key = value lines, indented inside tables.
type fmWriter struct {
	b      *bytes.Buffer
	indent string
}

func (w fmWriter) key(k string) {
	w.b.WriteString(w.indent)
	w.b.WriteString(k)
	w.b.WriteString(" = ")
}

// noTables writes the empty array the encoder writes for an array of
// tables that is present but empty (a non-empty one comes after the keys).
func (w fmWriter) noTables(k string, empty bool) {
	if empty {
		w.key(k)
		w.b.WriteString("[]\n")
	}
}

// table starts a table or an element of an array of tables, after an
// empty line.
func (w fmWriter) table(header string) {
	w.b.WriteByte('\n')
	w.b.WriteString(header)
	w.b.WriteByte('\n')
}

func (w fmWriter) str(k, v string) {
	w.key(k)
	quoteTOML(w.b, v)
	w.b.WriteByte('\n')
}

func (w fmWriter) strOmit(k, v string) {
	if v != "" {
		w.str(k, v)
	}
}

// strs writes a list; a nil one is written empty, as every list of the
// frontmatter is (so a reader sees the whole schema).
func (w fmWriter) strs(k string, vs []string) {
	w.key(k)
	w.b.WriteByte('[')
	for i, v := range vs {
		if i > 0 {
			w.b.WriteString(", ")
		}
		quoteTOML(w.b, v)
	}
	w.b.WriteString("]\n")
}

// line writes a value already in TOML form.
func (w fmWriter) line(k, v string) {
	w.key(k)
	w.b.WriteString(v)
	w.b.WriteByte('\n')
}

func (w fmWriter) int(k string, v int64) { w.line(k, strconv.FormatInt(v, 10)) }

func (w fmWriter) bool(k string, v bool) { w.line(k, strconv.FormatBool(v)) }

func (w fmWriter) boolOmit(k string, v bool) {
	if v {
		w.bool(k, v)
	}
}

func (w fmWriter) time(k string, t time.Time) { w.line(k, tomlTime(t).Format(time.RFC3339Nano)) }

func (w fmWriter) timePtr(k string, t *time.Time) {
	if t != nil {
		w.time(k, *t)
	}
}

func (w fmWriter) authResult(r AuthResult) {
	w.str("result", r.Result)
	w.strOmit("domain", r.Domain)
	w.strOmit("detail", r.Detail)
}

// tomlTime is t as TOML can carry it: years 0 to 9999 (others become the
// zero time) and offsets in whole minutes (others become UTC).
func tomlTime(t time.Time) time.Time {
	if y := t.Year(); y < 0 || y > 9999 {
		return time.Time{}
	}
	if _, off := t.Zone(); off%60 != 0 {
		return t.UTC()
	}
	return t
}

// quoteEscapes are the one-letter escapes quoteTOML writes; other control
// characters are written as \u00XX.
var quoteEscapes = [256]byte{'"': '"', '\\': '\\', '\b': 'b', '\t': 't', '\n': 'n', '\f': 'f', '\r': 'r'}

// quoteTOML writes s as a TOML basic string: bytes that are not UTF-8
// become U+FFFD; quote, backslash and control characters are escaped.
func quoteTOML(b *bytes.Buffer, s string) {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	b.WriteByte('"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c != 0x7f {
			continue
		}
		b.WriteString(s[start:i])
		start = i + 1
		if e := quoteEscapes[c]; e != 0 {
			b.WriteByte('\\')
			b.WriteByte(e)
		} else {
			const hex = "0123456789abcdef"
			b.WriteString(`\u00`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		}
	}
	b.WriteString(s[start:])
	b.WriteByte('"')
}
