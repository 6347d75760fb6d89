package store

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// canon returns m as it must come back from Parse(Render(m)): strings repaired
// to UTF-8, times as UTC instants, empty slices as nil.
func canon(m *Message) *Message {
	c := sanitizeMessage(m)
	canonValue(reflect.ValueOf(c).Elem())
	return c
}

func canonValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == timeType {
			v.Set(reflect.ValueOf(v.Interface().(time.Time).UTC()))
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				canonValue(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Len() == 0 {
			v.Set(reflect.Zero(v.Type()))
			return
		}
		for i := 0; i < v.Len(); i++ {
			canonValue(v.Index(i))
		}
	case reflect.Pointer:
		if !v.IsNil() {
			canonValue(v.Elem())
		}
	}
}

func fullMessage() *Message {
	paris := time.FixedZone("CET", 3600)
	readAt := time.Date(2025, 4, 15, 15, 0, 0, 0, time.UTC)
	next := time.Date(2025, 4, 16, 1, 2, 3, 4, paris)
	return &Message{
		ID: "2025-04-15-143022-hello", MessageID: "<abc@example.com>", ThreadID: "0123456789abcdef",
		From: "Alice <alice@example.com>", To: []string{"bob@example.org", "carol@example.org"},
		Cc: []string{"dave@example.net"}, Bcc: []string{"eve@example.net"}, ReplyTo: []string{"alice+r@example.com"},
		DeliveredTo: "bob@example.org", Tag: "news", Subject: "Hello",
		Date: time.Date(2025, 4, 15, 16, 30, 22, 0, paris), ReceivedAt: time.Date(2025, 4, 15, 14, 30, 22, 123456789, time.UTC),
		ReceivedFromIP: "192.0.2.1", SizeBytes: 1234,
		Attachments: []Attachment{{Filename: "a.pdf", ContentType: "application/pdf", Size: 10, Path: "x.attachments/a.pdf"}},
		InReplyTo:   "<parent@example.com>", References: []string{"<root@example.com>", "<parent@example.com>"},
		ListID: "<list.example.com>", AutoSubmitted: "no",
		DKIM: []AuthResult{{Result: "pass", Domain: "example.com"}, {Result: "fail", Domain: "evil.test", Detail: "bad sig"}},
		SPF:  AuthResult{Result: "pass", Domain: "example.com"}, DMARC: AuthResult{Result: "pass", Domain: "example.com"},
		Trusted: "true", Mailbox: "bob", Read: true, ReadAt: &readAt, Labels: []string{"work"}, Starred: true,
		IsDSN: true, DSNFor: "<sent@example.org>", Outbound: true, DeliveryStatus: "deferred", DeliveredAt: &readAt,
		DeliveryDetails: []RecipientStatus{{Address: "x@example.com", Status: "deferred", Detail: "451 try later", Code: 451, Attempts: 2, NextAttempt: &next, UpdatedAt: &readAt, TLS: "TLS1.3"}},
	}
}

