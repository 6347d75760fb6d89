package trust

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestParseHeaderFieldBounds: a field folded over more than maxFieldLines
// continuation lines, or longer than maxFieldBytes, is marked oversized (its
// signatures are not handed to the verifier); one exactly at either bound is
// not.
func TestParseHeaderFieldBounds(t *testing.T) {
	folded := func(lines int) string {
		return "X-Junk: a\r\n" + strings.Repeat(" x\r\n", lines)
	}
	long := func(first, cont int) string {
		h := "X-Junk:" + strings.Repeat("a", first) + "\r\n"
		if cont > 0 {
			h += " " + strings.Repeat("b", cont-1) + "\r\n"
		}
		return h
	}
	tests := []struct {
		name      string
		header    string
		oversized bool
	}{
		{"continuation lines at the bound", folded(maxFieldLines), false},
		{"one continuation line over", folded(maxFieldLines + 1), true},
		{"first line at the byte bound", long(maxFieldBytes, 0), false},
		{"first line one byte over", long(maxFieldBytes+1, 0), true},
		{"continued to the byte bound", long(maxFieldBytes-10, 10), false},
		{"continued one byte over", long(maxFieldBytes-10, 11), true},
	}
	for _, tc := range tests {
		h := parseHeader([]byte(tc.header + "From: a@trusted.test\r\n\r\nbody\r\n"))
		if h.oversized != tc.oversized || h.err != nil {
			t.Errorf("%s: oversized %v (err %v), want %v", tc.name, h.oversized, h.err, tc.oversized)
		}
		if len(h.fields) != 2 || h.fields[1].name != "From" {
			t.Errorf("%s: fields %d, want X-Junk and From", tc.name, len(h.fields))
		}
	}
}

// TestParseHeaderLineStarts: the header is split the way the DKIM verifier
// splits it, so the From read here is the From a signature covers.
func TestParseHeaderLineStarts(t *testing.T) {
	// A bare CR is malformed wherever it is in a line, its first byte too.
	for _, raw := range []string{
		"X-Note: hi\r\n\rFrom: boss@trusted.test\r\n\r\n",
		"X-Note: hi\rFrom: boss@trusted.test\r\n\r\n",
		"\rFrom: boss@trusted.test\r\n\r\n",
	} {
		h := parseHeader([]byte(raw))
		if h.err != errMalformedHeader {
			t.Errorf("%q: err %v, want the bare CR refused", raw, h.err)
		}
		if f := parseFrom(h.fields, h.err); f.err == nil {
			t.Errorf("%q: From %q read from a malformed header", raw, f.address)
		}
	}
	// A first line that starts with whitespace continues nothing: the
	// verifier reads it as a field of its own, and so does parseHeader.
	h := parseHeader([]byte(" From: boss@trusted.test\r\nTo: agent@mx.test\r\n\r\nbody\r\n"))
	if len(h.fields) != 2 || h.fields[0].name != "From" || h.fields[0].value != " boss@trusted.test" {
		t.Fatalf("fields %+v, want From then To", h.fields)
	}
	if f := parseFrom(h.fields, h.err); f.address != "boss@trusted.test" || f.err != nil {
		t.Errorf("From = %q (%v), want boss@trusted.test", f.address, f.err)
	}
}

func TestValidDomain(t *testing.T) {
	label := func(c string, n int) string { return strings.Repeat(c, n) }
	name253 := label("a", 63) + "." + label("b", 63) + "." + label("c", 63) + "." + label("d", 61)
	tests := map[string]bool{
		"az.AZ.09.a-b_c.test":   true, // every kind of character, at the ends of each range
		"z.test":                true,
		"Z9.test":               true,
		name253:                 true,
		name253 + "d":           false, // 254 characters
		label("x", 63) + ".com": true,
		label("x", 64) + ".com": false,
		"a..example.com":        false,
		".example.com":          false,
		"example.com.":          false, // callers trim the root dot first
		"":                      false,
		"a b.test":              false,
		"é.test":                false,
		"a/b.test":              false, // '/' sorts just before '0'
		"a:b.test":              false, // ':' just after '9'
		"a@b.test":              false, // '@' just before 'A'
		"a[b.test":              false, // '[' just after 'Z'
		"a`b.test":              false, // '`' just before 'a'
		"a{b.test":              false, // '{' just after 'z'
	}
	for d, want := range tests {
		if got := validDomain(d); got != want {
			t.Errorf("validDomain(%q) = %v, want %v", d, got, want)
		}
	}
}

