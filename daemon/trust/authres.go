package trust

import (
	"cmp"
	"slices"
	"strings"

	"github.com/emersion/go-msgauth/authres"
)

// AuthenticationResults returns the header field recording r, ready to be
// prepended to the raw message: "Authentication-Results: <authservID>;
// spf=... smtp.mailfrom=...; dkim=... header.d=... header.s=...; dmarc=...
// header.from=...", folded to lines of at most 78 characters where it can be
// and ending in CRLF. Every value is stripped of control and special
// characters first, so a hostile HELO or signature cannot inject header lines.
func (r Result) AuthenticationResults(authservID string) string {
	spfRes := &authres.SPFResult{Value: resultValue(r.SPF.Result, spfValues)}
	if r.SPFScope == "helo" {
		spfRes.Helo = clean(r.SPF.Domain)
	} else {
		spfRes.From = clean(r.SPF.Domain)
	}
	results := []authres.Result{spfRes}

	for _, d := range r.DKIM {
		g := &authres.GenericResult{Method: "dkim", Value: resultValue(d.Result, dkimValues), Params: map[string]string{}}
		if d.Domain != "" {
			g.Params["header.d"] = clean(d.Domain)
		}
		if s := selector(d.Detail); s != "" {
			g.Params["header.s"] = s
		}
		results = append(results, g)
	}
	if len(r.DKIM) == 0 {
		results = append(results, &authres.GenericResult{Method: "dkim", Value: authres.ResultNone})
	}

	if r.SubmittedBy != "" {
		results = append(results, &authres.AuthResult{Value: authres.ResultPass, Auth: clean(r.SubmittedBy)})
	}
	results = append(results, &authres.DMARCResult{
		Value: resultValue(r.DMARC.Result, dmarcValues),
		From:  clean(r.DMARC.Domain),
	})

	id := cmp.Or(clean(authservID), "localhost")
	return fold("Authentication-Results: " + authres.Format(id, results))
}

var (
	spfValues   = []string{"pass", "fail", "softfail", "neutral", "none", "temperror", "permerror"}
	dkimValues  = []string{"pass", "fail", "neutral", "none", "temperror", "permerror", "policy"}
	dmarcValues = []string{"pass", "fail", "none", "temperror", "permerror"}
)

// resultValue passes known result words through and maps anything else to
// permerror, so a Result assembled elsewhere cannot inject text.
func resultValue(s string, allowed []string) authres.ResultValue {
	switch {
	case slices.Contains(allowed, s):
		return authres.ResultValue(s)
	case s == "":
		return authres.ResultNone
	}
	return authres.ResultPermError
}

// selector extracts the selector from a DKIM Detail ("s=<selector>[; reason]").
func selector(detail string) string {
	rest, ok := strings.CutPrefix(detail, "s=")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, "; "); i >= 0 {
		rest = rest[:i]
	}
	return clean(rest)
}

// fold breaks a header field at spaces so no line exceeds 78 characters
// (a single word longer than that stays whole), with CRLF+TAB continuations.
func fold(h string) string {
	// authres.Format leaves a space before ';' when a result has no
	// properties; drop it so words split cleanly.
	h = strings.ReplaceAll(h, " ;", ";")
	words := strings.Fields(h)
	var b strings.Builder
	lineLen := 0
	for i, w := range words {
		switch {
		case i == 0:
		case lineLen+1+len(w) > 78:
			b.WriteString("\r\n\t")
			lineLen = 1
		default:
			b.WriteByte(' ')
			lineLen++
		}
		b.WriteString(w)
		lineLen += len(w)
	}
	b.WriteString("\r\n")
	return b.String()
}
