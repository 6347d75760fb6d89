package main

import (
	"strings"
	"testing"
)

// A time with a zone offset of 24:00 to 24:59 parses as RFC 3339 in Go but
// cannot be written into a request: the CLI's time flags refuse it with an
// error that names it, as any other time they cannot read, before a
// request is made.
func TestTimeFlagsRefuseWhatARequestCannotCarry(t *testing.T) {
	const bad = "2027-01-01T00:00:00+24:00"
	if _, err := parseSendAt(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("--send-at %s: %v, want an error naming it", bad, err)
	}
	if _, err := parseDate(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("--before %s: %v, want an error naming it", bad, err)
	}
	for _, good := range []string{"2027-01-01T00:00:00+23:59", "2027-01-01T00:00:00Z"} {
		if _, err := parseSendAt(good); err != nil {
			t.Errorf("--send-at %s: %v", good, err)
		}
		if _, err := parseDate(good); err != nil {
			t.Errorf("--before %s: %v", good, err)
		}
	}
}
