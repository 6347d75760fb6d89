package protocol

import (
	"net/mail"
	"strings"
)

// SenderMatches reports whether a message whose From header is from passes a
// sender filter of a wait: the filter's text, ignoring case, within the
// sender. A filter that names an address or a domain (it holds an '@', or is
// one word with a dot: "noreply@service.example", "github.com") is looked
// for in the sender's address only. The display name is whatever the sender
// typed, never authenticated, so `"noreply@service.example"
// <attacker@evil.example>` must not pass a wait for the service's mail (its
// one-time code, its link) while the address, the part SPF, DKIM and DMARC
// speak for, is the attacker's. Any other filter ("Alice") is looked for in
// the whole header, name included. The store's from filter of a listing
// (store.addressFilter) keeps the same rule.
func SenderMatches(from, filter string) bool {
	if filter == "" {
		return true
	}
	f := strings.ToLower(filter)
	if !strings.Contains(f, "@") && (strings.ContainsAny(f, " \t") || !strings.Contains(f, ".")) {
		return strings.Contains(strings.ToLower(from), f)
	}
	a, err := mail.ParseAddress(from)
	return err == nil && strings.Contains(strings.ToLower(a.Address), f)
}
