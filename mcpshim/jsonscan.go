package mcpshim

import (
	"bytes"
	"encoding/json"
)

// probeJSON reads b, one JSON text, once and without copying it: it checks
// that b is JSON, measures its nesting of arrays and objects against limit,
// and reads the members named exactly "id" and "method" of each JSON-RPC
// message in it, skipping every other value. It replaces json.Valid,
// jsonDepth and a decoding of each message into a map of its members, which
// for a message carrying attachments in base64 was a second copy of it.
//
// valid is json.Valid(b) with b nested at most limit deep; tooDeep is
// jsonDepth(b) > limit (brackets counted as written, past any error: a text
// found not to be JSON is passed over once more to count them). limit is at
// most maxJSONDepth, encoding/json's own.
//
// A message is the top-level value or, when batch is set and that value is
// an array, each of its elements. each, if not nil, is called with each
// message's probe as the pass reaches the message's end, in order, and with
// ok false for a message json.Unmarshal into a map of members refused (no
// object, nor null) or whose method is neither a string nor null. The calls
// come before the rest of b is read: they count only when b is valid.
func probeJSON(b []byte, limit int, batch bool, each func(p messageProbe, ok bool)) (valid, tooDeep bool) {
	s := jsonScanner{b: b, limit: limit}
	s.space()
	var ok bool
	if batch && s.i < len(b) && b[s.i] == '[' {
		ok = s.array(func() bool { return s.message(each) })
	} else {
		ok = s.message(each)
	}
	s.space()
	switch {
	case s.deep:
		// The brackets read so far were JSON's, so they count as jsonDepth counts.
		return false, true
	case !ok || s.i != len(b):
		return false, jsonDepth(b) > limit
	}
	return true, false
}

// jsonScanner reads JSON as encoding/json's scanner accepts it: RFC 8259's
// grammar, with any bytes of 0x80 and over in strings.
type jsonScanner struct {
	b     []byte
	i     int // the next byte to read
	depth int // arrays and objects open at i
	limit int
	deep  bool // an array or object was opened past limit
}

// members are a message's last members named "id" and "method", as written.
type members struct{ id, method []byte }

// message reads a value as a JSON-RPC message.
func (s *jsonScanner) message(each func(messageProbe, bool)) bool {
	if s.i >= len(s.b) {
		return false
	}
	first := s.b[s.i]
	var m members
	if !s.value(&m) {
		return false
	}
	if each != nil {
		each(m.probe(first))
	}
	return true
}

// probe is the message whose value began with first and had the members m.
func (m members) probe(first byte) (messageProbe, bool) {
	switch first {
	case 'n': // null: json.Unmarshal into a map leaves it empty
		return messageProbe{}, true
	case '{':
	default:
		return messageProbe{}, false
	}
	p := messageProbe{ID: bytes.Clone(m.id)}
	if m.method != nil && json.Unmarshal(m.method, &p.Method) != nil {
		return messageProbe{}, false
	}
	return p, true
}

// value reads one value; when it is an object and m is not nil, m gets its
// members "id" and "method".
func (s *jsonScanner) value(m *members) bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object(m)
	case c == '[':
		return s.array(func() bool { return s.value(nil) })
	case c == '"':
		return s.str()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	}
	return false
}

// open enters the array or object at i.
func (s *jsonScanner) open() bool {
	s.depth++
	if s.depth > s.limit {
		s.deep = true
		return false
	}
	s.i++
	s.space()
	return true
}

// next reads what follows a member or an element: a comma (true, more), or
// the closing bracket (false, done). ok is false for anything else.
func (s *jsonScanner) next(closing byte) (more, ok bool) {
	s.space()
	if s.i >= len(s.b) {
		return false, false
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		s.space()
		return true, true
	case closing:
		s.i++
		s.depth--
		return false, true
	}
	return false, false
}

func (s *jsonScanner) object(m *members) bool {
	if !s.open() {
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return true
	}
	for {
		k := s.i
		if k >= len(s.b) || s.b[k] != '"' || !s.str() {
			return false
		}
		key := s.b[k:s.i]
		s.space()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		s.space()
		v := s.i
		if !s.value(nil) {
			return false
		}
		if m != nil {
			switch memberName(key) {
			case "id":
				m.id = s.b[v:s.i]
			case "method":
				m.method = s.b[v:s.i]
			}
		}
		more, ok := s.next('}')
		if !more {
			return ok
		}
	}
}

// array reads an array, each of its elements with elem.
func (s *jsonScanner) array(elem func() bool) bool {
	if !s.open() {
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		s.depth--
		return true
	}
	for {
		if !elem() {
			return false
		}
		more, ok := s.next(']')
		if !more {
			return ok
		}
	}
}

// str reads a string, its quotes included.
func (s *jsonScanner) str() bool {
	s.i++ // the opening quote
	for s.i < len(s.b) {
		c := s.b[s.i]
		s.i++
		switch {
		case c == '"':
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if s.i >= len(s.b) {
				return false
			}
			e := s.b[s.i]
			s.i++
			switch e {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				for range 4 {
					if s.i >= len(s.b) || !isHex(s.b[s.i]) {
						return false
					}
					s.i++
				}
			default:
				return false
			}
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func (s *jsonScanner) literal(word string) bool {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return false
	}
	s.i += len(word)
	return true
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *jsonScanner) number() bool {
	if s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.digits() == 0:
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return false
		}
	}
	return true
}

// digits reads [0-9]* and says how many it read.
func (s *jsonScanner) digits() int {
	n := 0
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

// space skips JSON's white space (not Unicode's).
func (s *jsonScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

// memberName is the name of the member whose key is written as key (its
// quotes included) when that name is "id" or "method", and "" for any
// other. The name is the key unescaped, as encoding/json reads it: a key
// written longer than "method" in six escapes is neither name, and only a
// key with an escape needs decoding.
func memberName(key []byte) string {
	raw := key[1 : len(key)-1]
	if len(raw) > len(`\u006d`)*len("method") { // each character at its longest
		return ""
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		switch string(raw) {
		case "id":
			return "id"
		case "method":
			return "method"
		}
		return ""
	}
	var name string
	if json.Unmarshal(key, &name) != nil {
		return ""
	}
	switch name {
	case "id", "method":
		return name
	}
	return ""
}
