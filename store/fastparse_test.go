package store

import (
	"reflect"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

func frontmatterOf(t testing.TB, data []byte) []byte {
	t.Helper()
	fm, _, err := split(data)
	if err != nil {
		t.Fatal(err)
	}
	return fm
}

func TestDecodeFastMatchesRender(t *testing.T) {
	msgs := []*Message{fullMessage(), {}, testMessage(3)}
	odd := fullMessage()
	odd.Subject = "a\x00\x01\t\n\r\"\\\u007f\u0080\u202e+++ = [x]"
	odd.To = []string{}
	odd.Labels = []string{"", "a, b", `"`}
	msgs = append(msgs, odd)
	for i, m := range msgs {
		fm := frontmatterOf(t, Render(m, ""))
		got, ok := decodeFast(fm)
		if !ok {
			t.Errorf("message %d: fast path refused Render's output:\n%s", i, fm)
			continue
		}
		want, _, err := Parse(Render(m, ""))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(canon(got), canon(want)) {
			t.Errorf("message %d differs:\n-full %+v\n+fast %+v", i, canon(want), canon(got))
		}
	}
}

func TestDecodeFastFallsBack(t *testing.T) {
	for _, in := range []string{
		"subject = 'literal'",
		"subject = \"s\" # comment",
		"subject=\"s\"",
		"subject = \"\"\"ml\"\"\"",
		"subject = \"\\e\"",
		"subject = \"\\x41\"",
		"read = yes",
		"size_bytes = 1_000",
		"size_bytes = +1",
		"size_bytes = 01",
		"size_bytes = 0x10",
		"date = 2020-01-02 03:04:05Z",
		"date = 2020-01-02T03:04:05",
		"date = 2020-01-02",
		"to = [\"a\",\"b\"]",
		"to = [\n\"a\"]",
		"unknown = 1",
		"subject = \"a\"\nsubject = \"b\"",
		"[spf]\nresult = \"a\"\n[spf]",
		"spf.result = \"a\"",
		"[\"spf\"]",
		"[spf]\nunknown = 1",
		"[[spf]]",
		"[to]",
		"attachments = []\n[[attachments]]",
		"subject = \"s\"\r",
		"  [spf]",
		"spf = {result = \"x\"}",
		"\"subject\" = \"s\"",
	} {
		if _, ok := decodeFast([]byte(in)); ok {
			t.Errorf("decodeFast accepted %q", in)
		}
	}
}

// What Render writes decodes to exactly the same Message (not just an
// equivalent one: same empty slices, same zones) with the fast decoder as
// with the full one, since Get and Update read through the fast one.
func TestFastDecodeEqualsFullOnRendered(t *testing.T) {
	read := testMessage(2)
	read.Read = true
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.FixedZone("", 3600))
	read.ReadAt = &now
	read.Labels = []string{"a", "b"}
	for i, m := range []*Message{fullMessage(), testMessage(1), read, {}} {
		data := Render(m, "body\n+++\n")
		full, fbody, err := Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		fast, body, err := parseForIndex(data)
		if err != nil {
			t.Fatal(err)
		}
		fm := frontmatterOf(t, data)
		if _, ok := decodeFast(fm); !ok {
			t.Fatalf("message %d: the fast decoder refuses what Render wrote:\n%s", i, fm)
		}
		if !reflect.DeepEqual(full, fast) || body != fbody {
			t.Fatalf("message %d decodes differently:\n-full %+v\n+fast %+v", i, full, fast)
		}
	}
}

func FuzzDecodeFast(f *testing.F) {
	for _, m := range []*Message{fullMessage(), testMessage(1), {}} {
		f.Add(frontmatterOf(f, Render(m, "")))
	}
	f.Add([]byte("subject = \"\\u00e9\\U0001F600\"\nto = [\"\", \"x\"]\n[[attachments]]\nsize = -0\n[spf]\n[[attachments]]\n"))
	f.Add([]byte("date = 0000-01-01T00:00:00.123456789+23:59\nread_at = 9999-12-31T23:59:59Z\n"))
	f.Fuzz(func(t *testing.T, fm []byte) {
		fast, ok := decodeFast(fm)
		if !ok {
			return
		}
		full := new(Message)
		if _, err := toml.Decode(string(fm), full); err != nil {
			t.Fatalf("fast path accepted what the decoder refuses (%v):\n%q", err, fm)
		}
		if !reflect.DeepEqual(canon(fast), canon(full)) {
			t.Fatalf("decoders disagree on %q:\n-full %+v\n+fast %+v", fm, canon(full), canon(fast))
		}
		for _, p := range []*time.Time{&fast.Date, &fast.ReceivedAt} {
			if _, off := p.Zone(); off != zoneOffset(full, p == &fast.Date) {
				t.Fatalf("offsets differ on %q", fm)
			}
		}
	})
}

func zoneOffset(m *Message, date bool) int {
	t := m.ReceivedAt
	if date {
		t = m.Date
	}
	_, off := t.Zone()
	return off
}

func BenchmarkDecode(b *testing.B) {
	fm := frontmatterOf(b, Render(fullMessage(), ""))
	b.Run("fast", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, ok := decodeFast(fm); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("toml", func(b *testing.B) {
		s := string(fm)
		for i := 0; i < b.N; i++ {
			var m Message
			if _, err := toml.Decode(s, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
