package trust

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/mail"
	"strings"

	"golang.org/x/net/publicsuffix"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// field is one header field of the incoming message, unfolded.
type field struct {
	name  string // trimmed, as written
	value string // continuation lines joined without their line breaks
}

// errMalformedHeader marks a header block we refuse to interpret: a bare CR
// inside a header line is read as a line break by some programs and not by
// others, which is exactly the disagreement a spoofed From needs.
var errMalformedHeader = errors.New("malformed header (bare CR)")

// Limits past which a header is not handed to the DKIM verifier: it joins
// continuation lines by repeated string concatenation, so one field folded
// over very many lines costs time quadratic in its size. Real fields stay far
// below these.
const (
	maxFieldLines = 1000
	maxFieldBytes = 128 << 10
)

// maxFields bounds the fields of a header we interpret. Each field read is
// kept, and so is each one the DKIM verifier reads: a 2 MB header of short
// fields cost over 100 MiB to check. Real headers hold a few dozen fields;
// past this many, the header is malformed to us: no From is read from it
// (the message is not aligned, so not trusted) and no signature verified.
const maxFields = 1000

// errTooManyFields marks a header block of more than maxFields fields.
var errTooManyFields = fmt.Errorf("malformed header (more than %d fields)", maxFields)

// header is the parsed header block of the incoming message.
type header struct {
	fields    []field
	err       error // set when the block is malformed
	oversized bool  // a field exceeds maxFieldLines or maxFieldBytes, or the fields maxFields
}

