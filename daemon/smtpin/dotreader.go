package smtpin

import (
	"bufio"
	"bytes"
	"io"
	"reflect"
	"unsafe"
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
// itself when r is not go-smtp's dot-unstuffing DATA reader.
func rawData(r io.Reader) io.Reader {
	v := reflect.ValueOf(r)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return r
	}
	e := v.Elem()
	t := e.Type()
	if t.Name() != "dataReader" || t.PkgPath() != "github.com/emersion/go-smtp" || t.NumField() < 2 {
		return r
	}
	fr, fs := t.Field(0), t.Field(1)
	if fr.Name != "r" || fr.Type != reflect.TypeOf((*bufio.Reader)(nil)) || fs.Name != "state" || fs.Type.Kind() != reflect.Int {
		return r
	}
	br := (*bufio.Reader)(e.Field(0).UnsafePointer())
	state := (*int)(unsafe.Pointer(e.Field(1).UnsafeAddr()))
	if br == nil || *state != 0 {
		return r
	}
	return &dotReader{br: br, goState: state}
}

// dotReader unstuffs the lines of DATA read from br and ends at the
// CRLF "." CRLF line, like go-smtp's reader, but keeps the CR of a line
// that starts with "." CR and goes on with anything but LF.
type dotReader struct {
	br      *bufio.Reader
	state   int
	goState *int // go-smtp's reader's state, kept equal to state
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
		switch d.state {
		case dotBeginLine:
			switch c {
			case '.':
				d.state = dotDot
				continue
			case '\r':
				d.state = dotCR
			default:
				d.state = dotData
			}
		case dotDot:
			if c == '\r' {
				d.state = dotDotCR
				continue
			}
			d.state = dotData
		case dotDotCR:
			if c == '\n' {
				d.state = dotEOF
				continue
			}
			// Here go-smtp drops the CR. Keep it, and read c again after it.
			d.br.UnreadByte()
			c = '\r'
			d.state = dotCR
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
		b[n] = c
		n++
	}
	if d.state == dotEOF {
		return n, io.EOF
	}
	return n, nil
}

// run copies into b the bytes already buffered before the next CR and
// returns how many; 0 when the next byte is a CR or nothing is buffered.
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
	return k
}
