package store

import (
	"bytes"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

var timeType = reflect.TypeOf(time.Time{})

// Loading the index of a large folder is dominated by TOML decoding, and
// almost every file was written by Render. decodeFast reads exactly the
// subset of TOML that the encoder writes (one "key = value" per line, basic
// strings, integers, booleans, offset date-times, one-line string arrays,
// [table] and [[array]] headers) and gives up on anything else, so that the
// full decoder handles hand-edited files. The index, Get and Update read
// through it. FuzzDecodeFast checks that it never disagrees with the full
// decoder, and TestFastDecodeEqualsFullOnRendered that what Render writes
// decodes to the same Message either way.

// fieldsOf maps the toml tags of a struct type to field indexes.
var fieldCache sync.Map // reflect.Type -> map[string]int

func fieldsOf(t reflect.Type) map[string]int {
	if f, ok := fieldCache.Load(t); ok {
		return f.(map[string]int)
	}
	f := map[string]int{}
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("toml"), ",")
		if name != "" && name != "-" && sf.IsExported() {
			f[name] = i
		}
	}
	fieldCache.Store(t, f)
	return f
}

var (
	timePtrType    = reflect.TypeOf((*time.Time)(nil))
	stringListType = reflect.TypeOf([]string(nil))
)

// decodeFast decodes fm into a new Message, or returns false if fm is not in
// the encoder's subset.
func decodeFast(fm []byte) (*Message, bool) {
	m := new(Message)
	top := reflect.ValueOf(m).Elem()
	cur := top
	seen := map[string]bool{} // keys and tables defined, by path
	prefix := ""
	for line := range bytes.SplitSeq(fm, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		if line[0] == '[' {
			v, path, ok := openTable(top, line, seen)
			if !ok {
				return nil, false
			}
			cur, prefix = v, path+"."
			continue
		}
		line = bytes.TrimLeft(line, " ")
		key, val, ok := bytes.Cut(line, []byte(" = "))
		if !ok || !isBareKey(key) {
			return nil, false
		}
		idx, ok := fieldsOf(cur.Type())[string(key)]
		if !ok || seen[prefix+string(key)] {
			return nil, false
		}
		seen[prefix+string(key)] = true
		if !setValue(cur.Field(idx), val) {
			return nil, false
		}
	}
	return m, true
}

// openTable handles a "[name]" or "[[name]]" line at the top level.
func openTable(top reflect.Value, line []byte, seen map[string]bool) (reflect.Value, string, bool) {
	array := bytes.HasPrefix(line, []byte("[[")) && bytes.HasSuffix(line, []byte("]]"))
	var name []byte
	switch {
	case array:
		name = line[2 : len(line)-2]
	case bytes.HasSuffix(line, []byte("]")):
		name = line[1 : len(line)-1]
	default:
		return reflect.Value{}, "", false
	}
	if !isBareKey(name) {
		return reflect.Value{}, "", false
	}
	idx, ok := fieldsOf(top.Type())[string(name)]
	if !ok {
		return reflect.Value{}, "", false
	}
	f := top.Field(idx)
	key := string(name)
	if array {
		if f.Kind() != reflect.Slice || f.Type().Elem().Kind() != reflect.Struct || (seen[key] && !seen["[["+key]) {
			return reflect.Value{}, "", false
		}
		seen[key], seen["[["+key] = true, true
		f.Set(reflect.Append(f, reflect.Zero(f.Type().Elem())))
		n := f.Len() - 1
		return f.Index(n), key + "." + strconv.Itoa(n), true
	}
	if f.Kind() != reflect.Struct || f.Type() == timeType || seen[key] {
		return reflect.Value{}, "", false
	}
	seen[key] = true
	return f, key, true
}

func isBareKey(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// setValue parses val into f according to f's type.
func setValue(f reflect.Value, val []byte) bool {
	switch {
	case f.Kind() == reflect.String:
		s, rest, ok := basicString(val)
		if !ok || len(rest) != 0 {
			return false
		}
		f.SetString(s)
	case f.Kind() == reflect.Bool:
		switch string(val) {
		case "true":
			f.SetBool(true)
		case "false":
			f.SetBool(false)
		default:
			return false
		}
	case f.Kind() == reflect.Int || f.Kind() == reflect.Int64:
		n, ok := decimal(val)
		if !ok {
			return false
		}
		f.SetInt(n)
	case f.Type() == timeType, f.Type() == timePtrType:
		t, ok := dateTime(val)
		if !ok {
			return false
		}
		v := reflect.ValueOf(t)
		if f.Type() == timePtrType {
			v = reflect.ValueOf(&t)
		}
		f.Set(v)
	case f.Type() == stringListType:
		l, ok := stringArray(val)
		if !ok {
			return false
		}
		f.Set(reflect.ValueOf(l))
	default:
		return false
	}
	return true
}

// basicString parses a TOML basic string at the start of b.
func basicString(b []byte) (string, []byte, bool) {
	if len(b) == 0 || b[0] != '"' {
		return "", nil, false
	}
	var sb strings.Builder
	for i := 1; i < len(b); i++ {
		c := b[i]
		switch {
		case c == '"':
			return sb.String(), b[i+1:], true
		case c == '\\':
			n, ok := unescape(b[i+1:], &sb)
			if !ok {
				return "", nil, false
			}
			i += n
		case c < 0x20 && c != '\t', c == 0x7f:
			return "", nil, false
		case c < utf8.RuneSelf:
			sb.WriteByte(c)
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return "", nil, false
			}
			sb.Write(b[i : i+size])
			i += size - 1
		}
	}
	return "", nil, false
}

