package ingest

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mailctl/mailctl/store"
)

func load(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type attWant struct {
	name  string
	ctype string // prefix match
	data  string // substring, "" = not checked
}

func TestParse(t *testing.T) {
	tests := []struct {
		file       string
		messageID  string
		from       string
		to         []string
		cc         []string
		replyTo    []string
		subject    string
		date       time.Time
		inReplyTo  string
		refs       []string
		threadRoot string // the id whose hash is the thread id
		listID     string
		auto       string
		bodyHas    []string
		bodyNot    []string
		atts       []attWant
	}{
		{
			file: "plain.eml", messageID: "plain-1@example.org",
			from:    "Alice Example <alice@example.org>",
			to:      []string{"bob@example.com", `"Carol, C." <carol@example.com>`, "dave@example.net"},
			cc:      []string{"eve@example.com"},
			replyTo: []string{"replies@example.org"},
			subject: "Hello there", date: time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC),
			threadRoot: "plain-1@example.org", listID: "Example list <list.example.org>", auto: "no",
			bodyHas: []string{"Hi Bob,\n\nthis is plain text.\n--\nAlice\n"},
		},
		{
			file: "alternative.eml", messageID: "alt-1@example.org", from: "alice@example.org",
			to: []string{"bob@example.com"}, subject: "Über den Käfer ✓",
			inReplyTo: "plain-1@example.org", refs: []string{"root-0@example.org", "plain-1@example.org"},
			threadRoot: "root-0@example.org",
			bodyHas:    []string{"Plain version: café"}, bodyNot: []string{"HTML version"},
		},
		{
			file: "html-only.eml", messageID: "html-1@example.org", from: "News <news@example.org>",
			to: []string{"bob@example.com"}, subject: "Newsletter", threadRoot: "html-1@example.org",
			bodyHas: []string{"# Weekly news", "[the article](https://example.org/article?id=7)", "- one"},
			bodyNot: []string{"alert", "color: red", "<p>"},
		},
		{
			file: "latin1.eml", messageID: "latin1@example.fr", from: "François <francois@example.fr>",
			to: []string{"bob@example.com"}, subject: "Déjà vu", threadRoot: "latin1@example.fr",
			bodyHas: []string{"Ça coûte 5 E ? Non, très peu."},
		},
		{
			file: "iso2022jp.eml", messageID: "jis@example.jp", from: "taro@example.jp",
			to: []string{"bob@example.com"}, subject: "日本語の件名", threadRoot: "jis@example.jp",
			bodyHas: []string{"こんにちは、世界。"},
		},
		{
			file: "shiftjis.eml", messageID: "sjis@example.jp", from: "hanako@example.jp",
			to: []string{"bob@example.com"}, subject: "お知らせ", threadRoot: "sjis@example.jp",
			bodyHas: []string{"東京は晴れです。"},
		},
		{
			file: "rfc2047-subject.eml", messageID: "enc@example.org", from: "Zürich Office <zurich@example.org>",
			to: []string{"bob@example.com"}, subject: "Grüße aus Zurich +++ and more", threadRoot: "enc@example.org",
			bodyHas: []string{"Body."},
		},
		{
			file: "attachments.eml", messageID: "att@example.org", from: "mallory@example.org",
			to: []string{"bob@example.com"}, subject: "Evil names", threadRoot: "att@example.org",
			bodyHas: []string{"See attached."}, bodyNot: []string{"root:x"},
			atts: []attWant{
				{name: "passwd", ctype: "text/plain", data: "root:x:0:0"},
				{name: "exe.txt", ctype: "application/octet-stream", data: "MZ\x90\x00binary"},
				{name: strings.Repeat("a", 96) + ".pdf", ctype: "application/pdf", data: "%PDF-1.4"},
				{name: "evil.bat", ctype: "application/octet-stream", data: "echo hi"},
				{name: "été.txt", ctype: "text/plain", data: "summer"},
			},
		},
		{
			file: "inline-image.eml", messageID: "inline@example.org", from: "alice@example.org",
			to: []string{"bob@example.com"}, subject: "Picture", threadRoot: "inline@example.org",
			bodyHas: []string{"Look:", "cid:logo@example.org"},
			atts:    []attWant{{name: "inline-logo.png", ctype: "image/png", data: "\x89PNG"}},
		},
		{
			file: "nested.eml", messageID: "nested@example.org", from: "alice@example.org",
			to: []string{"bob@example.com"}, subject: "Nested", threadRoot: "nested@example.org",
			bodyHas: []string{"Nested plain body."}, bodyNot: []string{"html"},
			atts: []attWant{
				{name: "inline-pic.gif", ctype: "image/gif", data: "GIF89a"},
				{name: "data.csv", ctype: "text/csv", data: "a,b"},
				{name: "attachment-3.eml", ctype: "message/rfc822", data: "Subject: forwarded"},
			},
		},
		{
			file: "dsn-postfix.eml", messageID: "20261121120000.ABCDEF123@mx.example.com",
			from: "Mail Delivery System <MAILER-DAEMON@mx.example.com>", to: []string{"agent@mailctl.example"},
			subject: "Undelivered Mail Returned to Sender", auto: "auto-replied",
			threadRoot: "20261121120000.ABCDEF123@mx.example.com",
			bodyHas:    []string{"could not\nbe delivered"},
			atts: []attWant{
				{name: "delivery-status.txt", ctype: "message/delivery-status", data: "Final-Recipient"},
				{name: "original-headers.txt", ctype: "text/rfc822-headers", data: "<sent-42@mailctl.example>"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			raw := load(t, tt.file)
			p, err := Parse(raw, Options{})
			if err != nil {
				t.Fatal(err)
			}
			m := p.Msg
			check := func(field string, got, want any) {
				t.Helper()
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s: -want %#v +got %#v", field, want, got)
				}
			}
			check("MessageID", m.MessageID, tt.messageID)
			check("From", m.From, tt.from)
			check("To", m.To, tt.to)
			check("Cc", m.Cc, tt.cc)
			check("ReplyTo", m.ReplyTo, tt.replyTo)
			check("Subject", m.Subject, tt.subject)
			if !tt.date.IsZero() && !m.Date.Equal(tt.date) {
				t.Errorf("Date: want %v got %v", tt.date, m.Date)
			}
			check("InReplyTo", m.InReplyTo, tt.inReplyTo)
			check("References", m.References, tt.refs)
			check("ThreadID", m.ThreadID, store.ThreadID(tt.threadRoot, nil, "", "", time.Time{}, ""))
			check("ListID", m.ListID, tt.listID)
			check("AutoSubmitted", m.AutoSubmitted, tt.auto)
			check("SizeBytes", m.SizeBytes, int64(len(raw)))
			for _, s := range tt.bodyHas {
				if !strings.Contains(p.Body, s) {
					t.Errorf("body lacks %q:\n%s", s, p.Body)
				}
			}
			for _, s := range tt.bodyNot {
				if strings.Contains(p.Body, s) {
					t.Errorf("body has %q:\n%s", s, p.Body)
				}
			}
			if len(p.Attachments) != len(tt.atts) {
				var names []string
				for _, a := range p.Attachments {
					names = append(names, a.Filename)
				}
				t.Fatalf("attachments: want %d got %d %q", len(tt.atts), len(p.Attachments), names)
			}
			for i, w := range tt.atts {
				a := p.Attachments[i]
				check("attachment name", a.Filename, w.name)
				if !strings.HasPrefix(a.ContentType, w.ctype) {
					t.Errorf("attachment %q type %q, want %q", a.Filename, a.ContentType, w.ctype)
				}
				if !bytes.Contains(a.Data, []byte(w.data)) {
					t.Errorf("attachment %q data %q lacks %q", a.Filename, a.Data, w.data)
				}
				check("frontmatter attachment", m.Attachments[i].Filename, a.Filename)
				check("frontmatter size", m.Attachments[i].Size, int64(len(a.Data)))
				checkName(t, a.Filename)
			}
		})
	}
}

