package ingest

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/testmsg"
)

// BenchmarkParse parses a message held in memory, as inbound delivery does:
// a plain-text one and a multipart one (a short text and a base64
// attachment) of 100 KiB and 1 MiB.
func BenchmarkParse(b *testing.B) {
	for _, size := range []int{100 << 10, 1 << 20} {
		for _, kind := range []struct {
			name string
			raw  []byte
		}{
			{"plain", testmsg.Plain(size)},
			{"multipart", bigMessage(size * 3 / 4)},
		} {
			b.Run(fmt.Sprintf("%s-%dKiB", kind.name, size>>10), func(b *testing.B) {
				b.SetBytes(int64(len(kind.raw)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := Parse(kind.raw, Options{MaxAttachmentBytes: 32 << 20}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestLargeTextCopiedOnce: the text of a large plain message is read into
// one array, its line ends made LF there, and copied once into the body
// (it was copied for the line ends and again for the final newline), and
// the body says the same.
func TestLargeTextCopiedOnce(t *testing.T) {
	raw := testmsg.Plain(512 << 10)
	text := raw[bytes.Index(raw, []byte("\r\n\r\n"))+4:]
	want := strings.TrimRight(strings.ReplaceAll(string(text), "\r\n", "\n"), " \n") + "\n"
	var p *Parsed
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	p, err := Parse(raw, Options{})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if p.Body != want {
		t.Fatalf("body differs: %d bytes, want %d", len(p.Body), len(want))
	}
	if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(len(raw))*5/2; got > limit {
		t.Fatalf("parsing a %d-byte message allocated %d bytes, want at most %d (the text read once and copied once)", len(raw), got, limit)
	}
}

// TestAttachmentHeldAtItsSize: an attachment of a multipart message held in
// memory is kept in an array of about its size until it is stored, not in one
// grown by doubling (up to twice its size).
func TestAttachmentHeldAtItsSize(t *testing.T) {
	p, err := Parse(bigMessage(300<<10), Options{MaxAttachmentBytes: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Attachments) != 1 {
		t.Fatalf("%d attachments, want 1", len(p.Attachments))
	}
	a := p.Attachments[0].Data
	if want := bytes.Repeat([]byte("attachment bytes "), (300<<10)/17+1)[:300<<10]; !bytes.Equal(a, want) {
		t.Fatal("attachment bytes differ")
	}
	if cap(a) > len(a)+len(a)/16 { // the allocator rounds up a little
		t.Fatalf("attachment of %d bytes held in an array of %d", len(a), cap(a))
	}
}
