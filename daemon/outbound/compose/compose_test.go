package compose

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/yuin/goldmark/text"

	"github.com/mailctl/mailctl/internal/pycheck"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

func compose(t *testing.T, a protocol.SendArgs, parent *store.Message) *Message {
	t.Helper()
	c, err := Build(Input{FromName: "Agent", FromAddress: "agent@example.com", Domain: "example.com", Args: a, Parent: parent, Now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// headerBlock returns the top-level header of a raw message.
func headerBlock(raw []byte) string {
	if i := bytes.Index(raw, []byte("\r\n\r\n")); i >= 0 {
		return string(raw[:i+2])
	}
	return string(raw)
}

func TestComposeRefusesHeaderInjection(t *testing.T) {
	base := protocol.SendArgs{To: []string{"bob@remote.test"}, Subject: "hi", Body: "x"}
	tests := []struct {
		name   string
		mutate func(a *protocol.SendArgs, in *Input)
	}{
		{"LF in subject", func(a *protocol.SendArgs, _ *Input) { a.Subject = "hi\nBcc: evil@attacker.test" }},
		{"CR in subject", func(a *protocol.SendArgs, _ *Input) { a.Subject = "hi\rX-Evil: 1" }},
		{"NUL in subject", func(a *protocol.SendArgs, _ *Input) { a.Subject = "hi\x00" }},
		{"CRLF in to", func(a *protocol.SendArgs, _ *Input) {
			a.To = []string{"bob@remote.test\r\nBcc: evil@attacker.test"}
		}},
		{"LF in display name", func(a *protocol.SendArgs, _ *Input) { a.To = []string{"\"Bob\nX-Evil: 1\" <bob@remote.test>"} }},
		{"LF in from name", func(_ *protocol.SendArgs, in *Input) { in.FromName = "Agent\r\nBcc: evil@attacker.test" }},
		{"LF in cc", func(a *protocol.SendArgs, _ *Input) { a.Cc = []string{"c@remote.test\n"} }},
		{"LF in bcc", func(a *protocol.SendArgs, _ *Input) { a.Bcc = []string{"c@remote.test\nX: y"} }},
		{"LF in reply-to", func(a *protocol.SendArgs, _ *Input) { a.ReplyTo = []string{"r@remote.test\nX: y"} }},
		{"LF in in_reply_to", func(a *protocol.SendArgs, _ *Input) { a.InReplyTo = "<a@b>\r\nX-Evil: 1" }},
		{"LF in references", func(a *protocol.SendArgs, _ *Input) {
			a.InReplyTo, a.References = "a@b", []string{"c@d\nX-Evil: 1"}
		}},
		{"LF in filename", func(a *protocol.SendArgs, _ *Input) {
			a.Attachments = []protocol.SendAttachment{{Filename: "a.txt\r\nX-Evil: 1", Data: []byte("x")}}
		}},
		{"LF in content type", func(a *protocol.SendArgs, _ *Input) {
			a.Attachments = []protocol.SendAttachment{{Filename: "a.txt", ContentType: "text/plain\r\nX-Evil: 1", Data: []byte("x")}}
		}},
		{"ESC in subject", func(a *protocol.SendArgs, _ *Input) { a.Subject = "hi \x1b[2J\x1b]0;owned\x07" }},
		{"C1 control in subject", func(a *protocol.SendArgs, _ *Input) { a.Subject = "hi \u0085 there" }},
		{"backspace in display name", func(a *protocol.SendArgs, _ *Input) { a.To = []string{"\"Bob\b\b\bBoss\" <bob@remote.test>"} }},
		{"bidi override in filename", func(a *protocol.SendArgs, _ *Input) {
			a.Attachments = []protocol.SendAttachment{{Filename: "invoice\u202Efdp.exe", Data: []byte("x")}}
		}},
		{"zero-width space in filename", func(a *protocol.SendArgs, _ *Input) {
			a.Attachments = []protocol.SendAttachment{{Filename: "report\u200b.pdf", Data: []byte("x")}}
		}},
		{"path filename", func(a *protocol.SendArgs, _ *Input) {
			a.Attachments = []protocol.SendAttachment{{Filename: "../../etc/passwd", Data: []byte("x")}}
		}},
		{"windows path filename", func(a *protocol.SendArgs, _ *Input) {
			a.Attachments = []protocol.SendAttachment{{Filename: `C:\x\a.txt`, Data: []byte("x")}}
		}},
		{"dot-dot filename", func(a *protocol.SendArgs, _ *Input) {
			a.Attachments = []protocol.SendAttachment{{Filename: "..", Data: []byte("x")}}
		}},
		{"bad address", func(a *protocol.SendArgs, _ *Input) { a.To = []string{"not an address"} }},
		{"address without domain", func(a *protocol.SendArgs, _ *Input) { a.To = []string{"bob@"} }},
		{"quoted local part", func(a *protocol.SendArgs, _ *Input) { a.To = []string{`"a,b"@remote.test`} }},
		{"quoted address as local part", func(a *protocol.SendArgs, _ *Input) { a.Cc = []string{`"x@attacker.test"@remote.test`} }},
		{"no recipient", func(a *protocol.SendArgs, _ *Input) { a.To = nil }},
		{"html with text_only", func(a *protocol.SendArgs, _ *Input) { a.HTMLBody, a.TextOnly = "<p>x</p>", true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := base
			in := Input{FromName: "Agent", FromAddress: "agent@example.com", Domain: "example.com", Now: time.Now()}
			tt.mutate(&a, &in)
			in.Args = a
			c, err := Build(in)
			if protocol.CodeOf(err) != protocol.CodeInvalidInput {
				t.Fatalf("want invalid_input, got %v", err)
			}
			if c != nil {
				t.Fatal("returned a message with the error")
			}
		})
	}
}

func TestComposeBccOnlyInEnvelope(t *testing.T) {
	c := compose(t, protocol.SendArgs{To: []string{"bob@remote.test"}, Bcc: []string{"Secret Person <secret@hidden.test>"}, Subject: "hi", Body: "x"}, nil)
	// The random Message-ID and boundaries may hold "bcc" as hex: look for
	// the header field and the address, not the letters.
	lower := bytes.ToLower(c.Raw)
	if bytes.Contains(lower, []byte("secret")) || bytes.HasPrefix(lower, []byte("bcc:")) || bytes.Contains(lower, []byte("\nbcc:")) {
		t.Fatalf("Bcc leaked into the message:\n%s", c.Raw)
	}
	if got := strings.Join(c.Envelope.RcptTo, ","); got != "bob@remote.test,secret@hidden.test" {
		t.Fatalf("envelope %s", got)
	}
	if len(c.Bcc) != 1 {
		t.Fatalf("Bcc not recorded for the sent copy: %v", c.Bcc)
	}
}

func TestComposeStructure(t *testing.T) {
	tests := []struct {
		name  string
		args  protocol.SendArgs
		want  []string
		avoid []string
	}{
		{"markdown", protocol.SendArgs{Body: "**hi**"}, []string{"multipart/alternative", "text/plain", "text/html", "<strong>hi</strong>"}, []string{"multipart/mixed"}},
		{"text only", protocol.SendArgs{Body: "**hi**", TextOnly: true}, []string{"Content-Type: text/plain"}, []string{"text/html", "multipart"}},
		{"caller html", protocol.SendArgs{HTMLBody: "<p>Hello <b>there</b></p><script>x()</script>"}, []string{"multipart/alternative", "Hello there"}, nil},
		{"attachment", protocol.SendArgs{Body: "x", Attachments: []protocol.SendAttachment{{Filename: "data.csv", Data: []byte("a,b\n")}, {Filename: "blob", Data: []byte("\x89PNG\r\n\x1a\n0000")}}},
			[]string{"multipart/mixed", "text/csv", "image/png", `filename=data.csv`}, nil},
		{"auto reply", protocol.SendArgs{Body: "x", AutoReply: true}, []string{"Auto-Submitted: auto-replied"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.args.To = []string{"bob@remote.test"}
			c := compose(t, tt.args, nil)
			raw := string(c.Raw)
			for _, w := range tt.want {
				if !strings.Contains(raw, w) {
					t.Errorf("missing %q in\n%s", w, raw)
				}
			}
			for _, a := range tt.avoid {
				if strings.Contains(raw, a) {
					t.Errorf("unexpected %q in\n%s", a, raw)
				}
			}
			h := headerBlock(c.Raw)
			for _, f := range []string{"Date: ", `From: "Agent" <agent@example.com>`, "To: <bob@remote.test>", "Message-Id: <", "@example.com>", "Mime-Version: 1.0"} {
				if !strings.Contains(h, f) {
					t.Errorf("header lacks %q:\n%s", f, h)
				}
			}
			if strings.Contains(strings.ReplaceAll(raw, "\r\n", ""), "\n") {
				t.Error("bare LF in the message")
			}
		})
	}
}

func TestComposeReplyThreading(t *testing.T) {
	parent := &store.Message{MessageID: "p2@remote.test", References: []string{"p0@remote.test", "<p1@remote.test>"},
		From: "Bob <bob@remote.test>", To: []string{"agent@example.com", "carol@remote.test"}, Cc: []string{"dave@remote.test", "Agent <AGENT@example.com>"},
		Subject: "Plans"}
	c := compose(t, protocol.SendArgs{Body: "ok", ReplyAll: true}, parent)
	h := headerBlock(c.Raw)
	for _, want := range []string{"In-Reply-To: <p2@remote.test>", "References: <p0@remote.test> <p1@remote.test> <p2@remote.test>", "Subject: Re: Plans"} {
		if !strings.Contains(h, want) {
			t.Errorf("missing %q in\n%s", want, h)
		}
	}
	if got := strings.Join(c.Envelope.RcptTo, ","); got != "bob@remote.test,carol@remote.test,dave@remote.test" {
		t.Errorf("reply-all recipients %s (ourselves must be left out)", got)
	}
	// "Re: " is added once, whatever the case of an existing prefix.
	parent.Subject = "RE: Plans"
	c = compose(t, protocol.SendArgs{Body: "ok"}, parent)
	if c.Subject != "RE: Plans" || strings.Join(c.Envelope.RcptTo, ",") != "bob@remote.test" {
		t.Errorf("subject %q rcpts %v", c.Subject, c.Envelope.RcptTo)
	}
	// Reply-To of the parent wins over its From.
	parent.ReplyTo = []string{"list@remote.test"}
	c = compose(t, protocol.SendArgs{Body: "ok"}, parent)
	if strings.Join(c.Envelope.RcptTo, ",") != "list@remote.test" {
		t.Errorf("reply went to %v", c.Envelope.RcptTo)
	}
	// Threading by Message-ID alone (mailctl send --in-reply-to).
	c = compose(t, protocol.SendArgs{To: []string{"bob@remote.test"}, Subject: "Plans", Body: "ok", InReplyTo: "<x1@remote.test>"}, nil)
	if c.InReplyTo != "x1@remote.test" || strings.Join(c.References, ",") != "x1@remote.test" || c.Subject != "Re: Plans" {
		t.Errorf("in_reply_to threading: %q %v %q", c.InReplyTo, c.References, c.Subject)
	}
}

func TestComposeHTMLIsSafe(t *testing.T) {
	body := "Hello\n\n<script>alert('x')</script>\n\n<img src=x onerror=alert(1)>\n\n[click](javascript:alert(1)) and <b onclick=\"x()\">bold</b>\n\n<iframe src=\"https://evil.test\"></iframe>\n"
	c := compose(t, protocol.SendArgs{To: []string{"bob@remote.test"}, Subject: "s", Body: body}, nil)
	html := pycheck.ParseMIME(t, c.Raw)["html"].(string)
	low := strings.ToLower(html)
	for _, bad := range []string{"<script", "onerror", "onclick", "javascript:", "<iframe", "<img", "<b "} {
		if strings.Contains(low, bad) {
			t.Errorf("HTML part contains %q:\n%s", bad, html)
		}
	}
	if !strings.Contains(html, "Hello") {
		t.Errorf("HTML lost the text:\n%s", html)
	}
}

func TestComposeNonASCIIDecodesInPython(t *testing.T) {
	subject := "Grüße aus Köln – 日本語の件名 that is long enough to need folding across several encoded words"
	c, err := Build(Input{FromName: "Zoë Agent", FromAddress: "agent@example.com", Domain: "example.com", Now: time.Now(),
		Args: protocol.SendArgs{To: []string{"José Núñez <jose@remote.test>"}, Bcc: []string{"hidden@remote.test"}, Subject: subject, Body: "Ciao **ü**",
			Attachments: []protocol.SendAttachment{{Filename: "résumé 2026 – 履歴書.txt", Data: []byte("contenu é")}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(headerBlock(c.Raw), "\r\n") {
		for _, r := range line {
			if r > 127 {
				t.Fatalf("raw 8-bit header line: %q", line)
			}
		}
	}
	got := pycheck.ParseMIME(t, c.Raw)
	if got["subject"] != subject {
		t.Errorf("subject decoded as %q", got["subject"])
	}
	if got["from"] != "Zoë Agent <agent@example.com>" || got["to"] != "José Núñez <jose@remote.test>" {
		t.Errorf("names decoded as %q / %q", got["from"], got["to"])
	}
	if got["bcc"] != nil {
		t.Errorf("Bcc header present: %v", got["bcc"])
	}
	names := got["filenames"].([]any)
	if len(names) != 1 || names[0] != "résumé 2026 – 履歴書.txt" {
		t.Errorf("filename decoded as %v", names)
	}
	if atts := got["attachments"].([]any); len(atts) != 1 || atts[0] != "contenu é" {
		t.Errorf("attachment content %v", atts)
	}
	if !strings.Contains(got["text"].(string), "Ciao **ü**") || !strings.Contains(got["html"].(string), "<strong>ü</strong>") {
		t.Errorf("bodies: %q / %q", got["text"], got["html"])
	}
}

// go-message folds a word longer than a line by cutting it, and the line
// after such a cut can come out at 999 bytes. Every header value a caller
// gives is therefore bounded so that the cut never happens; this walks each
// field across the lengths where it did.
func TestHeaderLinesFitEveryLength(t *testing.T) {
	build := func(which, word string) (*Message, error) {
		a := protocol.SendArgs{To: []string{"b@r.test"}, Subject: "s", Body: "b"}
		name := "N"
		long := word + " y z"
		switch which {
		case "subject":
			a.Subject = long
		case "name":
			name = long
		case "filename":
			a.Attachments = []protocol.SendAttachment{{Filename: word + " y", Data: []byte("x")}}
		case "content_type":
			a.Attachments = []protocol.SendAttachment{{Filename: "f", ContentType: "text/plain; a=" + word, Data: []byte("x")}}
		case "to":
			a.To = []string{"\"" + long + "\" <b@r.test>"}
		}
		return Build(Input{FromName: name, FromAddress: "agent@example.com", Domain: "example.com", Args: a, Now: time.Unix(0, 0)})
	}
	for _, which := range []string{"subject", "name", "filename", "content_type", "to"} {
		// The longest word a caller may give is accepted.
		if _, err := build(which, strings.Repeat("x", min(MaxHeaderWord, MaxFilenameLen-2))); err != nil {
			t.Errorf("%s: a word at the limit is refused: %v", which, err)
		}
		for n := MaxHeaderWord - 2; n < 2100; n++ {
			c, err := build(which, strings.Repeat("x", n))
			if err != nil {
				if protocol.CodeOf(err) != protocol.CodeInvalidInput || !strings.Contains(err.Error(), which) && which != "to" {
					t.Fatalf("%s n=%d: %v", which, n, err)
				}
				continue
			}
			for _, l := range strings.Split(string(c.Raw), "\r\n") {
				if len(l) > 998 {
					t.Fatalf("%s with a word of %d bytes: header line of %d bytes", which, n, len(l))
				}
			}
		}
	}
	long := strings.Repeat("a", 65) + "@r.test"
	if _, err := ParseAddress("to", long); protocol.CodeOf(err) != protocol.CodeInvalidInput {
		t.Errorf("a 65-byte local part is accepted: %v", err)
	}
	if _, err := ParseAddress("to", "a@"+strings.Repeat("d", 250)+".test"); protocol.CodeOf(err) != protocol.CodeInvalidInput {
		t.Errorf("a 257-byte address is accepted: %v", err)
	}
	for _, a := range []string{"-bob@r.test", "Bob <-oQ/tmp/x@r.test>"} {
		if _, err := ParseAddress("to", a); protocol.CodeOf(err) != protocol.CodeInvalidInput || !strings.Contains(err.Error(), "starts with '-'") {
			t.Errorf("%q: %v, want invalid_input naming the dash", a, err)
		}
	}
	if _, err := ParseAddress("to", "bob-@r.test"); err != nil {
		t.Errorf("a dash at the end of the local part: %v", err)
	}
}

func FuzzCompose(f *testing.F) {
	f.Add("Subject", "Name", "bob@remote.test", "bcc@hidden.test", "body **md**", "file.txt", false)
	f.Add("a\r\nBcc: x@y.z", "N\nX: 1", "b@r.test\r\n", "\r\n", "<script>", "../x", true)
	f.Add("Grüße", "Zoë", "\"Q, Uoted\" <q@r.test>", "h@x.test", "", "résumé.pdf", false)
	f.Add("=?utf-8?q?x?=", "\"", "a@b.c, d@e.f", "bcc@bcc.test", "\x00", "", true)
	f.Add(strings.Repeat("x", 3000), strings.Repeat("n", 1200), "b@r.test", "c@r.test", "", strings.Repeat("é", 400)+".txt", false)
	// A word that go-message has to cut, placed so the next line came out at 999 bytes.
	f.Add(strings.Repeat("x", 1986)+" y", "N", "b@r.test", "c@r.test", "", "f.txt", false)
	f.Fuzz(func(t *testing.T, subject, name, to, bcc, body, filename string, textOnly bool) {
		a := protocol.SendArgs{To: []string{to}, Bcc: []string{bcc}, Subject: subject, Body: body, TextOnly: textOnly}
		if filename != "" {
			a.Attachments = []protocol.SendAttachment{{Filename: filename, Data: []byte(body)}}
		}
		c, err := Build(Input{FromName: name, FromAddress: "agent@example.com", Domain: "example.com", Args: a, Now: time.Unix(0, 0)})
		if err != nil {
			if protocol.CodeOf(err) != protocol.CodeInvalidInput {
				t.Fatalf("error without invalid_input: %v", err)
			}
			return
		}
		h := headerBlock(c.Raw)
		lines := strings.Split(strings.TrimSuffix(h, "\r\n"), "\r\n")
		for _, l := range lines {
			if strings.ContainsAny(l, "\r\n\x00") {
				t.Fatalf("header line with a bare CR/LF/NUL: %q", l)
			}
			if l == "" {
				t.Fatalf("empty line inside the header: %q", h)
			}
			if len(l) > 998 {
				t.Fatalf("header line of %d bytes (RFC 5322 allows 998)", len(l))
			}
		}
		low := strings.ToLower(h)
		if strings.Contains(low, "\r\nbcc:") || strings.HasPrefix(low, "bcc:") {
			t.Fatalf("Bcc header emitted:\n%s", h)
		}
		for _, r := range c.Envelope.RcptTo {
			if strings.ContainsAny(r, "\r\n\x00 <>") {
				t.Fatalf("envelope address %q", r)
			}
			inTo := false
			for _, x := range append(append([]string{}, c.To...), c.Cc...) {
				if strings.Contains(strings.ToLower(x), strings.ToLower(r)) {
					inTo = true
				}
			}
			if !inTo && strings.Contains(strings.ToLower(h), strings.ToLower(r)) && !strings.Contains(strings.ToLower(body), strings.ToLower(r)) {
				// A Bcc-only address must not appear anywhere in the header.
				if !strings.Contains(strings.ToLower(subject+name), strings.ToLower(r)) {
					t.Fatalf("Bcc address %q appears in the header:\n%s", r, h)
				}
			}
		}
	})
}

func FuzzHTMLToText(f *testing.F) {
	f.Add("<p>Hello <b>there</b></p><script>x()</script>")
	f.Add("<scr<script>ipt>alert(1)</script>&amp;&lt;&#x1F600;")
	f.Add("<style>p{}</style><br><br/><br >text\n\n\n\nmore")
	f.Fuzz(func(t *testing.T, s string) {
		out := htmlToText(s)
		if !strings.HasSuffix(out, "\n") {
			t.Fatalf("no final newline: %q", out)
		}
	})
}

// An attachment's detected type claims UTF-8 only for text that is UTF-8:
// Go's MIME table and its content sniffing both add charset=utf-8 to any
// text, which made a receiver read a Latin-1 file as broken UTF-8.
func TestAttachmentCharsetClaimsOnlyUTF8(t *testing.T) {
	for _, c := range []struct {
		name, data, want string
	}{
		{"notes.txt", "caf\xc3\xa9", "text/plain; charset=utf-8"},
		{"notes.txt", "caf\xe9", "text/plain"},
		{"README", "caf\xe9 au lait\n", "text/plain"},
		{"README", "café au lait\n", "text/plain; charset=utf-8"},
		{"page.html", "<p>caf\xe9</p>", "text/html"},
		{"blob.bin", "\x00\x01\xe9", "application/octet-stream"},
	} {
		out, _, err := attachments([]protocol.SendAttachment{{Filename: c.name, Data: []byte(c.data)}})
		if err != nil {
			t.Fatal(err)
		}
		if got := out[0].ContentType; got != c.want {
			t.Errorf("%s %q: content type %q, want %q", c.name, c.data, got, c.want)
		}
	}
}

// Markdown on which goldmark takes time growing with the square of its size
// goes as text only; ordinary Markdown of the same shapes, not as deep,
// still gets its HTML part.
func TestHostileMarkdownGoesAsText(t *testing.T) {
	indented := func(levels int) string {
		var b strings.Builder
		for i := range levels {
			b.WriteString(strings.Repeat("  ", i) + "- x\n")
		}
		return b.String()
	}
	digest := func(n int) string {
		var b strings.Builder
		b.WriteString("Today's links:\n\n")
		for i := range n {
			fmt.Fprintf(&b, "- [Item %d: a title of some length](https://news.example.org/%d) and [its comments](https://news.example.org/c/%d)\n", i, i, i)
		}
		return b.String()
	}
	tests := []struct {
		name string
		body string
		html bool
	}{
		{"link openers", strings.Repeat("[a](", 10000), false},
		{"empty links", strings.Repeat("[](", 12000), false},
		{"nested brackets", strings.Repeat("[", 10000) + strings.Repeat("]", 10000), false},
		{"quotes on one line", strings.Repeat(">", 20000) + " x\n", false},
		{"list markers on one line", strings.Repeat("- ", 10000) + "x\n", false},
		{"a list indented on each line", indented(300), false},
		{"a digest of links", digest(3000), true},
		{"a quoted thread", strings.Repeat("> ", 12) + "the first words\n\n" + strings.Repeat("> ", 11) + "a reply\n", true},
		{"a nested list", indented(12), true},
		{"JSON in a fenced block", "The data:\n\n```json\n" + jsonRows(4000) + "```\n\nas asked.\n", true},
		{"JSON in an indented block", "The data:\n\n" + strings.ReplaceAll("\n"+jsonRows(4000), "\n", "\n    ") + "\n", true},
		{"brackets after raw HTML that holds a fence", "<pre>\n```\n</pre>\n" + strings.Repeat("[", 10000) + strings.Repeat("]", 10000), false},
		{"brackets after a list item's fence", "- x\n\n  ```\n" + strings.Repeat("[a](", 10000), false},
		{"brackets after a quoted fence", "> ```\n" + strings.Repeat("[a](", 10000), false},
		{"brackets after a fence with a backtick in its info", "``` a`b\n" + strings.Repeat("[a](", 10000), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := compose(t, protocol.SendArgs{To: []string{"bob@remote.test"}, Subject: "s", Body: tt.body}, nil)
			if got := bytes.Contains(c.Raw, []byte("text/html")); got != tt.html {
				t.Errorf("HTML part: %v, want %v", got, tt.html)
			}
			if !bytes.Contains(c.Raw, []byte("text/plain")) || c.Markdown != tt.body {
				t.Error("the text part or the sent copy's Markdown is missing")
			}
		})
	}
}

// jsonRows is n lines of a JSON array of arrays, about 50 bytes and four
// '[' each.
func jsonRows(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "  [[%d, \"row\"], [%d, [\"a\", \"b\"]], [%d]],\n", i, i, i)
	}
	return b.String()
}

// A reply to a stored message takes the parent's headers, which its sender
// wrote: what of them cannot go into a header is left out or cut, never
// written, and never a reason to refuse the reply (which has no subject or
// recipients of its own to give instead).
func TestReplyToHostileParent(t *testing.T) {
	long := strings.Repeat("é", 300) // 600 bytes without a space
	tests := []struct {
		name        string
		parent      store.Message
		all         bool
		inReplyTo   string
		refs, rcpts string
		subject     string
	}{
		{"an injected parent Message-ID", store.Message{MessageID: "x@y>\r\nX-Evil: 1", From: "bob@remote.test", Subject: "s"},
			false, "", "", "bob@remote.test", "Re: s"},
		{"a parent Message-ID without @", store.Message{MessageID: "noatsign", References: []string{"r@remote.test"}, From: "bob@remote.test", Subject: "s"},
			false, "", "r@remote.test", "bob@remote.test", "Re: s"},
		{"malformed References", store.Message{MessageID: "p@remote.test", References: []string{"good@remote.test", "x(y)@z", "noatsign", "a@b>\r\nX-Evil: 1"},
			From: "bob@remote.test", Subject: "s"}, false, "p@remote.test", "good@remote.test p@remote.test", "bob@remote.test", "Re: s"},
		{"a subject with an over-long word and a line break", store.Message{MessageID: "p@remote.test", From: "bob@remote.test", Subject: "Hi " + long + "\r\nX-Evil: 1"},
			false, "p@remote.test", "p@remote.test", "bob@remote.test", "Re: Hi " + long[:400] + "  X-Evil: 1"},
		{"a Reply-To with an address that needs quotes", store.Message{MessageID: "p@remote.test", From: "bob@remote.test", ReplyTo: []string{`"a,b"@remote.test`, "list@remote.test"}, Subject: "s"},
			false, "p@remote.test", "p@remote.test", "list@remote.test", "Re: s"},
		{"reply-all with a broken Cc", store.Message{MessageID: "p@remote.test", From: "bob@remote.test", To: []string{"agent@example.com", "undisclosed"}, Cc: []string{"carol@remote.test", "x@"}, Subject: "s"},
			true, "p@remote.test", "p@remote.test", "bob@remote.test carol@remote.test", "Re: s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := compose(t, protocol.SendArgs{Body: "ok", ReplyAll: tt.all}, &tt.parent)
			if c.InReplyTo != tt.inReplyTo || strings.Join(c.References, " ") != tt.refs || strings.Join(c.Envelope.RcptTo, " ") != tt.rcpts || c.Subject != tt.subject {
				t.Errorf("in-reply-to %q references %q rcpts %q subject %q;\nwant %q %q %q %q", c.InReplyTo, c.References, c.Envelope.RcptTo, c.Subject, tt.inReplyTo, tt.refs, tt.rcpts, tt.subject)
			}
			h := headerBlock(c.Raw)
			if strings.Contains(h, "X-Evil") && !strings.Contains(h, "Subject:") || strings.Contains(h, "\r\nX-Evil") {
				t.Errorf("injected header:\n%s", h)
			}
			if tt.inReplyTo == "" && strings.Contains(h, "In-Reply-To") {
				t.Errorf("In-Reply-To without a parent id:\n%s", h)
			}
			for l := range strings.Lines(h) {
				if len(l) > 1000 {
					t.Errorf("header line of %d bytes", len(l))
				}
			}
		})
	}
	// Nobody left to answer is still refused.
	_, err := Build(Input{FromAddress: "agent@example.com", Domain: "example.com", Args: protocol.SendArgs{Body: "ok"},
		Parent: &store.Message{MessageID: "p@remote.test", ReplyTo: []string{`"a,b"@remote.test`}}})
	if protocol.CodeOf(err) != protocol.CodeInvalidInput {
		t.Errorf("a reply with no usable address: %v", err)
	}
}

// Every header field is bounded before it is written: the MIME writer
// folds a field in time growing with the square of its length, and the
// policy counts recipients only after the message is built. References
// keep the thread's root and the nearest parents.
func TestHeaderFieldsAreBounded(t *testing.T) {
	var refs []string
	for i := range 250 {
		refs = append(refs, fmt.Sprintf("r%d@remote.test", i))
	}
	c := compose(t, protocol.SendArgs{To: []string{"bob@remote.test"}, Subject: "s", Body: "x", InReplyTo: "p@remote.test", References: refs}, nil)
	if len(c.References) != MaxReferences || c.References[0] != "r0@remote.test" || c.References[1] != "r152@remote.test" || c.References[MaxReferences-1] != "p@remote.test" {
		t.Errorf("references: %d, %v ... %v", len(c.References), c.References[:2], c.References[len(c.References)-1])
	}
	if h := headerBlock(c.Raw); strings.Contains(h, "<r151@remote.test>") || !strings.Contains(h, "<r0@remote.test>") {
		t.Errorf("References header:\n%s", h)
	}
	var many []string
	for i := range 3000 {
		many = append(many, fmt.Sprintf("Recipient Number %d <rcpt%d@remote.test>", i, i))
	}
	for name, a := range map[string]protocol.SendArgs{
		"to":       {To: many, Subject: "s", Body: "x"},
		"cc":       {To: []string{"bob@remote.test"}, Cc: many, Subject: "s", Body: "x"},
		"reply_to": {To: []string{"bob@remote.test"}, ReplyTo: many, Subject: "s", Body: "x"},
		"subject":  {To: []string{"bob@remote.test"}, Subject: strings.Repeat("word ", 14000), Body: "x"},
	} {
		_, err := Build(Input{FromAddress: "agent@example.com", Domain: "example.com", Args: a})
		if protocol.CodeOf(err) != protocol.CodeInvalidInput || !strings.Contains(err.Error(), name) {
			t.Errorf("%s past %d bytes: %v", name, MaxFieldBytes, err)
		}
	}
}

// Regression: a reply's subject made from the parent's kept control
// characters other than CR, LF and NUL (an ESC that starts a terminal
// sequence, a backspace, DEL, C1 controls), which a caller's subject may
// not hold: a subject the daemon builds passes the same check.
func TestReplySubjectPassesTheHeaderCheck(t *testing.T) {
	var controls []rune
	for r := rune(0); r < 0x20; r++ {
		controls = append(controls, r)
	}
	controls = append(controls, 0x7f)
	for r := rune(0x80); r <= 0x9f; r++ {
		controls = append(controls, r)
	}
	for _, r := range controls {
		s := ReplySubject("hi" + string(r) + "there")
		if err := checkHeaderValue("subject", s); err != nil {
			t.Errorf("%U: reply subject %q: %v", r, s, err)
		}
		if s != "Re: hi there" {
			t.Errorf("%U: reply subject %q, want the control as a space", r, s)
		}
	}
	c := compose(t, protocol.SendArgs{Body: "ok"}, &store.Message{MessageID: "p@remote.test", From: "bob@remote.test", Subject: "hi \x1b[2J\x1b]0;owned\x07"})
	if err := checkHeaderValue("subject", c.Subject); err != nil {
		t.Errorf("reply subject %q: %v", c.Subject, err)
	}
}

// FuzzLinkWork: the block-only read that renderable trusts never counts
// less than the renderer's own parse would: every line the renderer reads
// for links is in a block linkWork counts, as large. (A table is counted
// whole as the paragraph it is written as; a link definition the renderer
// takes out of its paragraph is counted with it.)
func FuzzLinkWork(f *testing.F) {
	for _, s := range []string{
		"a [b](c)\n",
		"```\n[[[\n```\n[x\n",
		"<pre>\n```\n</pre>\n[[[\n",
		"- x\n\n  ```\n[a](\n",
		"> ```\n[[\n",
		"``` a`b\n[[\n",
		"| a | [b |\n| - | - |\n| [c | d |\n",
		"[x]: /u\n[y\n",
		"    [code\n  [text\n",
		"<div>\n[a\n\n[b\n",
		"1. ~~~\n   [a\n[b\n",
		"\t```\n[a\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, md string) {
		if len(md) > 4096 || !renderable(md) {
			return // bounded, and nesting the line pass refuses before linkWork
		}
		src := []byte(md)
		want := blockWork(markdown.Parser().Parse(text.NewReader(src)), src)
		if got := linkWork(md); got < want {
			t.Fatalf("linkWork %d, the renderer's blocks %d: %q", got, want, md)
		}
	})
}