func TestDSN(t *testing.T) {
	p, err := Parse(load(t, "dsn-postfix.eml"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := &DSN{
		OriginalMessageID: "sent-42@mailctl.example",
		Recipients: []DSNRecipient{
			{Address: "nobody@example.com", Action: "failed", Status: "5.1.1",
				Diagnostic: "550 5.1.1 <nobody@example.com>: Recipient address rejected: User unknown"},
			{Address: "slow@example.com", Action: "delayed", Status: "4.4.1",
				Diagnostic: "connect to mx2.example.com[192.0.2.2]:25: Connection timed out"},
		},
	}
	if !reflect.DeepEqual(p.DSN, want) {
		t.Errorf("DSN:\n-want %+v\n+got  %+v", want, p.DSN)
	}
	if !p.Msg.IsDSN || p.Msg.DSNFor != "sent-42@mailctl.example" {
		t.Errorf("IsDSN=%v DSNFor=%q", p.Msg.IsDSN, p.Msg.DSNFor)
	}
	// A normal message is not a DSN.
	p, _ = Parse(load(t, "plain.eml"), Options{})
	if p.DSN != nil || p.Msg.IsDSN {
		t.Errorf("plain message marked as DSN")
	}
}

func TestDSNWithReturnedMessage(t *testing.T) {
	raw := "From: MAILER-DAEMON@x.example\r\nSubject: failure\r\nMIME-Version: 1.0\r\n" +
		"Content-Type: multipart/report; report-type=\"delivery-status\"; boundary=b\r\n\r\n" +
		"--b\r\nContent-Type: text/plain\r\n\r\nFailed.\r\n" +
		"--b\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; x.example\r\n\r\n" +
		"Final-Recipient: rfc822;<who@y.example>\r\nAction: failed\r\nStatus: 5.0.0 (permanent failure)\r\n\r\n" +
		"--b\r\nContent-Type: message/rfc822\r\n\r\nMessage-ID: <orig@z.example>\r\nSubject: hi\r\n\r\nbody\r\n--b--\r\n"
	p, err := Parse([]byte(raw), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.DSN == nil || p.DSN.OriginalMessageID != "orig@z.example" || len(p.DSN.Recipients) != 1 ||
		p.DSN.Recipients[0] != (DSNRecipient{Address: "who@y.example", Action: "failed", Status: "5.0.0"}) {
		t.Errorf("DSN = %+v", p.DSN)
	}
	if len(p.Attachments) != 2 || p.Attachments[1].Filename != "original-message.eml" {
		t.Errorf("attachments = %+v", p.Attachments)
	}
}

func TestThreadIDOfAMessageWithoutIDs(t *testing.T) {
	p, _ := Parse(load(t, "no-ids.eml"), Options{})
	if p.Msg.MessageID != "" || p.Msg.ThreadID != store.ThreadID("", nil, "", "someone@example.org", p.Msg.Date, "no ids") {
		t.Errorf("no-ids: MessageID=%q ThreadID=%q", p.Msg.MessageID, p.Msg.ThreadID)
	}
}

func TestLimits(t *testing.T) {
	var b strings.Builder
	b.WriteString("Subject: many\r\nContent-Type: multipart/mixed; boundary=x\r\n\r\n")
	for i := 0; i < 300; i++ {
		b.WriteString("--x\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=f.bin\r\n\r\ndata\r\n")
	}
	b.WriteString("--x--\r\n")
	p, err := Parse([]byte(b.String()), Options{MaxParts: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Attachments) != 9 || !strings.Contains(p.Body, "more than 10 parts") {
		t.Errorf("MaxParts: %d attachments, body %q", len(p.Attachments), p.Body)
	}
	if p.Attachments[1].Filename != "f-2.bin" {
		t.Errorf("duplicate names not made unique: %q", p.Attachments[1].Filename)
	}

	big := "Subject: big\r\nContent-Type: multipart/mixed; boundary=x\r\n\r\n--x\r\nContent-Type: text/plain\r\n\r\n" +
		strings.Repeat("word ", 1000) + "\r\n--x\r\nContent-Type: application/zip\r\nContent-Disposition: attachment; filename=a.zip\r\n\r\n" +
		strings.Repeat("z", 5000) + "\r\n--x--\r\n"
	p, _ = Parse([]byte(big), Options{MaxBodyChars: 100, MaxAttachmentBytes: 1000})
	if len(p.Attachments) != 0 || !strings.Contains(p.Body, `attachment "a.zip" omitted`) || !strings.Contains(p.Body, "body truncated") {
		t.Errorf("size limits not applied: %d attachments, body %q", len(p.Attachments), p.Body)
	}

	html := "Content-Type: text/html\r\n\r\n" + strings.Repeat("<p>para</p>\r\n", 100000)
	p, _ = Parse([]byte(html), Options{})
	if !strings.Contains(p.Body, "cut at 1 MiB") || strings.Count(p.Body, "para") > 1<<20/13+1 {
		t.Errorf("HTML not bounded: %d bytes of body", len(p.Body))
	}

	// Deep nesting stops at MaxDepth without recursion blow-up.
	var deep strings.Builder
	deep.WriteString("Subject: deep\r\n")
	for i := 0; i < 200; i++ {
		deep.WriteString("Content-Type: multipart/mixed; boundary=b" + strings.Repeat("x", i) + "\r\n\r\n--b" + strings.Repeat("x", i) + "\r\n")
	}
	deep.WriteString("Content-Type: text/plain\r\n\r\ninnermost\r\n")
	if _, err := Parse([]byte(deep.String()), Options{}); err != nil {
		t.Fatal(err)
	}
}

func TestGarbage(t *testing.T) {
	for _, in := range []string{
		"not a message at all",
		"\x00\x01\x02",
		"Subject: +++\r\n\r\n+++\r\n",
		"Content-Type: multipart/mixed\r\n\r\nno boundary",
		"Content-Type: text/plain; charset=x-unknown-charset\r\n\r\nhello",
		"Content-Transfer-Encoding: base64\r\n\r\n!!!not base64!!!",
		"From: <<<>>>\r\nTo: ,,,@@@\r\nDate: yesterday\r\n\r\nx",
	} {
		p, err := Parse([]byte(in), Options{})
		if err != nil || p == nil {
			t.Errorf("Parse(%q) = %v, %v", in, p, err)
		}
	}
	if _, err := Parse(nil, Options{}); err != ErrEmpty {
		t.Errorf("empty input: %v", err)
	}
	p, _ := Parse([]byte("From: a@b.example\r\nTo: undisclosed-recipients:;\r\nCc: team: x@y.example, z@y.example;\r\n\r\nx"), Options{})
	if len(p.Msg.To) != 0 || !reflect.DeepEqual(p.Msg.Cc, []string{"x@y.example", "z@y.example"}) {
		t.Errorf("groups: To %q Cc %q", p.Msg.To, p.Msg.Cc)
	}
	p, _ = Parse([]byte("From: <<<>>>\r\nTo: a@b, broken <\r\n\r\nx"), Options{})
	if len(p.Msg.To) == 0 {
		t.Error("broken To list lost every address")
	}
}

// checkName asserts the invariants every stored attachment name keeps.
func checkName(t testing.TB, name string) {
	t.Helper()
	if name == "" || name == "." || name == ".." || strings.HasPrefix(name, ".") {
		t.Errorf("bad name %q", name)
	}
	if len(name) > 255 || !utf8.ValidString(name) || strings.ContainsAny(name, "/\\\x00") {
		t.Errorf("bad name %q", name)
	}
	for _, r := range name {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			t.Errorf("name %q has control or format character %U", name, r)
		}
	}
}

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.eml"))
	for _, file := range files {
		f.Add(load(f, filepath.Base(file)))
	}
	f.Add([]byte("Content-Type: multipart/mixed; boundary=a\r\n\r\n--a\r\nContent-Disposition: attachment; filename=\"\u202e../..\x01\"\r\n\r\nx\r\n--a--"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := Parse(raw, Options{MaxParts: 20})
		if err != nil {
			return
		}
		if len(p.Msg.ThreadID) != 16 {
			t.Fatalf("thread id %q", p.Msg.ThreadID)
		}
		for _, a := range p.Attachments {
			checkName(t, a.Filename)
		}
		if !utf8.ValidString(p.Body) || !utf8.ValidString(p.Msg.Subject) {
			t.Fatal("invalid UTF-8 in output")
		}
	})
}

// FuzzLFText: the in-place line-end conversion of text bodies says the same
// as converting to a string and replacing CRLF, for any bytes.
func FuzzLFText(f *testing.F) {
	f.Add([]byte("a\r\nb\r\n"))
	f.Add([]byte("\r\r\n\n\r"))
	f.Add([]byte("no line ends"))
	f.Add([]byte("\r\n"))
	f.Add([]byte("\r\n\r\n\r\r\nx"))
	f.Fuzz(func(t *testing.T, b []byte) {
		in := string(b)
		if got, want := string(lfInPlace(b)), strings.ReplaceAll(in, "\r\n", "\n"); got != want {
			t.Fatalf("lfInPlace(%q) = %q, want %q", in, got, want)
		}
	})
}

// format=flowed (RFC 3676): a line ending in a space is soft and joins the
// next; with delsp=yes that space goes; the signature separator "-- " and
// the last line are never soft.
func TestFlowedText(t *testing.T) {
	for _, c := range []struct {
		params, body, want string
	}{
		{"format=flowed", "Hello \r\nworld\r\n", "Hello world"},
		{"format=flowed; delsp=yes", "super \r\ncali \r\nfragile\r\n", "supercalifragile"},
		{"format=flowed", "hard\r\nbreak\r\n", "hard\nbreak"},
		{"format=flowed", "body\r\n-- \r\nsig\r\n", "body\n-- \nsig"},
		{"format=flowed", "quoted \r\n\r\nparagraph\r\n", "quoted \nparagraph"},
		{"charset=utf-8", "not \r\nflowed\r\n", "not \nflowed"},
	} {
		raw := "From: a@b.example\r\nSubject: f\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; " + c.params + "\r\n\r\n" + c.body
		p, err := Parse([]byte(raw), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimRight(p.Body, "\n"); got != c.want {
			t.Errorf("%s, %q: body %q, want %q", c.params, c.body, got, c.want)
		}
	}
}

// Two attachments of one name at the length bound used to hang the parse:
// the second was numbered, the number cut off with the excess, and the name,
// unchanged, was numbered again forever.
func TestDuplicateLongFilenamesAreToldApart(t *testing.T) {
	var b strings.Builder
	b.WriteString("Subject: files\r\nContent-Type: multipart/mixed; boundary=x\r\n\r\n")
	names := []string{strings.Repeat("n", 300) + ".txt", strings.Repeat("n", 96) + ".txt", "x." + strings.Repeat("e", 98)}
	for _, name := range names {
		for range 3 {
			b.WriteString("--x\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=\"" + name + "\"\r\n\r\ndata\r\n")
		}
	}
	b.WriteString("--x--\r\n")
	p, err := Parse([]byte(b.String()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range p.Attachments {
		checkName(t, a.Filename)
		if seen[strings.ToLower(a.Filename)] {
			t.Errorf("name %q given twice", a.Filename)
		}
		seen[strings.ToLower(a.Filename)] = true
	}
	if len(p.Attachments) != 3*len(names) {
		t.Errorf("%d attachments, want %d", len(p.Attachments), 3*len(names))
	}
}

// TestAddressBound: a field keeps its first MaxAddresses addresses, whether
// it parses as an address list or is split by hand; past the bound the body
// says so and the raw message has the rest.
func TestAddressBound(t *testing.T) {
	list := func(n int, sep string) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteString(sep)
			}
			b.WriteString("\"R\\\"" + strconv.Itoa(i) + "\" <r" + strconv.Itoa(i) + "@rcpt.example>")
		}
		return b.String()
	}
	for _, tt := range []struct {
		name string
		to   string
		want int
		more bool
	}{
		{"at the bound", list(MaxAddresses, ",\r\n "), MaxAddresses, false},
		{"past the bound", list(MaxAddresses+1, ",\r\n "), MaxAddresses, true},
		{"far past the bound", list(10*MaxAddresses, ","), MaxAddresses, true},
		{"broken list past the bound", strings.Repeat("x,", 2*MaxAddresses) + " broken <", MaxAddresses, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			raw := "From: a@sender.example\r\nTo: " + tt.to + "\r\nCc: " + tt.to + "\r\nSubject: many\r\n\r\nthe text\r\n"
			p, err := Parse([]byte(raw), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Msg.To) != tt.want || len(p.Msg.Cc) != tt.want {
				t.Errorf("To has %d addresses, Cc %d, want %d", len(p.Msg.To), len(p.Msg.Cc), tt.want)
			}
			if got := strings.Contains(p.Body, "To has more than 1000 addresses") && strings.Contains(p.Body, "Cc has more than 1000 addresses"); got != tt.more {
				t.Errorf("notes said (%v) what was not kept: %.300q", got, p.Body)
			}
			if !strings.Contains(p.Body, "the text") {
				t.Errorf("body %.300q", p.Body)
			}
			if strings.HasPrefix(tt.to, `"`) && p.Msg.To[MaxAddresses-1] != `"R\"999" <r999@rcpt.example>` {
				t.Errorf("last address kept %q", p.Msg.To[MaxAddresses-1])
			}
		})
	}
}

// TestHeaderTextBounds: the fields a sender writes freely are kept to their
// bounds however they are spread: the Subject to 4,096 bytes after
// thousands of encoded-words are decoded, References to their first 100
// ids (the root, which threading needs, is the first), and a multipart
// boundary of any length that go-message can match (a delimiter line past
// its 4 KiB buffer makes the parts unreadable: the body says so).
func TestHeaderTextBounds(t *testing.T) {
	subject := "Subject: " + strings.Repeat("=?utf-8?b?w6k=?=\r\n ", 40000) + "end\r\n"
	p, _ := Parse([]byte("From: a@sender.example\r\n"+subject+"\r\nx\r\n"), Options{})
	if len(p.Msg.Subject) != 4096 || !strings.HasPrefix(p.Msg.Subject, "ééé") || !utf8.ValidString(p.Msg.Subject) {
		t.Errorf("Subject of %d bytes: %.40q", len(p.Msg.Subject), p.Msg.Subject)
	}

	refs := func(n int) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(" <r" + strconv.Itoa(i) + "@x>\r\n")
		}
		return "References:" + b.String()
	}
	for _, n := range []int{MaxReferences, MaxReferences + 1, 50000} {
		p, _ := Parse([]byte("From: a@sender.example\r\n"+refs(n)+"\r\nx\r\n"), Options{})
		if len(p.Msg.References) != min(n, MaxReferences) || p.Msg.References[0] != "r0@x" || p.Msg.References[len(p.Msg.References)-1] != "r"+strconv.Itoa(min(n, MaxReferences)-1)+"@x" {
			t.Errorf("%d References: kept %d, %q ... %q", n, len(p.Msg.References), p.Msg.References[0], p.Msg.References[len(p.Msg.References)-1])
		}
	}

	for _, tt := range []struct {
		n        int
		readable bool
	}{{70, true}, {4000, true}, {5000, false}, {100000, false}} {
		b := strings.Repeat("b", tt.n)
		raw := "From: a@sender.example\r\nContent-Type: multipart/mixed; boundary=" + b + "\r\n\r\n--" + b + "\r\nContent-Type: text/plain\r\n\r\nthe text\r\n--" + b + "--\r\n"
		p, err := Parse([]byte(raw), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(p.Body, "the text"); got != tt.readable || !tt.readable && !strings.Contains(p.Body, "could not be read") {
			t.Errorf("boundary of %d bytes: body %.200q", tt.n, p.Body)
		}
	}
}