// shortEscapes are the one-letter escapes of TOML basic strings.
var shortEscapes = [256]byte{'b': '\b', 't': '\t', 'n': '\n', 'f': '\f', 'r': '\r', '"': '"', '\\': '\\'}

// unescape decodes the escape sequence at the start of b (just after its
// backslash) into sb and returns how many bytes of b it took.
func unescape(b []byte, sb *strings.Builder) (int, bool) {
	if len(b) == 0 {
		return 0, false
	}
	if c := shortEscapes[b[0]]; c != 0 {
		sb.WriteByte(c)
		return 1, true
	}
	n := 0
	switch b[0] {
	case 'u':
		n = 4
	case 'U':
		n = 8
	default:
		return 0, false
	}
	if n >= len(b) {
		return 0, false
	}
	// In base 16, ParseUint takes hex digits only: no sign, prefix or '_'.
	r, err := strconv.ParseUint(string(b[1:1+n]), 16, 32)
	if err != nil || !utf8.ValidRune(rune(r)) {
		return 0, false
	}
	sb.WriteRune(rune(r))
	return 1 + n, true
}

// decimal parses a plain TOML decimal integer (no sign '+', no '_', no
// leading zeros).
func decimal(b []byte) (int64, bool) {
	d := bytes.TrimPrefix(b, []byte("-"))
	if len(d) == 0 || len(d) > 1 && d[0] == '0' || !isDigits(d) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	return n, err == nil
}

// dateTime parses the encoder's date-time form:
// 2006-01-02T15:04:05[.999999999](Z|±07:00).
func dateTime(b []byte) (time.Time, bool) {
	const base = len("2006-01-02T15:04:05")
	if len(b) < base+1 || !dateTimeShape(b[:base]) {
		return time.Time{}, false
	}
	rest, ok := fraction(b[base:])
	if !ok || !zoneShape(rest) {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, string(b))
	if err != nil {
		return time.Time{}, false
	}
	if _, off := t.Zone(); off == 0 && rest[0] == 'Z' {
		t = t.UTC()
	}
	return t, true
}

// dateTimeLayout marks where 2006-01-02T15:04:05 has its separators; the
// other places hold digits.
const dateTimeLayout = "dddd-dd-ddTdd:dd:dd"

// dateTimeShape reports whether b has the shape of 2006-01-02T15:04:05.
func dateTimeShape(b []byte) bool {
	for i, c := range b {
		if want := dateTimeLayout[i]; want == 'd' && (c < '0' || c > '9') || want != 'd' && c != want {
			return false
		}
	}
	return true
}

// fraction skips the fraction of a second at the start of b, if any: a dot
// and one to nine digits.
func fraction(b []byte) ([]byte, bool) {
	if len(b) == 0 || b[0] != '.' {
		return b, true
	}
	n := 1
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		n++
	}
	return b[n:], n > 1 && n <= 10
}

// zoneShape reports whether b is Z or ±07:00, an offset of at most
// 23:59 (what the decoder, like RFC 3339's time-numoffset, takes).
func zoneShape(b []byte) bool {
	return len(b) == 1 && b[0] == 'Z' ||
		len(b) == 6 && (b[0] == '+' || b[0] == '-') && b[3] == ':' && isDigits(b[1:3]) && isDigits(b[4:6]) &&
			string(b[1:3]) <= "23" && string(b[4:6]) <= "59"
}

func isDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// stringArray parses a one-line array of basic strings: ["a", "b"].
func stringArray(b []byte) ([]string, bool) {
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return nil, false
	}
	b = b[1 : len(b)-1]
	out := []string{}
	for len(b) > 0 {
		s, rest, ok := basicString(b)
		if !ok {
			return nil, false
		}
		out = append(out, s)
		if len(rest) == 0 {
			break
		}
		if !bytes.HasPrefix(rest, []byte(", ")) || len(rest) == 2 {
			return nil, false
		}
		b = rest[2:]
	}
	return out, true
}

// parseForIndex is Parse with the fast path for files written by Render.
// It is how the store reads every message file.
func parseForIndex(data []byte) (*Message, string, error) {
	fm, body, err := split(data)
	if err != nil {
		return nil, "", err
	}
	if m, ok := decodeFast(fm); ok {
		return m, string(body), nil
	}
	return Parse(data)
}
