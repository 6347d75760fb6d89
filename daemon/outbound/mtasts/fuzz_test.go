package mtasts

import (
	"strings"
	"testing"
)

// FuzzParsePolicy feeds arbitrary bodies, as a policy host (or whoever
// answers for it) could serve, to the policy parser: it must not panic, and
// what it accepts must be a usable policy whose patterns each match some
// host and that reads back the same from its own lines.
func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte(goodPolicy))
	f.Add([]byte("version: STSv1\nmode: testing\nmx: *.example.test\nmax_age: 0\n"))
	f.Add([]byte("version: STSv1\nmode: none\nmax_age: 31557600"))
	f.Add([]byte("version: STSv1\r\nmode: enforce\r\nmx: mx.example.test\r\nmx: mx.example.test\r\nmax_age: 1\r\nx: y: z\r\n"))
	f.Add([]byte("version: STSv1\nmode: enforce\nmx:\nmax_age: 99999999999\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := ParsePolicy(body)
		if err != nil {
			return
		}
		if p.Mode != ModeEnforce && p.Mode != ModeTesting && p.Mode != ModeNone {
			t.Fatalf("mode %q accepted", p.Mode)
		}
		if p.MaxAge < 0 || p.MaxAge > MaxMaxAge {
			t.Fatalf("max_age %v accepted", p.MaxAge)
		}
		if p.Mode != ModeNone && len(p.MX) == 0 {
			t.Fatalf("policy without mx accepted")
		}
		for _, mx := range p.MX {
			host := strings.Replace(mx, "*", "x", 1)
			if !p.Matches(host) {
				t.Fatalf("pattern %q does not match %q", mx, host)
			}
		}
		again, err := ParsePolicy([]byte(strings.Join(p.Lines(), "\n")))
		if err != nil || again.Mode != p.Mode || again.MaxAge != p.MaxAge || len(again.MX) != len(p.MX) {
			t.Fatalf("lines of %+v read back as %+v, %v", p, again, err)
		}
	})
}

// FuzzParseTXT: the _mta-sts record parser never panics and returns an id
// of 1-32 letters and digits or an error.
func FuzzParseTXT(f *testing.F) {
	for _, s := range []string{"v=STSv1; id=20160831085700Z;", "v=STSv1;id=", "v=STSv1; id=a; id=b", "v=STSv1 ; id = x ;;"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseTXT(s)
		if err == nil && (id == "" || len(id) > 32) {
			t.Fatalf("%q gave id %q", s, id)
		}
	})
}
