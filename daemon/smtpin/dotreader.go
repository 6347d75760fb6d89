package smtpin

import (
	"bufio"
	"bytes"
	"io"
	"reflect"
	"unsafe"

	"github.com/emersion/go-smtp"
)

// go-smtp (v0.25.1, data.go) unstuffs DATA with a state machine that, on a
// line beginning with a dot and a CR, drops both the dot and the CR when
// the next byte is not LF: "<CRLF>.<CR>x" reaches the backend as
// "<CRLF>x", so the bare CR is gone before our check can refuse it, and an
// MTA we relay to could frame those bytes differently (SMTP smuggling). The
// fix belongs in go-smtp. Until it is there, rawData takes the buffered
// connection reader out of go-smtp's DATA reader and reads the DATA with
// dotReader below, which keeps that CR. After every read it copies its
// state into go-smtp's reader (the states are numbered alike), so that
// when go-smtp drains what is left of the DATA (after a refusal) it starts
// exactly where dotReader stopped, and after the end of data it reads
// nothing more. The fields are found by reflection and checked against the
// layout of the pinned version (TestGoSMTPDataReaderLayout); any other
// reader (BDAT chunks, a go-smtp whose layout changed) is read as it is.

// rawData returns a reader of the DATA behind r that keeps every CR, or r
// itself when r is not go-smtp's dot-unstuffing DATA reader. Call done once
// the DATA is read (see goLineLimit); it reports a line over the limit
// among the bytes read ahead, after which the connection must close.
func rawData(r io.Reader) (raw io.Reader, done func() (overLong bool)) {
	done = func() bool { return false }
	v := reflect.ValueOf(r)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return r, done
	}
	e := v.Elem()
	t := e.Type()
	if t.Name() != "dataReader" || t.PkgPath() != "github.com/emersion/go-smtp" || t.NumField() < 2 {
		return r, done
	}
	fr, fs := t.Field(0), t.Field(1)
	if fr.Name != "r" || fr.Type != reflect.TypeOf((*bufio.Reader)(nil)) || fs.Name != "state" || fs.Type.Kind() != reflect.Int {
		return r, done
	}
	br := (*bufio.Reader)(e.Field(0).UnsafePointer())
	state := (*int)(unsafe.Pointer(e.Field(1).UnsafeAddr()))
	if br == nil || *state != 0 {
		return r, done
	}
	d := &dotReader{br: br, goState: state}
	if ll := goLineLimitOf(br); ll != nil && *ll.limit > 0 {
		d.maxLine, *ll.limit = *ll.limit, 0
		done = func() bool { return ll.restore(br, d) }
	}
	return d, done
}

// goLineLimit is go-smtp's line-length limit on the connection, under its
// buffered reader (bufio.Reader.rd holds go-smtp's *lineLimitReader, whose
// LineLimit is the server's MaxLineLength and curLineLength its count).
// That reader counts the current line byte by byte as bytes arrive, a
// tenth of the CPU of taking a 1 MiB message. While dotReader reads DATA,
// the limit is 0 (none) and dotReader applies it, a run between two line
// ends at a time; restore puts it back before go-smtp reads another
// command. The layout is checked against the pinned versions
// (TestGoSMTPDataReaderLayout); any other leaves the limit where it is.
type goLineLimit struct{ limit, cur *int }

func goLineLimitOf(br *bufio.Reader) *goLineLimit {
	rd := reflect.ValueOf(br).Elem().FieldByName("rd")
	if !rd.IsValid() || rd.Kind() != reflect.Interface || rd.IsNil() {
		return nil
	}
	l := rd.Elem()
	if l.Kind() == reflect.Struct { // go-smtp's struct{io.Reader; io.Writer; io.Closer}
		if r := l.FieldByName("Reader"); r.IsValid() && r.Kind() == reflect.Interface && !r.IsNil() {
			l = r.Elem()
		}
	}
	if l.Kind() != reflect.Pointer || l.IsNil() {
		return nil
	}
	lt := l.Type().Elem()
	if lt.Name() != "lineLimitReader" || lt.PkgPath() != "github.com/emersion/go-smtp" {
		return nil
	}
	limit, ok1 := lt.FieldByName("LineLimit")
	cur, ok2 := lt.FieldByName("curLineLength")
	if !ok1 || !ok2 || limit.Type.Kind() != reflect.Int || cur.Type.Kind() != reflect.Int {
		return nil
	}
	return &goLineLimit{limit: (*int)(unsafe.Add(l.UnsafePointer(), limit.Offset)), cur: (*int)(unsafe.Add(l.UnsafePointer(), cur.Offset))}
}

