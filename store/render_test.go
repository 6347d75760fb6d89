package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// msgGen builds messages from bytes: every field, nil and empty lists,
// absent and present pointers, hostile strings and times TOML cannot carry.
type msgGen struct{ b []byte }

func (g *msgGen) byte() byte {
	if len(g.b) == 0 {
		return 0
	}
	c := g.b[0]
	g.b = g.b[1:]
	return c
}

var trickyStrings = []string{"", "plain", "+++", "a\"b\\c", "line\nbreak\r\t\b\f", "\x00\x01\x1f\x7f", "\xff\xfe bad utf-8",
	"héllo wörld ✓", "[[x]]", "key = value", "\u2028\u202e", `'''"""`}

func (g *msgGen) str() string {
	switch c := g.byte(); {
	case c < 128:
		return trickyStrings[int(c)%len(trickyStrings)]
	default:
		n := int(g.byte() % 16)
		var s []byte
		for range n {
			s = append(s, g.byte())
		}
		return string(s)
	}
}

func (g *msgGen) time() time.Time {
	var raw [8]byte
	for i := range raw {
		raw[i] = g.byte()
	}
	sec := int64(binary.LittleEndian.Uint64(raw[:]))
	switch g.byte() % 4 {
	case 0:
		return time.Time{}
	case 1:
		sec %= 400_000_000_000 // years from about -10700 to 14600
	default:
		sec %= 10_000_000_000
	}
	offsets := []int{0, 3600, -5 * 3600, 5*3600 + 1800, 45, -3599}
	return time.Unix(sec, int64(g.byte())*3_900_000).In(time.FixedZone("", offsets[int(g.byte())%len(offsets)]))
}

// message fills every field of a Message from the generator's bytes, by
// reflection over the struct, so that a field added to Message is rendered
// and compared with the encoder without anyone listing it here: the struct's
// tags are the one source of what the frontmatter holds.
func (g *msgGen) message() *Message {
	m := new(Message)
	g.fill(reflect.ValueOf(m).Elem())
	return m
}

// fill sets v, of any type a frontmatter field has, from the generator.
// Lists and pointers come out nil, empty or set, as files have them.
func (g *msgGen) fill(v reflect.Value) {
	switch {
	case v.Type() == timeType:
		v.Set(reflect.ValueOf(g.time()))
		return
	case v.Kind() == reflect.Pointer:
		if g.byte()%2 == 1 {
			p := reflect.New(v.Type().Elem())
			g.fill(p.Elem())
			v.Set(p)
		}
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(g.str())
	case reflect.Bool:
		v.SetBool(g.byte()%2 == 0)
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(binary.LittleEndian.Uint16([]byte{g.byte(), g.byte()})) - 100)
	case reflect.Slice:
		switch g.byte() % 3 {
		case 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		case 2:
			n := 1 + int(g.byte()%3)
			v.Set(reflect.MakeSlice(v.Type(), n, n))
			for i := range n {
				g.fill(v.Index(i))
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			g.fill(v.Field(i))
		}
	default:
		panic(fmt.Sprintf("msgGen: no generator for a frontmatter field of type %s: teach fill about it", v.Type()))
	}
}

// TestEveryFieldIsWritten sets each field of a Message (and of the tables it
// holds) alone and checks that Render writes it as the encoder does and that
// it reads back: a field the writer forgot would be dropped from every file.
func TestEveryFieldIsWritten(t *testing.T) {
	var walk func(path string, typ reflect.Type, set func(func(reflect.Value)) *Message)
	walk = func(path string, typ reflect.Type, set func(func(reflect.Value)) *Message) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			name := path + f.Name
			switch ft := f.Type; {
			case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
				walk(name+"[0].", ft.Elem(), func(change func(reflect.Value)) *Message {
					return set(func(v reflect.Value) {
						s := reflect.MakeSlice(ft, 1, 1)
						change(s.Index(0))
						v.Field(i).Set(s)
					})
				})
			case ft.Kind() == reflect.Struct && ft != timeType:
				walk(name+".", ft, func(change func(reflect.Value)) *Message {
					return set(func(v reflect.Value) { change(v.Field(i)) })
				})
			default:
				checkWritten(t, name, set(func(v reflect.Value) { nonZero(v.Field(i)) }))
			}
		}
	}
	walk("", reflect.TypeFor[Message](), func(change func(reflect.Value)) *Message {
		m := new(Message)
		change(reflect.ValueOf(m).Elem())
		return m
	})
}

