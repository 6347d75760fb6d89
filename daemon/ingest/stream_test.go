package ingest

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/store"
)

// spiller returns an Options.Spill writing into a throwaway store.
func spiller(t testing.TB) func() (*store.Spill, error) {
	t.Helper()
	s, err := store.Open(filepath.Join(t.TempDir(), "mailboxes"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Create("agent", os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	return func() (*store.Spill, error) { return s.NewSpill("agent", "inbox") }
}

// attachmentBytes is an attachment's content, from memory or its spill.
func attachmentBytes(t testing.TB, a store.AttachmentData) []byte {
	t.Helper()
	if a.File == nil {
		return a.Data
	}
	b, err := io.ReadAll(io.NewSectionReader(a.File, 0, a.File.Size()))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// bigMessage is a message with a short text part and an attachment of n
// bytes, base64 encoded as a mail client sends it.
func bigMessage(n int) []byte {
	data := bytes.Repeat([]byte("attachment bytes "), n/17+1)[:n]
	enc := base64.StdEncoding.EncodeToString(data)
	var b bytes.Buffer
	b.WriteString("From: a@example.org\r\nSubject: big\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n")
	b.WriteString("--b\r\nContent-Type: text/plain\r\n\r\nsee the attachment\r\n")
	b.WriteString("--b\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment; filename=big.pdf\r\nContent-Transfer-Encoding: base64\r\n\r\n")
	for len(enc) > 76 {
		b.WriteString(enc[:76] + "\r\n")
		enc = enc[76:]
	}
	b.WriteString(enc + "\r\n--b--\r\n")
	return b.Bytes()
}

// TestParseFromStreamsAttachments: a 16 MiB attachment is decoded into a
// spill as it streams: the parse holds a small part of it at a time (its
// allocations stay under 4 MiB in all), and the spill has every byte.
func TestParseFromStreamsAttachments(t *testing.T) {
	raw := bigMessage(16 << 20)
	spill := spiller(t)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p, err := ParseFrom(func() io.Reader { return bytes.NewReader(raw) }, int64(len(raw)), Options{Spill: spill, MaxAttachmentBytes: 32 << 20})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Discard()
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
		t.Errorf("parsing allocated %d bytes for a %d-byte message", alloc, len(raw))
	}
	if len(p.Attachments) != 1 || p.Attachments[0].File == nil || p.Attachments[0].Filename != "big.pdf" {
		t.Fatalf("attachments: %+v", p.Attachments)
	}
	want := bytes.Repeat([]byte("attachment bytes "), (16<<20)/17+1)[:16<<20]
	if got := attachmentBytes(t, p.Attachments[0]); !bytes.Equal(got, want) {
		t.Fatalf("spilled attachment: %d bytes, want %d", len(got), len(want))
	}
	if p.Msg.Attachments[0].Size != 16<<20 || !strings.Contains(p.Body, "see the attachment") {
		t.Errorf("frontmatter %+v, body %q", p.Msg.Attachments, p.Body)
	}
}

// TestParseFromBoundsText: a 12 MiB single-part text message is read
// without holding it: the body is cut at MaxBodyChars and says so.
func TestParseFromBoundsText(t *testing.T) {
	raw := []byte("Subject: long\r\n\r\n" + strings.Repeat(strings.Repeat("x", 78)+"\r\n", (12<<20)/80))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p, err := ParseFrom(func() io.Reader { return bytes.NewReader(raw) }, int64(len(raw)), Options{})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("parsing allocated %d bytes for a %d-byte message", alloc, len(raw))
	}
	if !strings.Contains(p.Body, "body truncated") || len(p.Body) > DefaultMaxBodyChars+200 {
		t.Errorf("body of %d bytes, truncated note %v", len(p.Body), strings.Contains(p.Body, "body truncated"))
	}
}

// TestParseFromSpillsOnlyLargeAttachments: attachments up to SpillAt stay
// in memory; larger ones, over MaxAttachmentBytes, are dropped with a note
// and leave no spill behind.
func TestParseFromSpillsOnlyLargeAttachments(t *testing.T) {
	small := "Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: application/zip\r\nContent-Disposition: attachment; filename=s.zip\r\n\r\n" +
		strings.Repeat("s", 1000) + "\r\n--b--\r\n"
	p, err := ParseFrom(func() io.Reader { return strings.NewReader(small) }, int64(len(small)), Options{Spill: spiller(t)})
	if err != nil || len(p.Attachments) != 1 || p.Attachments[0].File != nil || len(p.Attachments[0].Data) != 1000 {
		t.Fatalf("small attachment: %+v %v", p.Attachments, err)
	}
	raw := bigMessage(1 << 20)
	p, err = ParseFrom(func() io.Reader { return bytes.NewReader(raw) }, int64(len(raw)), Options{Spill: spiller(t), MaxAttachmentBytes: 512 << 10})
	if err != nil || len(p.Attachments) != 0 || !strings.Contains(p.Body, `attachment "big.pdf" omitted`) {
		t.Fatalf("oversized attachment: %+v %q %v", p.Attachments, p.Body, err)
	}
}

// FuzzParseFromMatchesParse: parsing as the message streams, with large
// attachments spilled, gives what parsing it in memory gives: the same
// header fields, body and attachments, byte for byte.
func FuzzParseFromMatchesParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.eml"))
	for _, file := range files {
		f.Add(load(f, filepath.Base(file)), 0)
	}
	f.Add(bigMessage(SpillAt+1), 0)
	f.Add([]byte("Content-Type: text/plain; format=flowed\r\n\r\n"+strings.Repeat("soft line \r\n", 30)), 50)
	spill := spiller(f)
	f.Fuzz(func(t *testing.T, raw []byte, maxChars int) {
		if maxChars < 0 || maxChars > 1<<16 {
			t.Skip()
		}
		opts := Options{MaxParts: 20, MaxBodyChars: maxChars}
		want, werr := Parse(raw, opts)
		opts.Spill = spill
		got, gerr := ParseFrom(func() io.Reader { return bytes.NewReader(raw) }, int64(len(raw)), opts)
		if (werr == nil) != (gerr == nil) && len(bytes.TrimSpace(raw)) != 0 {
			t.Fatalf("errors differ: %v, %v", werr, gerr)
		}
		if werr != nil || gerr != nil {
			return
		}
		defer got.Discard()
		if got.Body != want.Body || fmt.Sprint(got.Msg) != fmt.Sprint(want.Msg) || len(got.Attachments) != len(want.Attachments) {
			t.Fatalf("streamed parse differs:\n got %q %+v\nwant %q %+v", got.Body, got.Msg, want.Body, want.Msg)
		}
		for i := range want.Attachments {
			g, w := got.Attachments[i], want.Attachments[i]
			if g.Filename != w.Filename || g.ContentType != w.ContentType || !bytes.Equal(attachmentBytes(t, g), w.Data) {
				t.Fatalf("attachment %d differs: %q %q", i, g.Filename, w.Filename)
			}
		}
	})
}

// TestTextCutAtMaxBodyChars: a long text part is cut at MaxBodyChars
// characters, counted as the Markdown has them (multi-byte characters are
// one, a CRLF is one line end), and says so; one that fits is whole.
func TestTextCutAtMaxBodyChars(t *testing.T) {
	for _, c := range []struct {
		name, text string
		cut        bool
	}{
		{"ascii", strings.Repeat("a", 150), true},
		{"two-byte", strings.Repeat("ü", 150), true},
		{"four-byte", strings.Repeat("😀", 150), true},
		{"crlf lines", strings.Repeat("ab\r\n", 60), true},
		{"fits", strings.Repeat("ü", 99), false},
		{"crlf fits", strings.Repeat("a\r\n", 50), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			raw := "Content-Type: text/plain; charset=utf-8\r\n\r\n" + c.text
			p, err := Parse([]byte(raw), Options{MaxBodyChars: 100})
			if err != nil {
				t.Fatal(err)
			}
			text, note, _ := strings.Cut(p.Body, "\n\n> mailctl: body truncated")
			want := strings.ReplaceAll(c.text, "\r\n", "\n")
			if c.cut {
				want = string([]rune(want)[:100])
			}
			want = strings.TrimRight(want, "\n")
			if got := strings.TrimRight(text, "\n"); got != want {
				t.Errorf("body %q, want %q", got, want)
			}
			if (note != "") != c.cut {
				t.Errorf("truncated note %v, want %v: %q", note != "", c.cut, p.Body)
			}
		})
	}
}

// FuzzTextChars: counting characters eight bytes at a time says what
// counting them one by one says.
func FuzzTextChars(f *testing.F) {
	f.Add([]byte("ascii only, with CRLF\r\n"))
	f.Add([]byte("ünïcödé 😀 and \r alone"))
	f.Add([]byte{0xff, 0x80, 0xc0, '\r', 'a'})
	f.Fuzz(func(t *testing.T, b []byte) {
		want := 0
		for _, c := range b {
			if c != '\r' && c&0xC0 != 0x80 {
				want++
			}
		}
		if got := textChars(b); got != want {
			t.Fatalf("textChars(%q) = %d, want %d", b, got, want)
		}
	})
}
