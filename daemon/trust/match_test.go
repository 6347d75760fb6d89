package trust

import (
	"strings"
	"testing"
)

func TestMatchSender(t *testing.T) {
	tests := []struct {
		addr     string
		patterns []string
		want     bool
	}{
		{"alice@example.com", []string{"alice@example.com"}, true},
		{"Alice@Example.COM", []string{"alice@example.com"}, true},
		{"alice@example.com", []string{"ALICE@EXAMPLE.COM."}, true},
		{"bob@example.com", []string{"alice@example.com"}, false},
		// The local part alone never matches: an attacker signs for a
		// domain of their own with a trusted sender's local part.
		{"alice@evil.test", []string{"alice@example.com"}, false},
		{"alice@example.com.evil.test", []string{"alice@example.com"}, false},
		{"alice@sub.example.com", []string{"alice@example.com"}, false},
		{"ZED@Z.TEST", []string{"zed@z.test"}, true},
		// An address the parser would never produce still never matches:
		// controls in the local part, an empty label in the domain.
		{"a\nb@example.com", []string{"*@example.com"}, false},
		{"a\x00b@example.com", []string{"*@example.com"}, false},
		{"bob@a..example.com", []string{"*@*.example.com"}, false},
		{"bob@.example.com", []string{"*@*.example.com"}, false},
		{"bob@example.com", []string{"*@example.com"}, true},
		{"bob@sub.example.com", []string{"*@example.com"}, false},
		{"bob@sub.example.com", []string{"*@*.example.com"}, true},
		{"bob@a.b.example.com", []string{"*@*.example.com"}, true},
		{"bob@example.com", []string{"*@*.example.com"}, false},
		{"bob@badexample.com", []string{"*@*.example.com"}, false},
		{"bob@badexample.com", []string{"*@example.com"}, false},
		{"bob@example.com.evil.test", []string{"*@example.com"}, false},
		{"bob@example.com", nil, false},
		{"bob@example.com", []string{}, false},
		{"bob@example.com", []string{""}, false},
		{"bob@example.com", []string{"*"}, false},
		{"bob@example.com", []string{"*@*"}, false},
		{"bob@example.com", []string{"b*@example.com"}, false},
		{"bob@example.com", []string{"*@exam*.com"}, false},
		{"bob@example.com", []string{"bob@*.com"}, false},
		// '*' is an ordinary character in an address; in a pattern's local
		// part it matches nothing, not even itself.
		{"b*@example.com", []string{"b*@example.com"}, false},
		{"bob@example.com", []string{"@example.com"}, false},
		{"bob@example.com", []string{"nobody@x.test", "*@example.com"}, true},
		{"", []string{"*@example.com"}, false},
		{"@example.com", []string{"*@example.com"}, false},
		{"bob@", []string{"*@example.com"}, false},
		{"bob", []string{"bob"}, false},
		// Unicode case folding would turn KELVIN SIGN into "k".
		{"bob@\u212Aey.test", []string{"*@key.test"}, false},
		{"\u212Aate@key.test", []string{"kate@key.test"}, false},
		{"ünï@key.test", []string{"ünï@key.test"}, true},
	}
	for _, tc := range tests {
		if got := MatchSender(tc.addr, tc.patterns); got != tc.want {
			t.Errorf("MatchSender(%q, %q) = %v, want %v", tc.addr, tc.patterns, got, tc.want)
		}
	}
}

func TestTrusted(t *testing.T) {
	aligned := Result{Aligned: true, FromAddress: "boss@trusted.test"}
	unaligned := Result{Aligned: false, FromAddress: "boss@trusted.test"}
	tests := []struct {
		r        Result
		patterns []string
		want     string
	}{
		{aligned, nil, "none"},
		{unaligned, nil, "none"},
		{aligned, []string{"*@trusted.test"}, "true"},
		{aligned, []string{"*@other.test"}, "false"},
		{unaligned, []string{"*@trusted.test"}, "false"},
		{Result{Aligned: true}, []string{"*@trusted.test"}, "false"},
	}
	for _, tc := range tests {
		if got := Trusted(tc.r, tc.patterns); string(got) != tc.want {
			t.Errorf("Trusted(%+v, %q) = %q, want %q", tc.r, tc.patterns, got, tc.want)
		}
	}
}

