package protocol

import "strings"

// IsAutoSubmitted reports whether an Auto-Submitted field's value marks
// the message as automatic (RFC 3834 section 5): the keyword is compared
// without case, parameters after ';' are ignored, and only "no" (or no
// field) means a person sent it.
func IsAutoSubmitted(v string) bool {
	v, _, _ = strings.Cut(v, ";")
	v = strings.TrimSpace(v)
	return v != "" && !strings.EqualFold(v, "no")
}
