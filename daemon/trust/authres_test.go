package trust

import (
	"strings"
	"testing"

	"github.com/emersion/go-msgauth/authres"

	"github.com/mailctl/mailctl/store"
)

func TestAuthenticationResults(t *testing.T) {
	r := Result{
		SPF:      store.AuthResult{Result: "pass", Domain: "trusted.test"},
		SPFScope: "mailfrom",
		DKIM: []store.AuthResult{
			{Result: "pass", Domain: "trusted.test", Detail: "s=ed"},
			{Result: "fail", Domain: "evil.test", Detail: "s=sel2024; body hash did not verify"},
		},
		DMARC: store.AuthResult{Result: "pass", Domain: "trusted.test", Detail: "p=reject"},
	}
	got := r.AuthenticationResults("mx.mailctl.test")
	want := "Authentication-Results: mx.mailctl.test; spf=pass smtp.mailfrom=trusted.test;\r\n" +
		"\tdkim=pass header.d=trusted.test header.s=ed; dkim=fail header.d=evil.test\r\n" +
		"\theader.s=sel2024; dmarc=pass header.from=trusted.test\r\n"
	if got != want {
		t.Errorf("AuthenticationResults:\n-want %q\n+got  %q", want, got)
	}
	assertHeaderShape(t, got)

	id, results := parseBack(t, got)
	if id != "mx.mailctl.test" || len(results) != 4 {
		t.Fatalf("parsed back id %q, %d results", id, len(results))
	}
	if d, ok := results[1].(*authres.DKIMResult); !ok || d.Value != "pass" || d.Domain != "trusted.test" {
		t.Errorf("second result = %#v", results[1])
	}
}

func TestAuthenticationResultsHeloAndNone(t *testing.T) {
	r := Result{
		SPF:      store.AuthResult{Result: "softfail", Domain: "mx.relay.test"},
		SPFScope: "helo",
		DKIM:     []store.AuthResult{{Result: "none"}},
		DMARC:    store.AuthResult{Result: "permerror"},
	}
	got := r.AuthenticationResults("mx")
	want := "Authentication-Results: mx; spf=softfail smtp.helo=mx.relay.test; dkim=none;\r\n\tdmarc=permerror\r\n"
	if got != want {
		t.Errorf("-want %q\n+got  %q", want, got)
	}
	assertHeaderShape(t, got)
}

// Values in a Result come from the sender (HELO, d=, s=, From). None of them
// may add a header line or a result.
func TestAuthenticationResultsInjection(t *testing.T) {
	evil := "x.test\r\nX-Injected: 1\r\n; dkim=pass header.d=trusted.test"
	r := Result{
		SPF:      store.AuthResult{Result: "pass\r\nX-Injected: 1", Domain: evil},
		SPFScope: "helo",
		DKIM:     []store.AuthResult{{Result: "fail", Domain: evil, Detail: "s=" + evil}},
		DMARC:    store.AuthResult{Result: "fail", Domain: evil},
	}
	got := r.AuthenticationResults("mx\r\nX-Injected: 2")
	assertHeaderShape(t, got)
	if strings.Contains(got, "X-Injected:") && strings.Contains(got, "\nX-Injected") {
		t.Errorf("header injected: %q", got)
	}
	_, results := parseBack(t, got)
	for _, res := range results {
		if d, ok := res.(*authres.DKIMResult); ok && d.Value == "pass" {
			t.Errorf("a dkim=pass was injected: %q", got)
		}
	}
	if len(results) != 3 {
		t.Errorf("got %d results, want 3: %q", len(results), got)
	}
}

func assertHeaderShape(t *testing.T, h string) {
	t.Helper()
	if !strings.HasPrefix(h, "Authentication-Results: ") || !strings.HasSuffix(h, "\r\n") {
		t.Errorf("not a header field ending in CRLF: %q", h)
	}
	lines := strings.Split(strings.TrimSuffix(h, "\r\n"), "\r\n")
	for i, l := range lines {
		if len(l) > 78 {
			t.Errorf("line %d is %d characters: %q", i, len(l), l)
		}
		if strings.ContainsAny(l, "\r\n") {
			t.Errorf("bare CR or LF in line %d: %q", i, l)
		}
		if i > 0 && l[0] != '\t' {
			t.Errorf("continuation line %d does not start with whitespace: %q", i, l)
		}
	}
}

func parseBack(t *testing.T, h string) (string, []authres.Result) {
	t.Helper()
	v := strings.TrimPrefix(h, "Authentication-Results:")
	v = strings.ReplaceAll(v, "\r\n", "")
	id, results, err := authres.Parse(v)
	if err != nil {
		t.Fatalf("authres.Parse(%q): %v", v, err)
	}
	return id, results
}

// TestLocalSubmissionIsRecordedAsSuch: mail handed in over the socket is
// aligned only when its From is ours, is recorded with the RFC 8601 "auth"
// method, and leaves SPF as the check found it.
func TestLocalSubmissionIsRecordedAsSuch(t *testing.T) {
	r := Result{FromAddress: "alice@example.test", FromDomain: "example.test", SPF: store.AuthResult{Result: "none"}}
	LocalSubmission(&r, "alice", true)
	if !r.Aligned || r.SubmittedBy != "alice" || r.SPF.Result != "none" {
		t.Fatalf("ours: %+v", r)
	}
	ar := strings.NewReplacer("\r\n\t", " ", "\n\t", " ").Replace(r.AuthenticationResults("mx.example.test")) // unfolded
	if !strings.Contains(ar, "auth=pass smtp.auth=alice") || !strings.Contains(ar, "spf=none") {
		t.Errorf("header: %s", ar)
	}
	if Trusted(r, []string{"alice@example.test"}) != "true" {
		t.Error("a local submission from a trusted address is not trusted")
	}
	other := Result{FromAddress: "ceo@elsewhere.test", FromDomain: "elsewhere.test"}
	LocalSubmission(&other, "alice", false)
	if other.Aligned || Trusted(other, []string{"*@elsewhere.test"}) != "false" {
		t.Errorf("a From outside our domains was authenticated: %+v", other)
	}
}