// restore puts the limit back and counts, as go-smtp would have, the bytes
// it read ahead while the limit was off (the rest of the DATA it drains,
// pipelined commands): it reports a line among them over the limit.
func (ll *goLineLimit) restore(br *bufio.Reader, d *dotReader) bool {
	*ll.limit = d.maxLine
	ahead, _ := br.Peek(br.Buffered())
	cur, over := d.lineLen+1, false // go-smtp counts a line's LF as the next line's first byte
	for _, c := range ahead {
		if c == '\n' {
			cur = 0
		}
		if cur++; cur > d.maxLine {
			over = true
		}
	}
	*ll.cur = cur
	return over
}

// dotReader unstuffs the lines of DATA read from br and ends at the
// CRLF "." CRLF line, like go-smtp's reader, but keeps the CR of a line
// that starts with "." CR and goes on with anything but LF. With maxLine
// set, a line longer than that (counting its CRLF) is smtp.ErrTooLongLine,
// as go-smtp's own limit would have it.
type dotReader struct {
	br      *bufio.Reader
	state   int
	goState *int // go-smtp's reader's state, kept equal to state
	maxLine int  // 0: go-smtp applies the limit
	lineLen int  // bytes of the current line read so far
}

// The states, numbered as go-smtp numbers its own.
const (
	dotBeginLine = iota // at the start of a line
	dotDot              // read "." at the start of a line
	dotDotCR            // read "." CR at the start of a line
	dotCR               // read CR
	dotData             // in the middle of a line
	dotEOF              // read the end-of-data line
)

func (d *dotReader) Read(b []byte) (n int, err error) {
	defer func() { *d.goState = d.state }()
	for n < len(b) && d.state != dotEOF {
		if d.state == dotData {
			// Inside a line every byte but CR leaves the state as it is:
			// copy the buffered run up to the next CR at once instead of
			// byte by byte (most of a large message is such runs).
			if k := d.run(b[n:]); k > 0 {
				n += k
				if d.maxLine > 0 && d.lineLen >= d.maxLine {
					return n, smtp.ErrTooLongLine
				}
				continue
			}
		}
		var c byte
		c, err = d.br.ReadByte()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return n, err
		}
		if d.lineLen++; c == '\n' {
			d.lineLen = 0
		} else if d.maxLine > 0 && d.lineLen >= d.maxLine {
			// Left unread, for go-smtp's drain to go on from the same
			// place and state (the CR of "<CRLF>.<CRLF>" must not be lost).
			d.br.UnreadByte()
			return n, smtp.ErrTooLongLine
		}
		if c, keep := d.step(c); keep {
			b[n] = c
			n++
		}
	}
	if d.state == dotEOF {
		return n, io.EOF
	}
	return n, nil
}

// step moves the state machine on by c, one byte read outside a run, and
// returns the byte to pass on, if any: a line's leading dot and the end of
// data are not.
func (d *dotReader) step(c byte) (byte, bool) {
	switch d.state {
	case dotBeginLine:
		switch c {
		case '.':
			d.state = dotDot
			return 0, false
		case '\r':
			d.state = dotCR
		default:
			d.state = dotData
		}
	case dotDot:
		if c == '\r' {
			d.state = dotDotCR
			return 0, false
		}
		d.state = dotData
	case dotDotCR:
		if c == '\n' {
			d.state = dotEOF
			return 0, false
		}
		// Here go-smtp drops the CR. Keep it, and read c again after it.
		d.br.UnreadByte()
		d.state = dotCR
		return '\r', true
	case dotCR:
		if c == '\n' {
			d.state = dotBeginLine
		} else if c != '\r' {
			d.state = dotData
		}
	case dotData:
		if c == '\r' {
			d.state = dotCR
		}
	}
	return c, true
}

// run copies into b the bytes already buffered before the next CR and
// returns how many, counting them into the line's length; 0 when the next
// byte is a CR or nothing is buffered.
func (d *dotReader) run(b []byte) int {
	avail := min(d.br.Buffered(), len(b))
	if avail == 0 {
		return 0
	}
	buf, _ := d.br.Peek(avail)
	if i := bytes.IndexByte(buf, '\r'); i >= 0 {
		buf = buf[:i]
	}
	k := copy(b, buf)
	d.br.Discard(k)
	// A run ends before a CR but may hold bare LFs (refused later, as bare
	// line ends), which end lines as they do for go-smtp's count.
	if i := bytes.LastIndexByte(b[:k], '\n'); i >= 0 {
		d.lineLen = k - i - 1
	} else {
		d.lineLen += k
	}
	return k
}