// A text attachment's stored charset says what its stored bytes are: UTF-8
// where they were converted (a charset go-message knows, whatever the text
// type), the sender's own where they could not be (kept as sent; they were
// labelled utf-8), none where nothing says.
func TestTextAttachmentCharsets(t *testing.T) {
	part := func(ctype, name, body string) string {
		return "--b\r\nContent-Type: " + ctype + "\r\nContent-Disposition: attachment; filename=" + name + "\r\n\r\n" + body + "\r\n"
	}
	raw := "From: a@b.example\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n" +
		"--b\r\nContent-Type: text/plain\r\n\r\nsee attached\r\n" +
		part("text/plain; charset=iso-8859-1", "latin1.txt", "\xe9t\xe9") +
		part("text/csv; charset=windows-1252", "prices.csv", "\x80 5") +
		part("text/plain; charset=x-no-such-charset", "unknown.txt", "\xe9t\xe9") +
		part(`text/plain; charset="bad charset\"; x=1"`, "odd.txt", "abc") +
		part("text/plain", "undeclared-8bit.txt", "\xe9t\xe9") +
		part("text/plain", "undeclared.txt", "plain") +
		part("application/pdf", "doc.pdf", "%PDF") +
		"--b--\r\n"
	p, err := Parse([]byte(raw), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		"latin1.txt":          {"text/plain; charset=utf-8", "été"},
		"prices.csv":          {"text/csv; charset=utf-8", "€ 5"},
		"unknown.txt":         {"text/plain; charset=x-no-such-charset", "\xe9t\xe9"},
		"odd.txt":             {"text/plain", "abc"},
		"undeclared-8bit.txt": {"text/plain", "\xe9t\xe9"},
		"undeclared.txt":      {"text/plain; charset=utf-8", "plain"},
		"doc.pdf":             {"application/pdf", "%PDF"},
	}
	if len(p.Attachments) != len(want) {
		t.Fatalf("got %d attachments, want %d: %+v", len(p.Attachments), len(want), p.Attachments)
	}
	for _, a := range p.Attachments {
		w, ok := want[a.Filename]
		if !ok {
			t.Errorf("unexpected attachment %q", a.Filename)
			continue
		}
		if a.ContentType != w[0] || string(a.Data) != w[1] {
			t.Errorf("%s: stored as %q %q, want %q %q", a.Filename, a.ContentType, a.Data, w[0], w[1])
		}
	}
}
