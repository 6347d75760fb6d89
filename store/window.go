package store

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// MaxFrontmatter bounds the frontmatter GetWindow reads; a message whose
// frontmatter (plus its opening and closing lines) is longer is ErrTooLarge.
const MaxFrontmatter = 4 << 20

// Window is part of a text, counted in characters (an invalid UTF-8 byte
// counts as one, as when ranging over a Go string).
type Window struct {
	Text  string // the characters from the offset on, at most the asked number
	Chars int    // characters in the whole text
	More  bool   // characters remain after the window
}

// GetWindow reads a message's frontmatter and a window of n characters
// from character offset off of its body, or, with raw, of its raw copy
// (<id>.eml). Whatever the size of the files, it holds in memory only the
// frontmatter, the window and a read buffer: the rest is streamed.
func (s *Store) GetWindow(mailbox, folder, id string, off, n int, raw bool) (*Message, Window, error) {
	return s.Charged(nil).GetWindow(mailbox, folder, id, off, n, raw)
}

// GetWindow is Store.GetWindow with the reading of the frontmatter charged.
func (c Charged) GetWindow(mailbox, folder, id string, off, n int, raw bool) (*Message, Window, error) {
	if err := ValidID(id); err != nil {
		return nil, Window{}, err
	}
	if off < 0 || n < 0 {
		return nil, Window{}, errors.New("window offset and length must not be negative")
	}
	mb, d, done, err := c.s.openFolder(mailbox, folder, nil)
	if err != nil {
		return nil, Window{}, err
	}
	defer done()
	mf, err := d.openMessage(id, mb.uid, c.take)
	if err != nil {
		return nil, Window{}, err
	}
	defer mf.Close()
	m := mf.m
	text := mf.rest()
	if raw {
		rf, err := d.openOwned(id+".eml", MaxMessageFile, mb.uid)
		if err != nil {
			return nil, Window{}, notFound("raw message "+id, err)
		}
		defer rf.Close()
		text = rf
	}
	w, err := window(text, off, n)
	if err != nil {
		return nil, Window{}, fmt.Errorf("message %s: %w", id, err)
	}
	return m, w, nil
}

// openOwned opens a regular file of d owned by uid, of at most max bytes,
// without following a symlink or hanging on a FIFO.
func (d *Dir) openOwned(name string, max int64, uid int) (*os.File, error) {
	f, st, err := d.OpenRegular(name)
	if err != nil {
		return nil, err
	}
	switch {
	case uid >= 0 && int(st.Uid) != uid:
		err = errForeign
	case st.Size > max:
		err = ErrTooLarge
	}
	if err != nil {
		f.Close()
		return nil, &os.PathError{Op: "open", Path: d.join(name), Err: err}
	}
	// A regular file never blocks; clear O_NONBLOCK so reads behave plainly.
	unix.SetNonblock(int(f.Fd()), false)
	return f, nil
}

// readFrontmatter reads the frontmatter from the start of br, leaving br at
// the first byte of the body (one empty line after the closing "+++" is
// part of the frame, as Parse has it).
func readFrontmatter(br *bufio.Reader) (*Message, error) {
	var head bytes.Buffer
	closed := false
	for first := true; !closed; first = false {
		line, err := br.ReadSlice('\n')
		if head.Len()+len(line) > MaxFrontmatter {
			return nil, fmt.Errorf("frontmatter: %w", ErrTooLarge)
		}
		head.Write(line)
		if err == bufio.ErrBufferFull {
			continue
		}
		trimmed := strings.TrimSuffix(strings.TrimSuffix(string(line), "\n"), "\r")
		if first && strings.TrimPrefix(trimmed, "\xef\xbb\xbf") != delim {
			return nil, ErrNoFrontmatter
		}
		closed = !first && trimmed == delim
		// io.EOF just after the closing line ends the loop, as closed does.
		if err == io.EOF && !closed {
			return nil, ErrNoFrontmatter
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
	}
	m, _, err := parseForIndex(head.Bytes())
	if err != nil {
		return nil, err
	}
	// Parse drops one empty line after the closing delimiter.
	if b, err := br.Peek(2); err == nil && string(b) == "\r\n" {
		br.Discard(2)
	} else if len(b) > 0 && b[0] == '\n' {
		br.Discard(1)
	}
	return m, nil
}

// window streams r and keeps n characters from character offset off,
// counting every character of r.
func window(r io.Reader, off, n int) (Window, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var w Window
	var text strings.Builder
	var pending [utf8.UTFMax]byte
	np := 0
	emit := func(rn []byte) {
		if w.Chars >= off && w.Chars < off+n {
			text.Write(rn)
		}
		w.Chars++
	}
	buf := make([]byte, 32<<10)
	for {
		k, err := br.Read(buf[np:])
		copy(buf, pending[:np]) // bytes of a character cut by the previous read
		data := buf[:np+k]
		np = 0
		for len(data) > 0 {
			if !utf8.FullRune(data) && err == nil {
				np = copy(pending[:], data)
				break
			}
			_, size := utf8.DecodeRune(data)
			emit(data[:size])
			data = data[size:]
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return Window{}, err
		}
	}
	w.Text = text.String()
	w.More = off+n < w.Chars
	return w, nil
}