func TestCleanAndShortReason(t *testing.T) {
	if got := clean("a!b~c.d-e_f"); got != "a!b~c.d-e_f" {
		t.Errorf("clean kept %q of printable ASCII", got)
	}
	if got := clean("a b;c(d)e\"f\\g=h\x00i\x7fj\u009bk\u0085l\uFFFDm\tn"); got != "abcdefghijklmn" {
		t.Errorf("clean = %q, want every space, control, special and replacement character dropped", got)
	}
	if got := clean(strings.Repeat("a", 300)); len(got) != 255 {
		t.Errorf("clean of 300 bytes kept %d, want 255", len(got))
	}

	if got := shortReason("line one\r\nline two\u009b[31m\x7fend\x00"); got != "line one line two [31m end" {
		t.Errorf("shortReason = %q, want one line without controls", got)
	}
	if got := shortReason(strings.Repeat("x", 200)); got != strings.Repeat("x", 120) {
		t.Errorf("shortReason of 200 bytes kept %d", len(got))
	}
	got := shortReason("a" + strings.Repeat("é", 100))
	if !utf8.ValidString(got) || got != "a"+strings.Repeat("é", 59) {
		t.Errorf("shortReason cut inside a rune: %q", got)
	}
	if got := shortReason(strings.Repeat("y", 120)); len(got) != 120 {
		t.Errorf("shortReason of exactly 120 bytes kept %d", len(got))
	}
}

// TestFoldFillsLines: folding puts as many words on a line as fit in 78
// characters, and no more.
func TestFoldFillsLines(t *testing.T) {
	words := strings.Repeat(" abcdefghi", 40) // 9-character words
	got := fold("Authentication-Results:" + words)
	lines := strings.Split(strings.TrimSuffix(got, "\r\n"), "\r\n\t")
	if len(lines) < 4 {
		t.Fatalf("folded into %d lines: %q", len(lines), got)
	}
	for i, l := range lines {
		width := len(l)
		if i > 0 {
			width++ // the tab
		}
		if width > 78 {
			t.Errorf("line %d is %d characters: %q", i, width, l)
		}
		if i < len(lines)-1 && width+1+9 <= 78 {
			t.Errorf("line %d (%d characters) had room for the next word", i, width)
		}
	}
	if strings.Join(lines, " ") != "Authentication-Results:"+words {
		t.Errorf("folding changed the words: %q", got)
	}
	// A word that ends exactly at character 78 stays on its line.
	exact := "Authentication-Results:" + strings.Repeat(" abcdefghi", 5) + " abcd"
	if got := fold(exact + " next"); got != exact+"\r\n\tnext\r\n" {
		t.Errorf("a line of exactly 78 characters was folded as %q", got)
	}
}