func TestOrgDomain(t *testing.T) {
	tests := map[string]string{
		"example.com":            "example.com",
		"Mail.Example.COM.":      "example.com",
		"a.b.example.co.uk":      "example.co.uk",
		"co.uk":                  "co.uk",
		"trusted.test":           "trusted.test",
		"mx.trusted.test":        "trusted.test",
		"alice.github.io":        "alice.github.io",
		"":                       "",
		"localhost":              "localhost",
		"bad..domain":            "bad..domain",
		"[192.0.2.1]":            "[192.0.2.1]",
		"xn--mnchen-3ya.de":      "xn--mnchen-3ya.de",
		"mail.xn--mnchen-3ya.de": "xn--mnchen-3ya.de",
	}
	for in, want := range tests {
		if got := OrgDomain(in); got != want {
			t.Errorf("OrgDomain(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAligned(t *testing.T) {
	tests := []struct {
		auth, from string
		strict     bool
		want       bool
	}{
		{"example.com", "example.com", true, true},
		{"mail.example.com", "example.com", false, true},
		{"mail.example.com", "example.com", true, false},
		{"example.com", "news.example.com", false, true},
		{"evil.test", "trusted.test", false, false},
		{"co.uk", "example.co.uk", false, false},
		{"evil.co.uk", "example.co.uk", false, false},
		{"github.io", "alice.github.io", false, false},
		{"bob.github.io", "alice.github.io", false, false},
		{"", "", false, false},
		{"test", "test", false, true},
	}
	for _, tc := range tests {
		if got := aligned(tc.auth, tc.from, tc.strict); got != tc.want {
			t.Errorf("aligned(%q, %q, strict=%v) = %v, want %v", tc.auth, tc.from, tc.strict, got, tc.want)
		}
	}
}

func FuzzMatchSender(f *testing.F) {
	f.Add("alice@example.com", "*@example.com")
	f.Add("bob@sub.example.com", "*@*.example.com")
	f.Add("Alice@Example.com", "alice@example.com")
	f.Add("\u212Aate@key.test", "kate@key.test")
	f.Add("a@b@c.test", "*@c.test")
	f.Fuzz(func(t *testing.T, addr, pattern string) {
		if !MatchSender(addr, []string{pattern}) {
			return
		}
		at := strings.LastIndexByte(addr, '@')
		pat := strings.TrimSuffix(asciiLower(strings.TrimSpace(pattern)), ".")
		pat2 := strings.LastIndexByte(pat, '@')
		if at <= 0 || pat2 <= 0 {
			t.Fatalf("matched without a domain: %q %q", addr, pattern)
		}
		domain, pdomain := normDomain(addr[at+1:]), pat[pat2+1:]
		switch {
		case strings.HasPrefix(pdomain, "*."):
			if !strings.HasSuffix(domain, pdomain[1:]) {
				t.Fatalf("%q matched %q outside the subdomain", addr, pattern)
			}
		case domain != pdomain:
			t.Fatalf("%q matched %q with another domain", addr, pattern)
		}
		if pl := pat[:pat2]; pl != "*" && asciiLower(addr[:at]) != pl {
			t.Fatalf("%q matched %q with another local part", addr, pattern)
		}
	})
}

func TestParseFrom(t *testing.T) {
	tests := []struct {
		header  string
		addr    string // "" when unusable
		wantErr bool
	}{
		{"From: boss@Trusted.Test\r\n", "boss@trusted.test", false},
		{"From: Boss <boss@trusted.test>\r\n", "boss@trusted.test", false},
		{"From: =?utf-8?b?QsO2c3M=?= <boss@trusted.test>\r\n", "boss@trusted.test", false},
		{"From: =?iso-8859-2?q?B=F3ss?= <boss@trusted.test>\r\n", "boss@trusted.test", false},
		{"From: =?x-unknown?q?B=F3ss?= <boss@trusted.test>\r\n", "boss@trusted.test", false},
		{"From: \"boss@trusted.test\" <x@evil.test>\r\n", "x@evil.test", false},
		{"From: Boss\r\n <boss@trusted.test>\r\n", "boss@trusted.test", false},
		{"from: boss@trusted.test\r\n", "boss@trusted.test", false},
		{"From: \"a@b\"@trusted.test\r\n", "a@b@trusted.test", false},
		{"From: boss@trusted.test\r\nFROM: boss@trusted.test\r\n", "", true},
		{"From: a@trusted.test, b@trusted.test\r\n", "", true},
		{"From: undisclosed:;\r\n", "", true},
		{"From: <>\r\n", "", true},
		{"From: boss\r\n", "", true},
		{"From: boss@[192.0.2.1]\r\n", "boss@[192.0.2.1]", true},
		{"From: boss@trusted..test\r\n", "", true},
		{"Subject: no from\r\n", "", true},
		{"From: \x00\xff@@\r\n", "", true},
	}
	for _, tc := range tests {
		h := parseHeader([]byte(tc.header + "\r\nbody\r\n"))
		f := parseFrom(h.fields, h.err)
		if f.address != tc.addr || (f.err != nil) != tc.wantErr {
			t.Errorf("%q: address %q err %v; want %q, error %v", tc.header, f.address, f.err, tc.addr, tc.wantErr)
		}
	}
}
