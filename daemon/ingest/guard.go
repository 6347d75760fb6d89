package ingest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Bounds on one header block, the message's or a part's. go-message keeps
// every field it reads, each in a buffer of its own (about 400 bytes for a
// field of a few), and bounds the size of the message's header only: a
// message of short fields in the header of each part cost about 90 times
// its size (2 GB for 22 MB).
const (
	// MaxHeaderFields bounds the fields of the message's header and of
	// each part's.
	MaxHeaderFields = 1000
	// MaxHeaderBytes bounds the header of the message and of each part.
	MaxHeaderBytes = 1 << 20
)

// ErrHeaderTooLarge is what a headerGuard's reader returns, from the header
// past a bound on, and what CheckHeader returns for a message whose own
// header is past one.
var ErrHeaderTooLarge = fmt.Errorf("a header has more than %d fields or %d bytes", MaxHeaderFields, MaxHeaderBytes)

// headerGuard passes on what it reads and watches for header blocks in it:
// the message's header, when it starts in one, and the header of each part
// of a multipart body with its boundary, found as go-message finds them
// (the line after a delimiter line, to the first blank line). A header past
// MaxHeaderFields or MaxHeaderBytes ends the stream with ErrHeaderTooLarge,
// before go-message reads the field that goes past, so that what it holds
// stays bounded; the bytes before are passed on, so the part before ends
// where it ends.
type headerGuard struct {
	r    io.Reader
	dash []byte // "--" + boundary; nil when only the header at the start is watched
	err  error

	state         guardState
	inHeader      bool
	matched       int // bytes of dash matched at the start of a body line
	fields, bytes int // of the header being read
}

type guardState int

const (
	lineStart   guardState = iota // at the first byte of a line
	restOfLine                    // past what decides the line: skip to its end
	matchDash                     // a body line that may be a delimiter
	afterDash                     // dash matched: blanks, then the line end, make a delimiter
	afterDashCR                   // ... and a CR: LF makes it one
	headerCR                      // a header line that started with CR: LF makes it blank
	passThrough                   // nothing more to watch
)

// guardHeaders watches r for headers: the one at its start when atHeader,
// and those of the parts of a multipart body with boundary, when not "".
func guardHeaders(r io.Reader, boundary string, atHeader bool) io.Reader {
	g := &headerGuard{r: r, inHeader: atHeader}
	if boundary != "" {
		g.dash = []byte("--" + boundary)
	}
	return g
}

func (g *headerGuard) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	n, err := g.r.Read(p)
	if k, ok := g.scan(p[:n]); !ok {
		g.err = ErrHeaderTooLarge
		if k > 0 {
			return k, nil
		}
		return 0, g.err
	}
	return n, err
}

// scan follows p; when a header goes past a bound, it returns false and
// how many bytes of p come before the byte that did.
func (g *headerGuard) scan(p []byte) (int, bool) {
	i := 0
	for i < len(p) {
		switch g.state {
		case passThrough:
			return len(p), true
		case restOfLine:
			j := bytes.IndexByte(p[i:], '\n')
			end := len(p)
			if j >= 0 {
				end = i + j + 1
				g.state = lineStart
			}
			if g.inHeader {
				if left := MaxHeaderBytes - g.bytes; end-i > left {
					return i + left, false
				}
				g.bytes += end - i
			}
			i = end
		case lineStart:
			if !g.inHeader {
				if g.dash == nil {
					g.state = passThrough
					continue
				}
				g.state, g.matched = matchDash, 0
				continue
			}
			switch c := p[i]; c {
			case '\n': // the blank line that ends the header
				g.inHeader = false
				i++
			case '\r':
				g.state = headerCR
				i++
			default:
				if c != ' ' && c != '\t' {
					if g.fields++; g.fields > MaxHeaderFields {
						return i, false
					}
				}
				g.state = restOfLine
			}
		case headerCR:
			if p[i] == '\n' {
				g.inHeader = false
				g.state = lineStart
				i++
				continue
			}
			if g.fields++; g.fields > MaxHeaderFields {
				return i, false
			}
			g.state = restOfLine
		case matchDash:
			for i < len(p) && g.matched < len(g.dash) && p[i] == g.dash[g.matched] {
				g.matched++
				i++
			}
			switch {
			case g.matched == len(g.dash):
				g.state = afterDash
			case i < len(p):
				g.state = restOfLine
			}
		case afterDash:
			switch p[i] {
			case ' ', '\t':
				i++
			case '\r':
				g.state = afterDashCR
				i++
			case '\n':
				g.startHeader()
				i++
			default: // the close delimiter too: what follows is watched still, as it costs nothing

				g.state = restOfLine
			}
		case afterDashCR:
			if p[i] == '\n' {
				g.startHeader()
				i++
				continue
			}
			g.state = restOfLine
		}
	}
	return len(p), true
}

func (g *headerGuard) startHeader() {
	g.inHeader, g.fields, g.bytes = true, 0, 0
	g.state = lineStart
}

// CheckHeader reads the message's own header from r, as ParseFrom does,
// and returns ErrHeaderTooLarge when it has more than MaxHeaderFields
// fields or MaxHeaderBytes bytes: ParseFrom would show such a message as
// raw text, with no From, Subject or threading. It reads no further than
// the header's end (and what one read brings past it), and holds nothing
// of it; the headers of MIME parts are not looked at. Any other error is
// r's.
func CheckHeader(r io.Reader) error {
	g := &headerGuard{r: r, inHeader: true}
	buf := make([]byte, 16<<10)
	for g.inHeader {
		_, err := g.Read(buf)
		switch {
		case err == io.EOF:
			return nil
		case err != nil:
			return err
		}
	}
	return nil
}

// isHeaderTooLarge says whether err comes of a header past the bounds.
func isHeaderTooLarge(err error) bool { return errors.Is(err, ErrHeaderTooLarge) }
