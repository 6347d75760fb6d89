package ingest

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/mailctl/mailctl/store"
)

// FuzzParsedRoundTrips: what Parse makes of any message is stored and read
// back unchanged: every header-derived field the sender chose goes through
// the frontmatter.
func FuzzParsedRoundTrips(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.eml"))
	for _, file := range files {
		f.Add(load(f, filepath.Base(file)))
	}
	f.Add([]byte("From: =?utf-8?q?=22=5C=22?= <a@b>\r\nTo: \"+++\" <x@y>, \"\\\\\" <z@y>\r\nSubject: =?utf-8?b?Iz0iIiInJyddXVwK4oCo77u/?=\r\n" +
		"List-Id: \"\"\" <l.x>\r\nAuto-Submitted: auto\x7f\r\nMessage-ID: <\"a\\\"]]\"@x>\r\nReferences: <a'''@b> <+++@c>\r\n" +
		"Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text/x\x01y\r\nContent-Disposition: attachment; filename*=utf-8''%22%5C%0A%E2%80%A8.txt\r\n\r\nx\r\n--b--\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := Parse(raw, Options{MaxParts: 20})
		if err != nil {
			return
		}
		got, body, err := store.Parse(store.Render(&p.Msg, p.Body))
		if err != nil {
			t.Fatalf("stored frontmatter does not read back: %v", err)
		}
		if body != p.Body {
			t.Fatalf("body: -want %q +got %q", p.Body, body)
		}
		want := p.Msg
		if !got.Date.Equal(want.Date) {
			t.Fatalf("date: -want %v +got %v", want.Date, got.Date)
		}
		got.Date = want.Date
		if !reflect.DeepEqual(emptyAsNil(*got), emptyAsNil(want)) {
			t.Fatalf("message read back differs:\n-want %+v\n+got  %+v", want, *got)
		}
	})
}

// emptyAsNil is m with its empty lists nil: the frontmatter leaves out an
// empty list, which reads back as nil.
func emptyAsNil(m store.Message) store.Message {
	v := reflect.ValueOf(&m).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Slice && f.Len() == 0 {
			f.SetZero()
		}
	}
	return m
}