// parseHeader splits the header block the way the DKIM verifier does (lines
// end at LF with an optional CR before it, a line starting with SP or HTAB
// continues the previous field, the first empty line ends the header), so that
// the From we read is the From the signatures cover.
func parseHeader(raw []byte) header {
	var h header
	var cur strings.Builder
	lines := 0
	flush := func() {
		if len(h.fields) > 0 {
			h.fields[len(h.fields)-1].value = cur.String()
		}
		cur.Reset()
		lines = 0
	}
	for len(raw) > 0 {
		var line []byte
		line, raw, _ = bytes.Cut(raw, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			break
		}
		if bytes.IndexByte(line, '\r') >= 0 {
			h.err = errMalformedHeader
		}
		if (line[0] == ' ' || line[0] == '\t') && len(h.fields) > 0 {
			lines++
			cur.Write(line)
			if lines > maxFieldLines || cur.Len() > maxFieldBytes {
				h.oversized = true
			}
			continue
		}
		flush()
		if len(h.fields) == maxFields {
			h.err, h.oversized = errTooManyFields, true
			return h
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		h.fields = append(h.fields, field{name: strings.TrimSpace(string(name))})
		cur.Write(value)
		if cur.Len() > maxFieldBytes {
			h.oversized = true
		}
	}
	flush()
	return h
}

// passthroughCharset lets display names in unknown charsets through
// undecoded: only the address matters here, and failing the whole From over
// a display name charset would let a sender dodge the checks.
func passthroughCharset(_ string, input io.Reader) (io.Reader, error) { return input, nil }

// from is the RFC 5322.From identity of a message.
type from struct {
	address string // local@domain, domain lowercased
	domain  string
	err     error // why DMARC cannot use it; nil when usable
}

func parseFrom(fields []field, headerErr error) from {
	const maxFrom = 8 << 10 // far beyond any real From; bounds the parser's work
	var values []string
	for _, f := range fields {
		if strings.EqualFold(f.name, "From") {
			values = append(values, f.value)
		}
	}
	switch {
	case headerErr != nil:
		return from{err: headerErr}
	case len(values) == 0:
		return from{err: errors.New("no From header field")}
	case len(values) > 1:
		return from{err: fmt.Errorf("%d From header fields", len(values))}
	case len(values[0]) > maxFrom:
		return from{err: errors.New("the From header field is too long")}
	}
	p := mail.AddressParser{WordDecoder: &mime.WordDecoder{CharsetReader: passthroughCharset}}
	list, err := p.ParseList(values[0])
	switch {
	case err != nil:
		return from{err: fmt.Errorf("unparseable From: %w", err)}
	case len(list) != 1:
		return from{err: fmt.Errorf("the From header field holds %d addresses", len(list))}
	}
	addr := list[0].Address
	at := strings.LastIndexByte(addr, '@')
	if at < 0 {
		return from{err: errors.New("the From address has no domain")}
	}
	domain := normDomain(addr[at+1:])
	f := from{address: addr[:at] + "@" + domain, domain: domain}
	if !validDomain(domain) {
		f.err = errors.New("the From domain is not a valid DNS name")
	}
	return f
}

// asciiLower lowercases ASCII letters only. Unicode case folding would map
// characters such as U+212A KELVIN SIGN onto "k" and let a look-alike domain
// compare equal to a real one.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func normDomain(d string) string { return asciiLower(strings.TrimSuffix(d, ".")) }

// validDomain accepts ASCII DNS names (letters, digits, '-', '_'). Names in
// Unicode form are refused rather than compared, so they can never align.
func validDomain(d string) bool {
	if d == "" || len(d) > 253 {
		return false
	}
	for label := range strings.SplitSeq(d, ".") {
		if label == "" || len(label) > 63 || strings.ContainsFunc(label, notDNSChar) {
			return false
		}
	}
	return true
}

func notDNSChar(c rune) bool {
	return !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_')
}

// OrgDomain returns the organizational domain of domain (RFC 7489 §3.2): the
// registrable domain according to the public suffix list, lowercased. A name
// that is itself a public suffix, or is not a valid DNS name, is returned
// lowercased as it is.
func OrgDomain(domain string) string {
	d := normDomain(domain)
	if !validDomain(d) {
		return d
	}
	org, err := publicsuffix.EffectiveTLDPlusOne(d)
	if err != nil {
		return d
	}
	return org
}

// aligned reports whether an authenticated domain aligns with the From
// domain: identical in strict mode, same organizational domain in relaxed.
func aligned(authDomain, fromDomain string, strict bool) bool {
	a, f := normDomain(authDomain), normDomain(fromDomain)
	if !validDomain(a) || !validDomain(f) {
		return false
	}
	return a == f || !strict && OrgDomain(a) == OrgDomain(f)
}

// MatchSender reports whether address matches one of patterns. Patterns are
// "alice@example.com" (that address), "*@example.com" (any address at
// example.com) or "*@*.example.com" (any address at a subdomain of
// example.com, not at example.com itself). Comparison ignores ASCII case;
// any other use of '*' matches nothing, and no patterns match nothing.
func MatchSender(address string, patterns []string) bool {
	at := strings.LastIndexByte(address, '@')
	if at <= 0 {
		return false
	}
	// An empty domain ("bob@") fails validDomain below.
	local, domain := address[:at], normDomain(address[at+1:])
	if !validDomain(domain) || strings.ContainsAny(local, "\r\n\x00") {
		return false
	}
	for _, p := range patterns {
		pat := strings.TrimSuffix(asciiLower(strings.TrimSpace(p)), ".")
		at := strings.LastIndexByte(pat, '@')
		if at <= 0 {
			continue
		}
		plocal, pdomain := pat[:at], pat[at+1:]
		switch {
		case plocal == "*" && strings.HasPrefix(pdomain, "*."):
			base := pdomain[2:]
			if validDomain(base) && strings.HasSuffix(domain, "."+base) {
				return true
			}
		case plocal == "*":
			if validDomain(pdomain) && domain == pdomain {
				return true
			}
		case strings.Contains(plocal, "*") || strings.Contains(pdomain, "*"):
			// No other globbing: an unsupported pattern matches nothing.
		default:
			if validDomain(pdomain) && domain == pdomain && asciiLower(local) == plocal {
				return true
			}
		}
	}
	return false
}

// Trusted is the value of the frontmatter field "trusted": "none" when there
// is no trust policy (no patterns), "true" only when the From domain is
// authenticated with alignment and the From address matches a pattern,
// otherwise "false". A message the daemon wrote itself (Result.Generated)
// is "true".
func Trusted(r Result, patterns []string) protocol.Verdict {
	switch {
	case r.Generated:
		return protocol.Trusted // written by this daemon (DaemonReport)
	case len(patterns) == 0:
		return protocol.NoPolicy
	case r.Aligned && MatchSender(r.FromAddress, patterns):
		return protocol.Trusted
	}
	return protocol.Untrusted
}

// Summary renders a result as "pass:example.com" ("pass" alone when it has no
// domain), the form hooks receive in their environment.
func Summary(a store.AuthResult) string {
	res := cmp.Or(a.Result, "none")
	if a.Domain == "" {
		return res
	}
	return res + ":" + a.Domain
}

// ValidSenderPattern says why p is not a pattern MatchSender can match
// ("alice@example.com", "*@example.com" or "*@*.example.com"), or nil.
func ValidSenderPattern(p string) error {
	pat := asciiLower(strings.TrimSuffix(p, "."))
	at := strings.LastIndexByte(pat, '@')
	if at <= 0 || at == len(pat)-1 || strings.ContainsAny(pat, " \t\r\n\x00<>,;\"") {
		return fmt.Errorf("trusted sender %q is not an address pattern: use alice@example.com, *@example.com or *@*.example.com", p)
	}
	local, domain := pat[:at], pat[at+1:]
	if local == "*" {
		domain = strings.TrimPrefix(domain, "*.")
	} else if strings.Contains(local, "*") {
		return fmt.Errorf("trusted sender %q: '*' stands only for the whole local part (*@example.com)", p)
	}
	if strings.Contains(domain, "*") || !validDomain(domain) {
		return fmt.Errorf("trusted sender %q: %q is not a domain (a '*' may only open it, as in *@*.example.com)", p, domain)
	}
	return nil
}