// TestResultValue: known result words pass, an empty one is "none", and
// anything else is "permerror", never passed through.
func TestResultValue(t *testing.T) {
	for in, want := range map[string]string{"pass": "pass", "": "none", "bogus": "permerror", "pass\r\nX: 1": "permerror"} {
		if got := string(resultValue(in, dkimValues)); got != want {
			t.Errorf("resultValue(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestFromLengthBound: a From field of exactly 8 KiB is read; one byte more
// is refused before the address parser sees it.
func TestFromLengthBound(t *testing.T) {
	from := func(n int) string { // a From value of n bytes, its leading space included
		tail := " <boss@trusted.test>"
		return " \"" + strings.Repeat("a", n-len(tail)-3) + "\"" + tail
	}
	for _, tc := range []struct {
		n  int
		ok bool
	}{{8 << 10, true}, {8<<10 + 1, false}} {
		v := from(tc.n)
		if len(v) != tc.n {
			t.Fatalf("built %d bytes, want %d", len(v), tc.n)
		}
		h := parseHeader([]byte("From:" + v + "\r\n\r\nbody\r\n"))
		f := parseFrom(h.fields, h.err)
		if ok := f.err == nil && f.address == "boss@trusted.test"; ok != tc.ok {
			t.Errorf("a From of %d bytes: address %q, err %v; want read %v", tc.n, f.address, f.err, tc.ok)
		}
	}
}

func TestSelector(t *testing.T) {
	tests := map[string]string{
		"s=ed":                           "ed",
		"s=ed; body hash did not verify": "ed",
		"s=; signature has expired":      "",
		"s= ed":                          "",
		"d=x":                            "",
		"":                               "",
	}
	for detail, want := range tests {
		if got := selector(detail); got != want {
			t.Errorf("selector(%q) = %q, want %q", detail, got, want)
		}
	}
}

// TestSPFIdentityAndDetail: which identity SPF checks, and what Detail
// says: the library's reason for a result ("matched ip"), nothing when there
// is no record, and "no client IP" when there is no address to check.
func TestSPFIdentityAndDetail(t *testing.T) {
	m := world(t)
	m.SetTXT("broken.test", "v=spf1 ip4:300.0.0.1 -all")
	msg := message("boss@trusted.test")
	for _, tc := range []struct {
		name           string
		in             Input
		result, domain string
		detail         string // "" exactly, or a substring when detailHas
		detailHas      bool
	}{
		{"pass", Input{RemoteIP: trustedIP, Helo: "mx.trusted.test", MailFrom: "a@trusted.test"}, "pass", "trusted.test", "matched ip", false},
		{"no record", Input{RemoteIP: trustedIP, Helo: "mx.trusted.test", MailFrom: "a@norecord.test"}, "none", "norecord.test", "", false},
		// RFC 5321 allows no empty local part, but the domain is still there.
		{"sender without a local part", Input{RemoteIP: trustedIP, Helo: "mx.trusted.test", MailFrom: "@trusted.test"}, "pass", "trusted.test", "matched ip", false},
		{"record error", Input{RemoteIP: trustedIP, Helo: "mx.trusted.test", MailFrom: "a@broken.test"}, "permerror", "broken.test", "", true},
		{"no client IP", Input{Helo: "mx.trusted.test", MailFrom: "a@trusted.test"}, "none", "trusted.test", "no client IP", false},
		{"unspecified IPv4", Input{RemoteIP: net.IPv4zero, Helo: "mx.trusted.test", MailFrom: "a@trusted.test"}, "none", "trusted.test", "no client IP", false},
		{"unspecified IPv6", Input{RemoteIP: net.IPv6unspecified, Helo: "mx.trusted.test", MailFrom: "a@trusted.test"}, "none", "trusted.test", "no client IP", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Raw = msg
			got, scope := checkSPF(context.Background(), m, tc.in)
			if got.Result != tc.result || got.Domain != tc.domain || scope != "mailfrom" {
				t.Errorf("SPF = %+v (%s), want %s for %s", got, scope, tc.result, tc.domain)
			}
			if tc.detailHas && got.Detail == "" || !tc.detailHas && got.Detail != tc.detail {
				t.Errorf("SPF detail = %q, want %q (any reason: %v)", got.Detail, tc.detail, tc.detailHas)
			}
		})
	}
}

// TestHeaderOfTooManyFields: a header of more fields than a real one holds
// is not interpreted: no From is read from it, so the message is not
// aligned whatever signs it, and no signature is verified. A header of
// exactly maxFields fields is checked as any other.
func TestHeaderOfTooManyFields(t *testing.T) {
	keys(t)
	c := &Checker{Resolver: world(t), Roll: func() int { return 0 }}
	check := func(added int) Result {
		fill := make([]string, added)
		for i := range fill {
			fill[i] = fmt.Sprintf("X-Filler-%d: x", i)
		}
		raw := sign(t, message("boss@trusted.test", fill...), "trusted.test", "ed", edKey)
		return c.Check(context.Background(), Input{RemoteIP: evilIP, Helo: "relay.test", MailFrom: "x@relay.test", Raw: raw})
	}
	// The signed message's fields: DKIM-Signature, those added, From, To,
	// Subject, Date and Message-ID.
	at := check(maxFields - 6)
	if len(at.DKIM) != 1 || at.DKIM[0].Result != "pass" || !at.Aligned || at.FromDomain != "trusted.test" {
		t.Errorf("%d fields: dkim %+v aligned %v from %q, want a pass, aligned", maxFields, at.DKIM, at.Aligned, at.FromDomain)
	}
	past := check(maxFields - 5)
	if len(past.DKIM) != 1 || past.DKIM[0].Result != "permerror" || past.Aligned || past.FromDomain != "" || past.DMARC.Result == "pass" {
		t.Errorf("%d fields: dkim %+v dmarc %+v aligned %v from %q, want not verified, no From, not aligned", maxFields+1, past.DKIM, past.DMARC, past.Aligned, past.FromDomain)
	}

	// What checking costs stays bounded: 2 MB of short fields after a
	// signature were kept field by field, by us and by the verifier.
	var b strings.Builder
	b.WriteString("DKIM-Signature: v=1; a=ed25519-sha256; d=trusted.test; s=ed; h=from; bh=x; b=x\r\nFrom: boss@trusted.test\r\n")
	for b.Len() < 2<<20 {
		b.WriteString("a:b\r\n")
	}
	b.WriteString("\r\nbody\r\n")
	raw := []byte(b.String())
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := c.Check(context.Background(), Input{RemoteIP: evilIP, Helo: "relay.test", MailFrom: "x@relay.test", Raw: raw})
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
		t.Errorf("checking a %d-byte header of short fields allocated %d MiB", len(raw), got>>20)
	}
	if r.Aligned || r.DKIM[0].Result != "permerror" {
		t.Errorf("2 MB header: dkim %+v aligned %v", r.DKIM, r.Aligned)
	}
}
