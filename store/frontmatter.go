package store

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/mailctl/mailctl/internal/tomlkeys"
)

// The frontmatter delimiter. writeFrontmatter writes every string as a
// single-line quoted string (newlines become \n), so a line that is exactly
// "+++" can only be the delimiter, whatever the subject contains.
const delim = "+++"

// maxTOMLDepth bounds array/table nesting: the TOML parser recurses per level.
const maxTOMLDepth = 32

// ErrNoFrontmatter is returned by Parse for data that does not start with a
// "+++" line or has no closing "+++" line.
var ErrNoFrontmatter = errors.New("no +++ frontmatter")

// ErrBadFrontmatter is returned (wrapped) by Parse for frontmatter that is
// there but does not decode into a Message: a hand-edited or damaged file.
var ErrBadFrontmatter = errors.New("decoding frontmatter")

// Render returns the file form of a message: "+++\n", the TOML frontmatter,
// "+++\n", an empty line and the body. Strings that are not valid UTF-8 (which
// TOML cannot carry) have their bad bytes replaced by U+FFFD; times keep their
// instant and offset. The body is written as is.
func Render(m *Message, body string) []byte {
	if m == nil {
		m = new(Message)
	}
	var buf bytes.Buffer
	buf.Grow(1024 + len(body))
	buf.WriteString(delim + "\n")
	writeFrontmatter(&buf, m)
	buf.WriteString(delim + "\n\n")
	buf.WriteString(body)
	return buf.Bytes()
}

// Parse splits a message file into its frontmatter and body. It accepts CRLF
// delimiter lines (files edited on other systems) and never panics, whatever
// the input. The body is returned byte for byte: Parse(Render(m, b)) gives back
// b and a Message equal to the one rendered (after Render's UTF-8 repair).
func Parse(data []byte) (m *Message, body string, err error) {
	fm, rest, err := split(data)
	if err != nil {
		return nil, "", err
	}
	if d := tomlDepth(fm); d > maxTOMLDepth {
		return nil, "", fmt.Errorf("%w: it nests %d levels deep", ErrBadFrontmatter, d)
	}
	defer func() {
		// The decoder is third-party code fed with owner-written files; a bug
		// there must cost one message, not the daemon.
		if r := recover(); r != nil {
			m, body, err = nil, "", fmt.Errorf("%w: %v", ErrBadFrontmatter, r)
		}
	}()
	m = new(Message)
	md, err := toml.Decode(string(fm), m)
	if err == nil {
		err = tomlkeys.Exact(md.Keys(), m)
	}
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrBadFrontmatter, err)
	}
	return m, string(rest), nil
}

// split finds the frontmatter between the first line and the next line that is
// exactly "+++" (optionally followed by CR), and drops one empty line after it.
func split(data []byte) (fm, body []byte, err error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a BOM added by an editor
	first, rest, ok := bytes.Cut(data, []byte("\n"))
	if !ok || !isDelim(first) {
		return nil, nil, ErrNoFrontmatter
	}
	for off := 0; ; {
		line, after, more := bytes.Cut(rest[off:], []byte("\n"))
		if isDelim(line) {
			fm, body = rest[:off], after
			break
		}
		if !more {
			return nil, nil, ErrNoFrontmatter
		}
		off = len(rest) - len(after)
	}
	switch {
	case bytes.HasPrefix(body, []byte("\n")):
		body = body[1:]
	case bytes.HasPrefix(body, []byte("\r\n")):
		body = body[2:]
	}
	return fm, body, nil
}

// isDelim reports whether a line, without its \n, is the delimiter.
func isDelim(line []byte) bool { return string(bytes.TrimSuffix(line, []byte("\r"))) == delim }

// tomlDepth returns the deepest nesting of arrays and inline tables in a TOML
// document, ignoring brackets inside strings and comments.
func tomlDepth(b []byte) int {
	depth, deepest := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '#', '"', '\'':
			i = skipText(b, i)
		case '[', '{':
			depth++
			deepest = max(deepest, depth)
		case ']', '}':
			if depth > 0 {
				depth--
			}
		}
	}
	return deepest
}

// skipText returns the index of the last byte of the comment or string that
// starts at b[i] (or len(b) when it does not end).
func skipText(b []byte, i int) int {
	switch {
	case b[i] == '#':
		return endAt(b, i+1, "\n", false)
	case bytes.HasPrefix(b[i:], []byte(`"""`)):
		return endAt(b, i+3, `"""`, true)
	case bytes.HasPrefix(b[i:], []byte(`'''`)):
		return endAt(b, i+3, `'''`, false)
	case b[i] == '"':
		return endAt(b, i+1, "\"\n", true)
	default: // a literal string
		return endAt(b, i+1, "'\n", false)
	}
}

// endAt walks b from j to the end of a text: for a closing sequence of
// three quotes, its last byte; otherwise the first byte that is one of
// closers. With escapes, a backslash makes the next byte plain. It
// returns len(b) when the text does not end.
func endAt(b []byte, j int, closers string, escapes bool) int {
	for ; j < len(b); j++ {
		switch {
		case escapes && b[j] == '\\':
			j++
		case len(closers) == 3 && closers[0] == closers[1]:
			if bytes.HasPrefix(b[j:], []byte(closers)) {
				return j + 2
			}
		case strings.IndexByte(closers, b[j]) >= 0:
			return j
		}
	}
	return len(b)
}
