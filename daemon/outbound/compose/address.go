package compose

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	netmail "net/mail"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/emersion/go-message/mail"

	"github.com/mailctl/mailctl/protocol"
)

// checkHeaderValue refuses values that would end a header line early or
// confuse parsers. Folding is the writer's job, never the caller's.
func checkHeaderValue(field, v string) error {
	if strings.ContainsAny(v, "\r\n\x00") {
		return invalid("%s contains a line break or NUL, which would inject headers", field)
	}
	if !utf8.ValidString(v) {
		return invalid("%s is not valid UTF-8", field)
	}
	// Other control characters (an ESC that starts a terminal sequence, a
	// backspace, C1 controls) end up in the header RFC 2047-encoded, and a
	// reader shows them as they are.
	if i := strings.IndexFunc(v, func(r rune) bool { return r != '\t' && unicode.IsControl(r) }); i >= 0 {
		r, _ := utf8.DecodeRuneInString(v[i:])
		return invalid("%s holds the control character %U: plain text only", field, r)
	}
	if n := longestWord(v); n > MaxHeaderWord {
		return invalid("%s has a word of %d bytes without a space; at most %d fit a header line (RFC 5322 allows 998 bytes per line)", field, n, MaxHeaderWord)
	}
	return nil
}

// MaxHeaderWord bounds a run of non-space bytes in any header value a
// caller gives (protocol.MaxHeaderWord).
const MaxHeaderWord = protocol.MaxHeaderWord

// longestWord is the length in bytes of the longest run without a space or tab.
func longestWord(s string) int {
	best := 0
	for _, w := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == '\t' }) {
		best = max(best, len(w))
	}
	return best
}

// Address lengths from RFC 5321 §4.5.3.1: a path is at most 256 octets
// with its angle brackets, a local part at most 64.
const (
	maxAddressLen = 254
	maxLocalLen   = 64
	// MaxFilenameLen is NAME_MAX: the attachment must be savable under its
	// name, and RFC 2231 percent-encoding of it still fits a header line.
	MaxFilenameLen = 255
)

// parseAddress accepts "addr" or "Name <addr>" and returns the parsed address.
func ParseAddress(field, s string) (*mail.Address, error) {
	if err := checkHeaderValue(field, s); err != nil {
		return nil, err
	}
	a, err := netmail.ParseAddress(strings.TrimSpace(s))
	if err != nil {
		return nil, invalid("%s: %q is not an email address (%v)", field, s, err)
	}
	at := strings.LastIndexByte(a.Address, '@')
	if at <= 0 || at == len(a.Address)-1 {
		return nil, invalid("%s: %q has no domain", field, s)
	}
	if len(a.Address) > maxAddressLen || at > maxLocalLen {
		return nil, invalid("%s: %q is too long (RFC 5321: at most %d bytes, %d before the @)", field, a.Address, maxAddressLen, maxLocalLen)
	}
	dom := a.Address[at+1:]
	if strings.ContainsAny(dom, "[]") || !strings.Contains(dom, ".") && dom != "localhost" {
		return nil, invalid("%s: %q needs a domain name such as example.com", field, s)
	}
	if strings.ContainsAny(a.Address, "<> \t\"") || !dotAtom(a.Address[:at]) {
		return nil, invalid("%s: %q is not a plain address (a local part that needs quotes is not supported)", field, s)
	}
	if a.Address[0] == '-' {
		// Postfix refuses such addresses by default (allow_min_user), as
		// the SMTP server here does: programs that take addresses as
		// arguments read them as options.
		return nil, invalid("%s: %q starts with '-', which mail servers refuse (a program would read it as an option)", field, s)
	}
	return &mail.Address{Name: a.Name, Address: a.Address}, nil
}

// dotAtom reports whether a local part can be written without quotes (RFC
// 5322 dot-atom, with RFC 6532's UTF-8). net/mail unquotes a quoted local
// part, and the address goes into the SMTP envelope as it is: unquoted,
// "a,b"@example.com would be sent as the malformed <a,b@example.com>, and
// "x@elsewhere.test"@example.com as <x@elsewhere.test@example.com>.
func dotAtom(local string) bool {
	if local == "" || local[0] == '.' || local[len(local)-1] == '.' || strings.Contains(local, "..") {
		return false
	}
	for _, r := range local {
		switch {
		case r >= utf8.RuneSelf, 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
		case strings.ContainsRune(".!#$%&'*+-/=?^_`{|}~", r):
		default:
			return false
		}
	}
	return true
}

// parseEach parses every entry of in, stopping at the first error.
func parseEach[T any](field string, in []string, parse func(field, s string) (T, error)) ([]T, error) {
	var out []T
	for _, s := range in {
		x, err := parse(field, s)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}

// displayAddr is the human form kept in the sent copy (not RFC 2047 encoded).
func displayAddr(a *mail.Address) string {
	if a.Name == "" {
		return a.Address
	}
	return fmt.Sprintf("%q <%s>", a.Name, a.Address)
}

func displayList(l []*mail.Address) []string {
	var out []string
	for _, a := range l {
		out = append(out, displayAddr(a))
	}
	return out
}

// msgID normalizes a Message-ID to its form without angle brackets and
// refuses anything that cannot be a msg-id.
func msgID(field, s string) (string, error) {
	if err := checkHeaderValue(field, s); err != nil {
		return "", err
	}
	s = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "<"), ">")
	if s == "" || strings.ContainsAny(s, "<> \t()[]\\,;:\"") || !strings.Contains(s, "@") {
		return "", invalid("%s: %q is not a Message-ID (left@right)", field, s)
	}
	return s, nil
}

// newMessageID is random@domain: unguessable, so it reveals nothing and a
// reply to it can be matched to this message.
func newMessageID(domain string) string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b) + "@" + domain
}
