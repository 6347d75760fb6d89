package compose

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/emersion/go-message/mail"

	"github.com/mailctl/mailctl/protocol"
)

// TestAttachmentTypesTheWriterRefusedOrRewrote: the MIME writer refuses
// every charset but UTF-8 and US-ASCII, so an attachment declared in
// another (a Latin-1 text file, or a stored one forwarded with the type it
// came with) failed the whole send with "writing MIME: unhandled charset";
// and it writes a multipart type's bytes unencoded as MIME structure, so
// what went out was not the file. A known charset is converted to UTF-8 and
// said so, an unknown one is dropped with the bytes kept, both in what is
// sent and in the sent copy; a multipart type is invalid_input.
func TestAttachmentTypesTheWriterRefusedOrRewrote(t *testing.T) {
	for _, c := range []struct {
		ct, data       string
		wantCT, wantAs string
	}{
		{"text/plain; charset=iso-8859-1", "caf\xe9", "text/plain; charset=utf-8", "café"},
		{"text/csv; charset=Windows-1252", "\x80 5", "text/csv; charset=utf-8", "€ 5"},
		{"text/plain; charset=x-no-such-charset", "\xe9t\xe9", "text/plain", "\xe9t\xe9"},
		{"text/plain; charset=US-ASCII", "plain", "text/plain; charset=US-ASCII", "plain"},
		{"application/octet-stream", "\x00\xe9", "application/octet-stream", "\x00\xe9"},
	} {
		a := protocol.SendArgs{To: []string{"bob@example.org"}, Subject: "s", Body: "b",
			Attachments: []protocol.SendAttachment{{Filename: "f.txt", ContentType: c.ct, Data: []byte(c.data)}}}
		m, err := Build(Input{FromAddress: "agent@example.com", Domain: "example.com", Args: a})
		if err != nil {
			t.Errorf("%q: %v", c.ct, err)
			continue
		}
		if got := m.Attachments[0]; got.ContentType != c.wantCT || string(got.Data) != c.wantAs {
			t.Errorf("%q: the sent copy keeps %q %q, want %q %q", c.ct, got.ContentType, got.Data, c.wantCT, c.wantAs)
		}
		ct, data := sentAttachment(t, m.Raw)
		if ct != c.wantCT || data != c.wantAs {
			t.Errorf("%q: sent as %q %q, want %q %q", c.ct, ct, data, c.wantCT, c.wantAs)
		}
	}
	for _, ct := range []string{"multipart/mixed; boundary=abc", "Multipart/Alternative"} {
		a := protocol.SendArgs{To: []string{"bob@example.org"}, Subject: "s", Body: "b",
			Attachments: []protocol.SendAttachment{{Filename: "f.bin", ContentType: ct, Data: []byte("--abc\r\nContent-Type: text/html\r\n\r\n<b>x</b>\r\n--abc--\r\n")}}}
		if _, err := Build(Input{FromAddress: "agent@example.com", Domain: "example.com", Args: a}); protocol.CodeOf(err) != protocol.CodeInvalidInput {
			t.Errorf("%q: %v, want invalid_input", ct, err)
		}
	}
}

// sentAttachment parses raw and returns its one attachment's type and data.
func sentAttachment(t *testing.T, raw []byte) (string, string) {
	t.Helper()
	r, err := mail.CreateReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	for {
		p, err := r.NextPart()
		if errors.Is(err, io.EOF) {
			t.Fatal("no attachment in the message")
		}
		if err != nil {
			t.Fatal(err)
		}
		if h, ok := p.Header.(*mail.AttachmentHeader); ok {
			b, err := io.ReadAll(p.Body)
			if err != nil {
				t.Fatal(err)
			}
			return h.Get("Content-Type"), string(b)
		}
	}
}

// TestAttachedMessageGoesUnencoded: RFC 2046 5.2.1 allows a message/rfc822
// part no encoding but 7bit, 8bit or binary. An attached message in ASCII
// goes as it is, its line ends made CRLF (a .eml saved with LF is common);
// one holding 8-bit bytes stays base64, since mailctl does not announce
// 8BITMIME.
func TestAttachedMessageGoesUnencoded(t *testing.T) {
	inner := "From: a@example.net\nSubject: inner\n\nhello\r\nworld\n"
	for _, c := range []struct {
		data, wantCTE, wantData string
	}{
		{inner, "7bit", strings.ReplaceAll(strings.ReplaceAll(inner, "\r\n", "\n"), "\n", "\r\n")},
		{"Subject: caf\xc3\xa9\r\n\r\nx\r\n", "base64", "Subject: caf\xc3\xa9\r\n\r\nx\r\n"},
		{"Subject: s\r\n\r\n" + strings.Repeat("x", 999) + "\r\n", "base64", "Subject: s\r\n\r\n" + strings.Repeat("x", 999) + "\r\n"},
		{"Subject: s\r\n\r\na\x00b\r\n", "base64", "Subject: s\r\n\r\na\x00b\r\n"},
	} {
		a := protocol.SendArgs{To: []string{"bob@example.org"}, Subject: "s", Body: "b",
			Attachments: []protocol.SendAttachment{{Filename: "fwd.eml", ContentType: "message/rfc822", Data: []byte(c.data)}}}
		m, err := Build(Input{FromAddress: "agent@example.com", Domain: "example.com", Args: a})
		if err != nil {
			t.Fatalf("%q: %v", c.data, err)
		}
		if got := m.Attachments[0].Data; string(got) != c.wantData {
			t.Errorf("%q: the sent copy keeps %q, want %q", c.data, got, c.wantData)
		}
		ct, data := sentAttachment(t, m.Raw)
		if ct != "message/rfc822" || data != c.wantData {
			t.Errorf("%q: sent as %q %q, want message/rfc822 %q", c.data, ct, data, c.wantData)
		}
		if want := "Content-Transfer-Encoding: " + c.wantCTE + "\r\n"; !bytes.Contains(m.Raw, []byte(want)) {
			t.Errorf("%q: the part is not sent with %q:\n%s", c.data, want, m.Raw)
		}
	}
}