func TestRenderParseRoundTrip(t *testing.T) {
	huge := strings.Repeat("x", 10<<20)
	tests := []struct {
		name    string
		subject string
		body    string
	}{
		{"plain", "Hello", "Hi Bob,\n\nsee you.\n"},
		{"empty body", "Hello", ""},
		{"subject with delimiter", "+++", "body"},
		{"subject with delimiter lines", "a\n+++\nb = 1\n+++\n", "body"},
		{"body with delimiter lines", "s", "+++\nid = \"evil\"\n+++\n\nmore"},
		{"body starting with blank lines", "s", "\n\n\nx"},
		{"body starting with CRLF", "s", "\r\nx\r\n"},
		{"CRLF everywhere", "a\r\nb", "line1\r\nline2\r\n"},
		{"NUL bytes", "a\x00b", "x\x00y\x00"},
		{"control chars", "\x01\x1b[31m\x7f", "\x1b[2J"},
		{"quotes and backslashes", `"'\"""'''\\`, `\`},
		{"brackets", strings.Repeat("[", 100) + strings.Repeat("{", 100), "[[[["},
		{"unicode", "héllo ✉ \u202e gnp.exe", "日本語"},
		{"non-UTF-8 body", "s", "\xff\xfe\x80abc\xc3"},
		{"10 MB single line body", "s", huge},
		{"10 MB subject", huge, "b"},
		{"no trailing newline", "s", "no newline at end"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := fullMessage()
			m.Subject = tt.subject
			data := Render(m, tt.body)
			got, body, err := Parse(data)
			if err != nil {
				t.Fatalf("Parse(Render()) error: %v", err)
			}
			if body != tt.body {
				t.Errorf("body: got %d bytes %q..., want %d bytes", len(body), trunc(body), len(tt.body))
			}
			if want := canon(m); !reflect.DeepEqual(canon(got), want) {
				t.Errorf("message differs:\n-want %+v\n+got  %+v", want, canon(got))
			}
			if again := Render(got, body); !bytes.Equal(again, data) {
				t.Errorf("re-render differs")
			}
		})
	}
}

func trunc(s string) string {
	if len(s) > 60 {
		return s[:60]
	}
	return s
}

func TestRenderRepairsInvalidUTF8(t *testing.T) {
	m := &Message{Subject: "bad \xff\xfe subject", To: []string{"x\xc3@example.com"}}
	got, _, err := Parse(Render(m, ""))
	if err != nil {
		t.Fatal(err)
	}
	if got.Subject != "bad \uFFFD subject" || got.To[0] != "x\uFFFD@example.com" {
		t.Errorf("got subject %q to %q", got.Subject, got.To)
	}
	if m.Subject != "bad \xff\xfe subject" {
		t.Errorf("Render modified the caller's message: %q", m.Subject)
	}
}

func TestRenderDoesNotShareSlices(t *testing.T) {
	m := &Message{To: []string{"a\xff"}}
	Render(m, "")
	if m.To[0] != "a\xff" {
		t.Errorf("Render modified the caller's slice: %q", m.To[0])
	}
}

func TestParseFormats(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		subject string
		body    string
		err     bool
	}{
		{"LF", "+++\nsubject = \"s\"\n+++\n\nbody", "s", "body", false},
		{"CRLF", "+++\r\nsubject = \"s\"\r\n+++\r\n\r\nbody\r\n", "s", "body\r\n", false},
		{"BOM", "\xef\xbb\xbf+++\nsubject = \"s\"\n+++\n\nbody", "s", "body", false},
		{"no blank line", "+++\nsubject = \"s\"\n+++\nbody", "s", "body", false},
		{"end at EOF", "+++\nsubject = \"s\"\n+++", "s", "", false},
		{"empty frontmatter", "+++\n+++\n", "", "", false},
		{"multi-line string", "+++\nsubject = \"\"\"\nx\n\"\"\"\n+++\n\nb", "x\n", "b", false},
		{"unknown keys ignored", "+++\nfoo = 1\nsubject = \"s\"\n+++\n", "s", "", false},
		{"no frontmatter", "hello", "", "", true},
		{"unterminated", "+++\nsubject = \"s\"\n", "", "", true},
		{"delimiter with trailing space", "+++ \nsubject = \"s\"\n+++\n", "", "", true},
		{"bad TOML", "+++\nsubject = \n+++\n", "", "", true},
		{"wrong type", "+++\nread = \"yes\"\n+++\n", "", "", true},
		{"deep nesting", "+++\nx = " + strings.Repeat("[", 100000) + "\n+++\n", "", "", true},
		{"deep inline tables", "+++\nx = " + strings.Repeat("{a=", 10000) + "\n+++\n", "", "", true},
		{"empty", "", "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, body, err := Parse([]byte(tt.in))
			if tt.err {
				if err == nil {
					t.Fatalf("Parse succeeded, want error")
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if m.Subject != tt.subject || body != tt.body {
				t.Errorf("got subject %q body %q, want %q %q", m.Subject, body, tt.subject, tt.body)
			}
		})
	}
	if _, _, err := Parse([]byte("x")); !errors.Is(err, ErrNoFrontmatter) {
		t.Errorf("Parse without frontmatter: %v, want ErrNoFrontmatter", err)
	}
}

func TestTOMLDepth(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{`a = [1, [2, [3]]]`, 3},
		{`a = "[[[["`, 0},
		{`a = '[[[['`, 0},
		{"a = \"\"\"\n[[[\n\"\"\"", 0},
		{"a = '''\n[[['''", 0},
		{"# [[[[\na = 1", 0},
		{`a = "\"[[" `, 0},
		{"[[attachments]]\nx = {y = [1]}", 2},
	}
	for _, tt := range tests {
		if got := tomlDepth([]byte(tt.in)); got != tt.want {
			t.Errorf("tomlDepth(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func FuzzFrontmatterRoundTrip(f *testing.F) {
	f.Add("Hello", "alice@example.com", "bob@example.org", "body\n", false, int64(1744727422), int64(0), 0)
	f.Add("+++", "+++\n", "", "+++\n+++\n", true, int64(0), int64(999999999), 60)
	f.Add("a\x00b\r\n", "\xff", "[[x]]", "\x00\xff", false, int64(-62135596800), int64(1), -720)
	f.Add(`"""'''\`, "", "a\nb", "\r\n\r\n", true, int64(253402300799), int64(5), 345)
	f.Fuzz(func(t *testing.T, subject, from, to, body string, read bool, sec, nsec int64, offMin int) {
		loc := time.FixedZone("", (offMin%(18*60))*60)
		tm := time.Unix(sec, nsec%1e9).In(loc)
		m := &Message{Subject: subject, From: from, Read: read, Date: tm, ReceivedAt: tm.UTC(), Labels: []string{subject}}
		if to != "" {
			m.To = []string{to, from}
			m.DKIM = []AuthResult{{Result: to, Domain: from}}
			m.ReadAt = &tm
		}
		data := Render(m, body)
		got, gotBody, err := Parse(data)
		if err != nil {
			t.Fatalf("Parse(Render()) error: %v\n%q", err, data)
		}
		if gotBody != body {
			t.Fatalf("body: got %q, want %q", gotBody, body)
		}
		if want := canon(m); !reflect.DeepEqual(canon(got), want) {
			t.Fatalf("message differs:\n-want %+v\n+got  %+v", want, canon(got))
		}
	})
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("+++\nsubject = \"s\"\n+++\n\nbody"))
	f.Add([]byte("+++\r\nread = true\r\n+++\r\n"))
	f.Add(Render(fullMessage(), "body\x00"))
	f.Add([]byte("+++\nx = [[[[[[[[\n+++\n"))
	f.Add([]byte("+++\n[[attachments]]\nfilename = 1\n+++\n"))
	f.Add([]byte("+++\ndate = 1979-05-27T07:32:00\nread_at = 1979-05-27\n+++\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, body, err := Parse(data)
		if err != nil {
			return
		}
		// Whatever parsed must render and parse again to the same body.
		_, body2, err := Parse(Render(m, body))
		if err != nil {
			t.Fatalf("re-parse of rendered message failed: %v", err)
		}
		if body2 != body {
			t.Fatalf("body changed: %q -> %q", body, body2)
		}
	})
}

// TOML keys are case-sensitive: "SUBJECT" beside "subject" used to overwrite
// it or not depending on map order.
func TestParseRejectsCaseVariantKeys(t *testing.T) {
	for _, fm := range []string{
		"subject = \"a\"\nSUBJECT = \"b\"\n",
		"Subject = \"b\"\n",
		"[[attachments]]\nfilename = \"a\"\nFileName = \"b\"\n",
	} {
		_, _, err := Parse([]byte("+++\n" + fm + "+++\n\nbody\n"))
		if err == nil || !strings.Contains(err.Error(), "case-sensitive") {
			t.Errorf("%q: error %v, want a case-sensitivity error", fm, err)
		}
	}
}

// return_path is optional: a message stored before it was recorded reads
// as none recorded, which is not the null sender of a bounce ("<>").
func TestReturnPathRecordedOrNot(t *testing.T) {
	for _, c := range []struct {
		name, line, sender string
		recorded           bool
	}{
		{"stored before return_path", "", "", false},
		{"the null sender", `return_path = "<>"` + "\n", "", true},
		{"an address", `return_path = "<b@remote.test>"` + "\n", "b@remote.test", true},
	} {
		m, _, err := Parse([]byte("+++\nid = \"x\"\nfrom = \"a@remote.test\"\n" + c.line + "+++\n\nbody\n"))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if s, ok := m.EnvelopeSender(); s != c.sender || ok != c.recorded {
			t.Errorf("%s: sender %q recorded %v, want %q %v", c.name, s, ok, c.sender, c.recorded)
		}
	}
	if got := ReturnPathOf(""); got != "<>" {
		t.Errorf("null sender recorded as %q", got)
	}
	long := strings.Repeat("a", 60) + "@" + strings.Repeat("é", 200) + ".test"
	got := ReturnPathOf(long)
	if len(got) > MaxReturnPath+5 || !utf8.ValidString(got) || !strings.HasSuffix(got, "...>") {
		t.Errorf("a %d-byte sender recorded as %d bytes: %q", len(long), len(got), got)
	}
}
