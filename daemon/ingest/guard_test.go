package ingest

import (
	"bytes"
	"io"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

// partWithHeader is a multipart message whose second part has fields
// header fields of field each, then a third part.
func partWithHeader(fields int, field string) string {
	return "From: a@sender.example\r\nSubject: parts\r\nContent-Type: multipart/mixed; boundary=\"b b\"\r\n\r\npreamble\r\n" +
		"--b b\r\nContent-Type: text/plain\r\n\r\nfirst part\r\n" +
		"--b b \t\r\nContent-Type: text/plain\r\n" + strings.Repeat(field, fields) + "\r\nsecond part\r\n" +
		"--b b\r\nContent-Type: text/plain\r\n\r\nthird part\r\n--b b--\r\n"
}

// TestHeaderBounds: the message's header and each part's hold at most
// MaxHeaderFields fields and MaxHeaderBytes bytes. At the bound the message
// reads whole; past it, a part and those after it are skipped and the body
// says so, and the message's own header makes it shown as raw text.
func TestHeaderBounds(t *testing.T) {
	// Lines of " b\r\n" after these fill the second part's header to the byte bound.
	fill := (MaxHeaderBytes - len("Content-Type: text/plain\r\nX-A: ")) / 4
	long := "X-Long: " + strings.Repeat("v", 998) + "\r\n" // 1008 bytes
	tests := []struct {
		name     string
		raw      string
		want     []string // in the body
		dontWant []string
	}{
		{"part at the field bound", partWithHeader(MaxHeaderFields-1, "X-A: b\r\n"), []string{"first part", "second part", "third part"}, []string{"skipped"}},
		{"part past the field bound", partWithHeader(MaxHeaderFields, "X-A: b\r\n"), []string{"first part", "more than 1000 fields"}, []string{"second part", "third part"}},
		{"folded lines are not fields", partWithHeader(1, "X-A: b\r\n"+strings.Repeat(" folded\r\n", 5*MaxHeaderFields)), []string{"second part", "third part"}, []string{"skipped"}},
		{"part at the byte bound", partWithHeader(1, "X-A: "+strings.Repeat(" b\r\n", fill)), []string{"second part", "third part"}, []string{"skipped"}},
		{"part past the byte bound", partWithHeader(1, "X-A: "+strings.Repeat(" b\r\n", fill+1)), []string{"first part", "skipped"}, []string{"second part", "third part"}},
		{"long fields past the byte bound", partWithHeader(MaxHeaderBytes/len(long)+1, long), []string{"first part", "skipped"}, []string{"second part"}},
		{"message at the field bound", "From: a@sender.example\r\n" + strings.Repeat("X-A: b\r\n", MaxHeaderFields-1) + "\r\nthe text\r\n", []string{"the text"}, []string{"X-A"}},
		{"message past the field bound", "From: a@sender.example\r\n" + strings.Repeat("X-A: b\r\n", MaxHeaderFields) + "\r\nthe text\r\n", []string{"X-A: b", "the text", "shown as raw text"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, r := range readings {
				p, err := ParseFrom(func() io.Reader { return r.wrap(strings.NewReader(tt.raw)) }, int64(len(tt.raw)), Options{})
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range tt.want {
					if !strings.Contains(p.Body, s) {
						t.Errorf("%s: body lacks %q: %.300q", r.name, s, p.Body)
					}
				}
				for _, s := range tt.dontWant {
					if strings.Contains(p.Body, s) {
						t.Errorf("%s: body has %q: %.300q", r.name, s, p.Body)
					}
				}
			}
		})
	}
}

// headerOf is a message whose header lines (From first) take exactly n
// bytes, in fields of about 4 KiB, then a blank line and a body.
func headerOf(n int) string {
	h := "From: a@sender.example\r\n"
	line := "X-L: " + strings.Repeat("v", 4089) + "\r\n"
	for n-len(h) >= 2*len(line) {
		h += line
	}
	return h + "X-R: " + strings.Repeat("v", n-len(h)-len("X-R: \r\n")) + "\r\n\r\nthe text\r\n"
}

// TestCheckHeader: CheckHeader refuses a message exactly when its own
// header is past a bound, which is when ParseFrom cannot read the header
// (no From) and shows the message as raw text; the header of a part past
// them is not its concern (the parse skips that part and keeps the
// message). A header of exactly MaxHeaderBytes used to be read whole by
// the guard and refused by go-message, which counted its blank line too.
func TestCheckHeader(t *testing.T) {
	tests := []struct {
		name     string
		raw      string
		tooLarge bool
	}{
		{"ordinary", "From: a@sender.example\r\nSubject: hi\r\n\r\nthe text\r\n", false},
		{"no body", "From: a@sender.example\r\nSubject: hi\r\n", false},
		{"bare LF", "From: a@sender.example\nSubject: hi\n\nthe text\n", false},
		{"at the field bound", "From: a@sender.example\r\n" + strings.Repeat("X-A: b\r\n", MaxHeaderFields-1) + "\r\nthe text\r\n", false},
		{"past the field bound", "From: a@sender.example\r\n" + strings.Repeat("X-A: b\r\n", MaxHeaderFields) + "\r\nthe text\r\n", true},
		{"folded lines are not fields", "From: a@sender.example\r\nX-A: b\r\n" + strings.Repeat(" folded\r\n", 2*MaxHeaderFields) + "\r\nthe text\r\n", false},
		{"at the byte bound", headerOf(MaxHeaderBytes), false},
		{"past the byte bound", headerOf(MaxHeaderBytes + 1), true},
		{"part past the field bound", partWithHeader(MaxHeaderFields, "X-A: b\r\n"), false},
		{"part past the byte bound", partWithHeader(1, "X-A: "+strings.Repeat(" b\r\n", MaxHeaderBytes/4)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, r := range readings {
				err := CheckHeader(r.wrap(strings.NewReader(tt.raw)))
				if got := err == ErrHeaderTooLarge; got != tt.tooLarge || err != nil && !got {
					t.Errorf("%s: CheckHeader = %v, want too large %v", r.name, err, tt.tooLarge)
				}
				p, err := ParseFrom(func() io.Reader { return r.wrap(strings.NewReader(tt.raw)) }, int64(len(tt.raw)), Options{})
				if err != nil {
					t.Fatal(err)
				}
				if unread := p.Msg.From == ""; unread != tt.tooLarge {
					t.Errorf("%s: ParseFrom read From %q, want it unread %v", r.name, p.Msg.From, tt.tooLarge)
				}
			}
		})
	}
}

// CheckHeader reads no further than the header (and one read past it).
func TestCheckHeaderStopsAtTheHeader(t *testing.T) {
	head := "From: a@sender.example\r\n\r\n"
	r := io.MultiReader(strings.NewReader(head), iotest.ErrReader(io.ErrUnexpectedEOF))
	if err := CheckHeader(iotest.OneByteReader(r)); err != nil {
		t.Errorf("CheckHeader read past the header: %v", err)
	}
	if err := CheckHeader(iotest.OneByteReader(io.MultiReader(strings.NewReader("From: a@x\r\n"), iotest.ErrReader(io.ErrUnexpectedEOF)))); err != io.ErrUnexpectedEOF {
		t.Errorf("CheckHeader on a failing read = %v, want its error", err)
	}
}

// FuzzCheckHeader: CheckHeader gives one answer however the reads are cut,
// and a header it refuses is one the parse could not read either.
func FuzzCheckHeader(f *testing.F) {
	f.Add([]byte("From: a@sender.example\r\n" + strings.Repeat("X-A: b\r\n", MaxHeaderFields) + "\r\ntext\r\n"))
	f.Add([]byte("From: a@sender.example\r\nX-A: b\r\n" + strings.Repeat(" f\r\n", MaxHeaderFields) + "\r\n"))
	f.Add([]byte("From: a@b\r\n\r\n"))
	f.Add([]byte("\rX: y\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		err := CheckHeader(bytes.NewReader(in))
		if err != nil && err != ErrHeaderTooLarge {
			t.Fatal(err)
		}
		if again := CheckHeader(iotest.HalfReader(bytes.NewReader(in))); again != err {
			t.Fatalf("read in halves: %v, whole: %v", again, err)
		}
		if err == nil || len(bytes.TrimSpace(in)) == 0 {
			return
		}
		if p, _ := Parse(in, Options{}); p.Msg.From != "" || !strings.Contains(p.Body, "could not be read as MIME") {
			t.Fatalf("refused, but the parse read From %q", p.Msg.From)
		}
	})
}

// A message of short header fields in every part used to cost the parse
// about 90 times its size (go-message keeps each field in a buffer of its
// own): 2 GB for 22 MB. Now what it allocates is a small part of its size.
func TestManyHeaderFieldsCostLittle(t *testing.T) {
	var b strings.Builder
	b.WriteString("From: a@sender.example\r\nContent-Type: multipart/mixed; boundary=x\r\n\r\n--x\r\n\r\nfirst part\r\n")
	for range 8 {
		b.WriteString("--x\r\n" + strings.Repeat("X:b\r\n", 200000) + "\r\nmore\r\n")
	}
	b.WriteString("--x--\r\n")
	raw := []byte(b.String())
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p, err := ParseFrom(func() io.Reader { return bytes.NewReader(raw) }, int64(len(raw)), Options{})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(len(raw)/4) {
		t.Errorf("parsing allocated %d MiB for a %d MiB message", alloc>>20, len(raw)>>20)
	}
	if !strings.Contains(p.Body, "first part") || !strings.Contains(p.Body, "more than 1000 fields") {
		t.Errorf("body %.300q", p.Body)
	}
}

// FuzzHeaderGuard: what the guard passes on is a prefix of what it reads,
// however the reads are cut, and all of it when no header is past a bound.
func FuzzHeaderGuard(f *testing.F) {
	f.Add([]byte(partWithHeader(3, "X: y\r\n")), "b b", true, uint8(1))
	f.Add([]byte("--b\r\nA: b\r\n\r\n--b\n\n"), "b", false, uint8(7))
	f.Fuzz(func(t *testing.T, in []byte, boundary string, atHeader bool, chunk uint8) {
		g := guardHeaders(iotest.HalfReader(bytes.NewReader(in)), boundary, atHeader)
		buf := make([]byte, int(chunk)+1)
		var out []byte
		for {
			n, err := g.Read(buf)
			out = append(out, buf[:n]...)
			if err != nil {
				if err != io.EOF && !isHeaderTooLarge(err) {
					t.Fatal(err)
				}
				if !bytes.HasPrefix(in, out) || err == io.EOF && len(out) != len(in) {
					t.Fatalf("passed on %d bytes of %d (%v)", len(out), len(in), err)
				}
				return
			}
		}
	})
}

// TestParamBound: a part's Content-Type and Content-Disposition are read to
// their first MaxParams parameters. At the bound the file name after the
// others is kept; past it the part is still read, under a name of its own,
// and the body says so. A name split (RFC 2231) into thousands of segments
// is read from its first ones.
func TestParamBound(t *testing.T) {
	part := func(params string) string {
		return "From: a@sender.example\r\nContent-Type: multipart/mixed; boundary=x\r\n\r\n--x\r\nContent-Type: text/plain\r\n\r\nthe text\r\n" +
			"--x\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment" + params + "\r\n\r\ndata\r\n--x--\r\n"
	}
	junk := func(n int) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(";\r\n p" + strconv.Itoa(i) + "=v")
		}
		return b.String()
	}
	segments := func(n int) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(";\r\n filename*" + strconv.Itoa(i) + "=s" + strconv.Itoa(i))
		}
		return b.String()
	}
	joined := ""
	for i := range MaxParams {
		joined += "s" + strconv.Itoa(i)
	}
	for _, tt := range []struct {
		name, params, file string
		note               bool
	}{
		{"at the bound", junk(MaxParams-1) + "; filename=report.pdf", "report.pdf", false},
		{"past the bound", junk(MaxParams) + "; filename=report.pdf", "attachment-1.bin", true},
		{"far past the bound", junk(50000) + "; filename=report.pdf", "attachment-1.bin", true},
		{"thousands of segments", segments(5000), joined[:100], true}, // cut to 100 bytes as every name
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse([]byte(part(tt.params)), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Attachments) != 1 || p.Attachments[0].Filename != tt.file || string(p.Attachments[0].Data) != "data" {
				t.Fatalf("attachments %+v, want one named %q", p.Attachments, tt.file)
			}
			if got := strings.Contains(p.Body, "more than 100 parameters"); got != tt.note || !strings.Contains(p.Body, "the text") {
				t.Errorf("body %.300q", p.Body)
			}
		})
	}
}

// readings are the ways a test reads a message: whole, and a byte at a time,
// so that no bound depends on where a read ends.
var readings = []struct {
	name string
	wrap func(io.Reader) io.Reader
}{{"whole", func(r io.Reader) io.Reader { return r }}, {"byte by byte", iotest.OneByteReader}}
