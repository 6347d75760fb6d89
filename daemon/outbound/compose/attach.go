package compose

import (
	"bytes"
	"cmp"
	"io"
	"mime"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/emersion/go-message/charset"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

var pathLikeRE = regexp.MustCompile(`[/\\]|^\.\.?$|^~`)

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
