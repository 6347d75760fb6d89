package store

import (
	"bytes"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/BurntSushi/toml"
)

// renderByEncoder is what Render wrote before writeFrontmatter: the message,
// sanitized, through BurntSushi/toml's reflective encoder. The tests hold
// Render to it byte for byte.
func renderByEncoder(m *Message, body string) []byte {
	c := sanitizeMessage(m)
	var buf bytes.Buffer
	buf.WriteString(delim + "\n")
	if err := toml.NewEncoder(&buf).Encode(c); err != nil {
		panic(err)
	}
	if b := buf.Bytes(); b[len(b)-1] != '\n' {
		buf.WriteByte('\n')
	}
	buf.WriteString(delim + "\n\n")
	buf.WriteString(body)
	return buf.Bytes()
}

// sanitizeMessage returns a deep copy of m whose strings are valid UTF-8 and
// whose times are representable in TOML.
func sanitizeMessage(m *Message) *Message {
	if m == nil {
		return new(Message)
	}
	v := reflect.New(reflect.TypeOf(*m)).Elem()
	v.Set(reflect.ValueOf(*m))
	fixValue(v)
	c := v.Addr().Interface().(*Message)
	// Every list field is written, empty or not, so a reader of the file sees
	// the whole schema (to, cc, reply_to, references, labels).
	for _, p := range []*[]string{&c.To, &c.Cc, &c.ReplyTo, &c.References, &c.Labels} {
		if *p == nil {
			*p = []string{}
		}
	}
	return c
}

// fixValue rewrites v in place; slices and pointers are copied first so that
// the caller's message is never modified.
func fixValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		if s := v.String(); !utf8.ValidString(s) {
			v.SetString(strings.ToValidUTF8(s, "\uFFFD"))
		}
	case reflect.Struct:
		if v.Type() == timeType {
			t := v.Interface().(time.Time)
			if y := t.Year(); y < 0 || y > 9999 {
				v.Set(reflect.ValueOf(time.Time{}))
			} else if _, off := t.Zone(); off%60 != 0 {
				// TOML offsets have minute precision.
				v.Set(reflect.ValueOf(t.UTC()))
			}
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fixValue(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.IsNil() {
			return
		}
		c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		reflect.Copy(c, v)
		for i := 0; i < c.Len(); i++ {
			fixValue(c.Index(i))
		}
		v.Set(c)
	case reflect.Pointer:
		if v.IsNil() {
			return
		}
		c := reflect.New(v.Type().Elem())
		c.Elem().Set(v.Elem())
		fixValue(c.Elem())
		v.Set(c)
	}
}