// checkWritten: m renders as the encoder writes it and reads back as it was.
func checkWritten(t *testing.T, field string, m *Message) {
	t.Helper()
	got, want := Render(m, "b"), renderByEncoder(m, "b")
	if !bytes.Equal(got, want) {
		t.Errorf("%s: Render differs from the encoder:\n%s\nwant\n%s", field, got, want)
		return
	}
	back, _, err := Parse(got)
	if err != nil {
		t.Errorf("%s: %v", field, err)
		return
	}
	if !reflect.DeepEqual(normalized(back), normalized(m)) {
		t.Errorf("%s: does not read back:\n got %+v\nwant %+v", field, back, m)
	}
}

// nonZero sets v to a value that is not its type's zero value.
func nonZero(v reflect.Value) {
	switch {
	case v.Type() == timeType:
		v.Set(reflect.ValueOf(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)))
	case v.Kind() == reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		nonZero(p.Elem())
		v.Set(p)
	case v.Kind() == reflect.String:
		v.SetString("value")
	case v.Kind() == reflect.Bool:
		v.SetBool(true)
	case v.Kind() == reflect.Int || v.Kind() == reflect.Int64:
		v.SetInt(7)
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.String:
		v.Set(reflect.ValueOf([]string{"one", "two"}))
	default:
		panic(fmt.Sprintf("nonZero: no value for %s", v.Type()))
	}
}

// normalized is m as a file carries it: lists read back empty when absent.
func normalized(m *Message) *Message {
	c := *m
	for _, l := range []*[]string{&c.To, &c.Cc, &c.ReplyTo, &c.References, &c.Labels} {
		if *l == nil {
			*l = []string{}
		}
	}
	return &c
}

// FuzzRenderMatches: Render writes, byte for byte, what BurntSushi/toml's
// encoder writes for the sanitized message, and changes nothing in it.
func FuzzRenderMatches(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		seed := make([]byte, 400)
		for i := range seed {
			seed[i] = byte(r.Uint32())
		}
		f.Add(seed)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &msgGen{b: data}
		m := g.message()
		before := renderByEncoder(m, "body")
		got, want := Render(m, "body"), renderByEncoder(m, "body")
		if !bytes.Equal(got, want) {
			t.Fatalf("Render differs from the encoder:\n%s\nwant\n%s", got, want)
		}
		if !bytes.Equal(before, want) {
			t.Fatal("Render changed the message it rendered")
		}
	})
}

// TestRenderMatchesEncoder runs a few thousand generated messages through
// both writers, more than the fuzz seeds alone.
func TestRenderMatchesEncoder(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 3000 {
		data := make([]byte, 300+i%400)
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		m := (&msgGen{b: data}).message()
		if got, want := Render(m, "b"), renderByEncoder(m, "b"); !bytes.Equal(got, want) {
			t.Fatalf("message %d: Render differs from the encoder:\n%s\nwant\n%s", i, got, want)
		}
	}
	// No message is an empty one (the encoder's left its lists out).
	if got, want := Render(nil, ""), renderByEncoder(&Message{}, ""); !bytes.Equal(got, want) {
		t.Fatalf("nil message:\n%s\nwant\n%s", got, want)
	}
}

// benchMessage is a received message as delivery writes it.
func benchMessage() *Message {
	m := testMessage(1)
	m.DKIM = []AuthResult{{Result: "pass", Domain: "example.com"}}
	m.SPF = AuthResult{Result: "pass", Domain: "example.com", Detail: "matched ip"}
	return m
}

// BenchmarkRender: a received message's frontmatter, as delivery writes it.
func BenchmarkRender(b *testing.B) {
	m := benchMessage()
	for b.Loop() {
		Render(m, "A short body.")
	}
}

// BenchmarkRenderByEncoder is BenchmarkRender through the reflective encoder.
func BenchmarkRenderByEncoder(b *testing.B) {
	m := benchMessage()
	for b.Loop() {
		renderByEncoder(m, "A short body.")
	}
}
