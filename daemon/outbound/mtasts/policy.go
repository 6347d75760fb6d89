// Package mtasts implements the sending side of MTA-STS (RFC 8461): the
// _mta-sts TXT record, the policy fetched over HTTPS, its cache, and which
// MX hosts a policy allows.
package mtasts

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Modes of a policy (RFC 8461 §3.2).
const (
	ModeEnforce = "enforce"
	ModeTesting = "testing"
	ModeNone    = "none"
)

// MaxMaxAge is the longest max_age a policy may ask for: about a year.
const MaxMaxAge = 31557600 * time.Second

// MaxPolicyBytes bounds a policy body (RFC 8461 §3.3 suggests 64 KiB).
const MaxPolicyBytes = 64 << 10

// Policy is a parsed MTA-STS policy.
type Policy struct {
	Mode   string
	MX     []string // patterns: "mail.example.com" or "*.example.com"
	MaxAge time.Duration
}

// ParsePolicy reads a policy body (RFC 8461 §3.2): "key: value" lines
// ending in CRLF or LF; version STSv1, a mode, max_age and, unless the mode
// is none, at least one mx. Unknown keys are ignored, as the RFC asks; a
// repeated key other than mx is an error, since the policy would then mean
// two things.
func ParsePolicy(b []byte) (Policy, error) {
	if len(b) > MaxPolicyBytes {
		return Policy{}, fmt.Errorf("policy is %d bytes, more than %d", len(b), MaxPolicyBytes)
	}
	var p Policy
	seen := map[string]bool{}
	for n, line := range strings.Split(strings.TrimRight(string(b), "\r\n"), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			return Policy{}, fmt.Errorf("policy line %d has no \"key: value\"", n+1)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if k != "mx" && seen[k] {
			return Policy{}, fmt.Errorf("policy key %q appears twice", k)
		}
		seen[k] = true
		switch k {
		case "version":
			if v != "STSv1" {
				return Policy{}, fmt.Errorf("policy version %q, want STSv1", v)
			}
		case "mode":
			if v != ModeEnforce && v != ModeTesting && v != ModeNone {
				return Policy{}, fmt.Errorf("policy mode %q: enforce, testing or none", v)
			}
			p.Mode = v
		case "max_age":
			secs, err := strconv.ParseUint(v, 10, 32)
			if err != nil || len(v) > 10 || time.Duration(secs)*time.Second > MaxMaxAge {
				return Policy{}, fmt.Errorf("policy max_age %q: whole seconds up to %d", v, int(MaxMaxAge.Seconds()))
			}
			p.MaxAge = time.Duration(secs) * time.Second
		case "mx":
			pat := strings.ToLower(strings.TrimSuffix(v, "."))
			if !validPattern(pat) {
				return Policy{}, fmt.Errorf("policy mx %q is not a host name or *.domain", v)
			}
			p.MX = append(p.MX, pat)
		}
	}
	switch {
	case !seen["version"]:
		return Policy{}, errors.New("policy has no version")
	case p.Mode == "":
		return Policy{}, errors.New("policy has no mode")
	case !seen["max_age"]:
		return Policy{}, errors.New("policy has no max_age")
	case p.Mode != ModeNone && len(p.MX) == 0:
		return Policy{}, errors.New("policy has no mx")
	}
	return p, nil
}

// validPattern reports whether s is a host name or "*." and a domain.
func validPattern(s string) bool {
	s = strings.TrimPrefix(s, "*.")
	if s == "" || len(s) > 253 || !strings.Contains(s, ".") {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// Matches reports whether host is one of the policy's MX hosts (RFC 8461
// §4.1): equal to a pattern, or one label followed by the domain of a
// "*." pattern ("*.example.com" matches "mx.example.com", not
// "example.com" nor "a.mx.example.com"). Case and a final dot are ignored.
func (p Policy) Matches(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, pat := range p.MX {
		if rest, ok := strings.CutPrefix(pat, "*."); ok {
			label, dom, found := strings.Cut(host, ".")
			if found && label != "" && dom == rest {
				return true
			}
			continue
		}
		if host == pat {
			return true
		}
	}
	return false
}

// Lines is the policy as RFC 8460 reports quote it (policy-string).
func (p Policy) Lines() []string {
	out := []string{"version: STSv1", "mode: " + p.Mode}
	for _, mx := range p.MX {
		out = append(out, "mx: "+mx)
	}
	return append(out, fmt.Sprintf("max_age: %d", int64(p.MaxAge.Seconds())))
}

// ParseTXT reads an _mta-sts TXT record (RFC 8461 §3.1): "v=STSv1;
// id=<1-32 letters and digits>;" with other fields ignored. It returns the
// id.
func ParseTXT(s string) (string, error) {
	fields := strings.Split(s, ";")
	if v, ok := strings.CutPrefix(strings.TrimSpace(fields[0]), "v="); !ok || strings.TrimSpace(v) != "STSv1" {
		return "", errors.New("record does not start with v=STSv1")
	}
	id := ""
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(f), "=")
		if !ok || strings.TrimSpace(k) != "id" {
			continue
		}
		if id != "" {
			return "", errors.New("record has two ids")
		}
		id = strings.TrimSpace(v)
		if id == "" || len(id) > 32 || strings.ContainsFunc(id, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
		}) {
			return "", fmt.Errorf("record id %q: 1 to 32 letters and digits", id)
		}
	}
	if id == "" {
		return "", errors.New("record has no id")
	}
	return id, nil
}

// ParseTXTRecords picks the one STSv1 record among a name's TXT records
// (RFC 8461 §3.1: several, or none, means no policy).
func ParseTXTRecords(txts []string) (string, error) {
	var ids []string
	for _, t := range txts {
		if !strings.HasPrefix(strings.TrimSpace(t), "v=STSv1") {
			continue
		}
		id, err := ParseTXT(t)
		if err != nil {
			return "", err
		}
		ids = append(ids, id)
	}
	switch len(ids) {
	case 0:
		return "", errNoRecord
	case 1:
		return ids[0], nil
	}
	return "", errors.New("more than one STSv1 record")
}

var errNoRecord = errors.New("no _mta-sts record")
