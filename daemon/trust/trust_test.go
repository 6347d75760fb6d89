package trust

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/dnstest"
	"github.com/mailctl/mailctl/store"
)

var trustedSenders = []string{"*@trusted.test", "*@example.com", "*@strict.test"}

type want struct {
	spf, dmarc  string
	dkim        []string // results in order
	dkimDomains []string // d= in order, when set
	aligned     bool
	trusted     string // with trustedSenders
	policy      string
	fromAddr    string
}

// check runs Check, and again with the message read as it streams (as a
// message too large to hold is): both must conclude the same.
func check(t *testing.T, r resolver.Resolver, in Input) Result {
	t.Helper()
	c := &Checker{Resolver: r, Timeout: 5 * time.Second}
	got := c.Check(context.Background(), in)
	if raw := in.Raw; raw != nil {
		in.Raw, in.Read = nil, func() io.Reader { return iotest.HalfReader(bytes.NewReader(raw)) }
		if streamed := c.Check(context.Background(), in); !reflect.DeepEqual(streamed, got) {
			t.Errorf("read as it streams: %+v\nheld in memory: %+v", streamed, got)
		}
	}
	return got
}

func assertResult(t *testing.T, got Result, w want) {
	t.Helper()
	if got.SPF.Result != w.spf {
		t.Errorf("SPF = %+v, want %s", got.SPF, w.spf)
	}
	if got.DMARC.Result != w.dmarc {
		t.Errorf("DMARC = %+v, want %s", got.DMARC, w.dmarc)
	}
	var dk, dd []string
	for _, d := range got.DKIM {
		dk = append(dk, d.Result)
		dd = append(dd, d.Domain)
	}
	if strings.Join(dk, ",") != strings.Join(w.dkim, ",") {
		t.Errorf("DKIM = %+v, want %v", got.DKIM, w.dkim)
	}
	if w.dkimDomains != nil && strings.Join(dd, ",") != strings.Join(w.dkimDomains, ",") {
		t.Errorf("DKIM domains = %v, want %v", dd, w.dkimDomains)
	}
	if got.Aligned != w.aligned {
		t.Errorf("Aligned = %v, want %v (result %+v)", got.Aligned, w.aligned, got)
	}
	if tr := Trusted(got, trustedSenders); string(tr) != w.trusted {
		t.Errorf("Trusted = %q, want %q", tr, w.trusted)
	}
	if got.Policy != w.policy {
		t.Errorf("Policy = %q, want %q", got.Policy, w.policy)
	}
	if w.fromAddr != "" && got.FromAddress != w.fromAddr {
		t.Errorf("FromAddress = %q, want %q", got.FromAddress, w.fromAddr)
	}
}

func TestCheck(t *testing.T) {
	keys(t)
	boss := message("Boss <boss@trusted.test>")
	tests := []struct {
		name string
		in   func() Input
		res  func(*resolver.Map)
		want want
	}{
		{
			name: "aligned Ed25519 DKIM pass",
			in: func() Input {
				return Input{RemoteIP: evilIP, Helo: "relay.test", MailFrom: "list@relay.test", Raw: sign(t, boss, "trusted.test", "ed", edKey)}
			},
			want: want{spf: "none", dkim: []string{"pass"}, dkimDomains: []string{"trusted.test"}, dmarc: "pass", aligned: true, trusted: "true", policy: "reject", fromAddr: "boss@trusted.test"},
		},
		{
			name: "aligned RSA-2048 DKIM pass",
			in: func() Input {
				return Input{RemoteIP: evilIP, Helo: "relay.test", MailFrom: "list@relay.test", Raw: sign(t, boss, "trusted.test", "rsa", rsaKey)}
			},
			want: want{spf: "none", dkim: []string{"pass"}, dmarc: "pass", aligned: true, trusted: "true", policy: "reject"},
		},
		{
			name: "DKIM and SPF pass for an unrelated domain with a trusted From",
			in: func() Input {
				return Input{RemoteIP: evilIP, Helo: "evil.test", MailFrom: "x@evil.test", Raw: sign(t, boss, "evil.test", "ed", evilKey)}
			},
			want: want{spf: "pass", dkim: []string{"pass"}, dkimDomains: []string{"evil.test"}, dmarc: "fail", aligned: false, trusted: "false", policy: "reject"},
		},
		{
			name: "relaxed alignment: d=mail.example.com for From example.com",
			in: func() Input {
				return Input{RemoteIP: evilIP, Helo: "x.test", MailFrom: "", Raw: sign(t, message("a@example.com"), "mail.example.com", "ed", edKey)}
			},
			want: want{spf: "none", dkim: []string{"pass"}, dmarc: "pass", aligned: true, trusted: "true", policy: "none"},
		},
		{
			name: "strict alignment (adkim=s): d=mail.strict.test for From strict.test",
			in: func() Input {
				return Input{RemoteIP: evilIP, Helo: "x.test", MailFrom: "", Raw: sign(t, message("a@strict.test"), "mail.strict.test", "ed", edKey)}
			},
			want: want{spf: "none", dkim: []string{"pass"}, dmarc: "fail", aligned: false, trusted: "false", policy: "quarantine"},
		},
		{
			name: "aligned SPF pass without DKIM",
			in: func() Input {
				return Input{RemoteIP: trustedIP, Helo: "mx.trusted.test", MailFrom: "bounces@trusted.test", Raw: boss}
			},
			want: want{spf: "pass", dkim: []string{"none"}, dmarc: "pass", aligned: true, trusted: "true", policy: "reject"},
		},
		{
			name: "strict SPF alignment (aspf=s): envelope mail.strict.test for From strict.test",
			in: func() Input {
				return Input{RemoteIP: trustedIP, Helo: "x.test", MailFrom: "b@mail.strict.test", Raw: message("a@strict.test")}
			},
			want: want{spf: "pass", dkim: []string{"none"}, dmarc: "fail", aligned: false, trusted: "false", policy: "quarantine"},
		},
		{
			name: "SPF pass for an unrelated envelope domain",
			in: func() Input {
				return Input{RemoteIP: evilIP, Helo: "evil.test", MailFrom: "x@evil.test", Raw: boss}
			},
			want: want{spf: "pass", dkim: []string{"none"}, dmarc: "fail", aligned: false, trusted: "false", policy: "reject"},
		},
		{
			name: "DMARC p=reject failing is recorded",
			in: func() Input {
				return Input{RemoteIP: evilIP, Helo: "evil.test", MailFrom: "boss@trusted.test", Raw: boss}
			},
			want: want{spf: "fail", dkim: []string{"none"}, dmarc: "fail", aligned: false, trusted: "false", policy: "reject"},
		},
		{
			name: "forged Authentication-Results in an unsigned message",
			in: func() Input {
				raw := message("boss@trusted.test",
					"Authentication-Results: mx.example; dkim=pass header.d=trusted.test; spf=pass smtp.mailfrom=trusted.test; dmarc=pass header.from=trusted.test")
				return Input{RemoteIP: evilIP, Helo: "evil.test", MailFrom: "x@evil.test", Raw: raw}
			},
			want: want{spf: "pass", dkim: []string{"none"}, dmarc: "fail", aligned: false, trusted: "false", policy: "reject"},
		},
		{
			name: "forged Authentication-Results covered by the attacker's own signature",
			in: func() Input {
				raw := message("boss@trusted.test", "Authentication-Results: mx.example; dkim=pass header.d=trusted.test")
				return Input{RemoteIP: evilIP, Helo: "evil.test", MailFrom: "x@evil.test", Raw: sign(t, raw, "evil.test", "ed", evilKey)}
			},
			want: want{spf: "pass", dkim: []string{"pass"}, dkimDomains: []string{"evil.test"}, dmarc: "fail", aligned: false, trusted: "false", policy: "reject"},
		},
		{
			name: "body modified after signing",
			in: func() Input {
				raw := sign(t, boss, "trusted.test", "ed", edKey)
				raw = bytes.Replace(raw, []byte("run the deploy"), []byte("wire the money"), 1)
				return Input{RemoteIP: evilIP, Helo: "evil.test", MailFrom: "", Raw: raw}
			},
			want: want{spf: "pass", dkim: []string{"fail"}, dmarc: "fail", aligned: false, trusted: "false", policy: "reject"},
		},
		{
			name: "From header rewritten after signing",
			in: func() Input {
				raw := sign(t, message("someone@trusted.test"), "trusted.test", "ed", edKey)
				raw = bytes.Replace(raw, []byte("From: someone@"), []byte("From: boss@"), 1)
				return Input{RemoteIP: evilIP, Helo: "evil.test", MailFrom: "", Raw: raw}
			},
			want: want{spf: "pass", dkim: []string{"fail"}, dmarc: "fail", aligned: false, trusted: "false", policy: "reject"},
		},
		{
			name: "second From prepended to a validly signed message",
			in: func() Input {
				raw := sign(t, message("someone@trusted.test"), "trusted.test", "ed", edKey)
				raw = append([]byte("From: boss@trusted.test\r\n"), raw...)
				return Input{RemoteIP: trustedIP, Helo: "mx.trusted.test", MailFrom: "a@trusted.test", Raw: raw}
			},
			want: want{spf: "pass", dkim: []string{"pass"}, dmarc: "permerror", aligned: false, trusted: "false"},
		},
		{
			name: "second From written with a space before the colon",
			in: func() Input {
				raw := sign(t, message("someone@trusted.test"), "trusted.test", "ed", edKey)
				raw = append([]byte("From : boss@trusted.test\r\n"), raw...)
				return Input{RemoteIP: trustedIP, Helo: "mx.trusted.test", MailFrom: "a@trusted.test", Raw: raw}
			},
			want: want{spf: "pass", dkim: []string{"pass"}, dmarc: "permerror", aligned: false, trusted: "false"},
		},
		{
			name: "SPF record needing too many lookups is a permerror",
			res: func(m *resolver.Map) {
				for i := range 12 {
					m.SetTXT(fmt.Sprintf("l%d.trusted.test", i), fmt.Sprintf("v=spf1 include:l%d.trusted.test -all", i+1))
				}
				m.SetTXT("l12.trusted.test", "v=spf1 ip4:192.0.2.10 -all")
				m.SetTXT("trusted.test", "v=spf1 include:l0.trusted.test -all")
			},
			in: func() Input {
				return Input{RemoteIP: trustedIP, Helo: "mx.trusted.test", MailFrom: "a@trusted.test", Raw: boss}
			},
			want: want{spf: "permerror", dkim: []string{"none"}, dmarc: "fail", aligned: false, trusted: "false", policy: "reject"},
		},
		{
			name: "From with two addresses",
			in: func() Input {
				raw := sign(t, message("boss@trusted.test, other@trusted.test"), "trusted.test", "ed", edKey)
				return Input{RemoteIP: trustedIP, Helo: "mx.trusted.test", MailFrom: "a@trusted.test", Raw: raw}
			},
			want: want{spf: "pass", dkim: []string{"pass"}, dmarc: "permerror", aligned: false, trusted: "false"},
		},
		{
			name: "From hidden behind a bare CR",
			in: func() Input {
				raw := message("someone@trusted.test", "X-Note: hi\rFrom: boss@trusted.test")
				return Input{RemoteIP: trustedIP, Helo: "mx.trusted.test", MailFrom: "a@trusted.test", Raw: raw}
			},
			want: want{spf: "pass", dkim: []string{"none"}, dmarc: "permerror", aligned: false, trusted: "false"},
		},
		{
			name: "no From",
			in: func() Input {
				return Input{RemoteIP: trustedIP, Helo: "mx.trusted.test", MailFrom: "a@trusted.test", Raw: message("")}
			},
			want: want{spf: "pass", dkim: []string{"none"}, dmarc: "permerror", aligned: false, trusted: "false"},
		},
		{
			name: "HELO checked when the sender is null",
			in: func() Input {
				return Input{RemoteIP: trustedIP, Helo: "mx.trusted.test", MailFrom: "", Raw: message("mailer-daemon@trusted.test")}
			},
			want: want{spf: "pass", dkim: []string{"none"}, dmarc: "pass", aligned: true, trusted: "true", policy: "reject"},
		},
		{
			name: "From domain in Unicode never aligns",
			in: func() Input {
				raw := sign(t, message("boss@trusted.te\u212At"), "trusted.test", "ed", edKey)
				return Input{RemoteIP: trustedIP, Helo: "mx.trusted.test", MailFrom: "a@trusted.test", Raw: raw}
			},
			want: want{spf: "pass", dkim: []string{"pass"}, dmarc: "permerror", aligned: false, trusted: "false"},
		},
		{
			name: "DNS temporary failures",
			res: func(m *resolver.Map) {
				m.Fail = map[string]bool{"trusted.test": true, "ed._domainkey.trusted.test": true, "_dmarc.trusted.test": true}
			},
			in: func() Input {
				return Input{RemoteIP: trustedIP, Helo: "mx.trusted.test", MailFrom: "a@trusted.test", Raw: sign(t, boss, "trusted.test", "ed", edKey)}
			},
			want: want{spf: "temperror", dkim: []string{"temperror"}, dmarc: "temperror", aligned: false, trusted: "false"},
		},
		{
			name: "subdomain without a record gets the organizational record's sp=",
			res: func(m *resolver.Map) {
				m.SetTXT("_dmarc.trusted.test", "v=DMARC1; p=reject; sp=quarantine")
			},
			in: func() Input {
				return Input{RemoteIP: evilIP, Helo: "evil.test", MailFrom: "x@news.trusted.test", Raw: message("news@news.trusted.test")}
			},
			want: want{spf: "none", dkim: []string{"none"}, dmarc: "fail", aligned: false, trusted: "false", policy: "quarantine"},
		},
		{
			// A subdomain's own record is the one that applies (RFC 7489
			// §6.6.3): its adkim=s must not be replaced by the relaxed
			// record of the organizational domain, or a sibling
			// subdomain's signature would align.
			name: "a subdomain's own DMARC record wins over the organizational domain's",
			res: func(m *resolver.Map) {
				m.SetTXT("_dmarc.org.test", "v=DMARC1; p=none")
				m.SetTXT("_dmarc.sub.org.test", "v=DMARC1; p=reject; adkim=s")
				m.SetTXT("ed._domainkey.other.org.test", dkimTXT(t, edKey.Public()))
			},
			in: func() Input {
				return Input{RemoteIP: evilIP, Helo: "x.test", MailFrom: "", Raw: sign(t, message("a@sub.org.test"), "other.org.test", "ed", edKey)}
			},
			want: want{spf: "none", dkim: []string{"pass"}, dmarc: "fail", aligned: false, trusted: "false", policy: "reject"},
		},
		{
			name: "the same signature aligns when the subdomain has no record of its own",
			res: func(m *resolver.Map) {
				m.SetTXT("_dmarc.org.test", "v=DMARC1; p=none")
				m.SetTXT("ed._domainkey.other.org.test", dkimTXT(t, edKey.Public()))
			},
			in: func() Input {
				return Input{RemoteIP: evilIP, Helo: "x.test", MailFrom: "", Raw: sign(t, message("a@sub.org.test"), "other.org.test", "ed", edKey)}
			},
			want: want{spf: "none", dkim: []string{"pass"}, dmarc: "pass", aligned: true, trusted: "false", policy: "none"},
		},
		{
			// sp= is for subdomains that have no record; a domain's own
			// record applies its p=.
			name: "a domain's own record applies p=, not sp=",
			res: func(m *resolver.Map) {
				m.SetTXT("_dmarc.trusted.test", "v=DMARC1; p=reject; sp=none")
			},
			in: func() Input {
				return Input{RemoteIP: evilIP, Helo: "evil.test", MailFrom: "x@evil.test", Raw: boss}
			},
			want: want{spf: "pass", dkim: []string{"none"}, dmarc: "fail", aligned: false, trusted: "false", policy: "reject"},
		},
		{
			name: "a subdomain with a record of its own applies its p=, not its sp=",
			res: func(m *resolver.Map) {
				m.SetTXT("_dmarc.trusted.test", "v=DMARC1; p=none")
				m.SetTXT("_dmarc.news.trusted.test", "v=DMARC1; p=quarantine; sp=none")
			},
			in: func() Input {
				return Input{RemoteIP: evilIP, Helo: "evil.test", MailFrom: "x@evil.test", Raw: message("news@news.trusted.test")}
			},
			want: want{spf: "pass", dkim: []string{"none"}, dmarc: "fail", aligned: false, trusted: "false", policy: "quarantine"},
		},
		{
			name: "no DMARC record: relaxed alignment still authenticates",
			res: func(m *resolver.Map) {
				m.SetTXT("nodmarc.test", "v=spf1 ip4:192.0.2.10 -all")
			},
			in: func() Input {
				return Input{RemoteIP: trustedIP, Helo: "x.test", MailFrom: "b@nodmarc.test", Raw: message("a@mail.nodmarc.test")}
			},
			want: want{spf: "pass", dkim: []string{"none"}, dmarc: "none", aligned: true, trusted: "false", policy: ""},
		},
		{
			name: "unreadable DMARC record: only strict alignment counts",
			res: func(m *resolver.Map) {
				m.Fail = map[string]bool{"_dmarc.example.com": true}
			},
			in: func() Input {
				return Input{RemoteIP: evilIP, Helo: "x.test", MailFrom: "", Raw: sign(t, message("a@example.com"), "mail.example.com", "ed", edKey)}
			},
			want: want{spf: "none", dkim: []string{"pass"}, dmarc: "temperror", aligned: false, trusted: "false"},
		},
		{
			name: "header folded over very many lines is not verified",
			in: func() Input {
				raw := sign(t, boss, "trusted.test", "ed", edKey)
				junk := "X-Junk: a" + strings.Repeat("\r\n x", 200000) + "\r\n"
				return Input{RemoteIP: evilIP, Helo: "x.test", MailFrom: "", Raw: append([]byte(junk), raw...)}
			},
			want: want{spf: "none", dkim: []string{"permerror"}, dkimDomains: []string{"trusted.test"}, dmarc: "fail", aligned: false, trusted: "false", policy: "reject"},
		},
		{
			name: "signing domain that only matches From after cleaning",
			res: func(m *resolver.Map) {
				m.SetTXT("ed._domainkey.trusted.test(", dkimTXT(t, evilKey.Public()))
			},
			in: func() Input {
				return Input{RemoteIP: evilIP, Helo: "x.test", MailFrom: "", Raw: sign(t, boss, "trusted.test(", "ed", evilKey)}
			},
			want: want{spf: "none", dkim: []string{"permerror"}, dkimDomains: []string{"trusted.test"}, dmarc: "fail", aligned: false, trusted: "false", policy: "reject"},
		},
		{
			name: "signature by a missing key is a permerror",
			in: func() Input {
				return Input{RemoteIP: evilIP, Helo: "x.test", MailFrom: "", Raw: sign(t, boss, "trusted.test", "gone", edKey)}
			},
			want: want{spf: "none", dkim: []string{"permerror"}, dmarc: "fail", aligned: false, trusted: "false", policy: "reject"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := world(t)
			if tc.res != nil {
				tc.res(m)
			}
			got := check(t, m, tc.in())
			assertResult(t, got, tc.want)
			if got.Aligned && !hasPass(got) {
				t.Errorf("aligned without any pass: %+v", got)
			}
		})
	}
}

func hasPass(r Result) bool {
	if r.SPF.Result == "pass" {
		return true
	}
	for _, d := range r.DKIM {
		if d.Result == "pass" {
			return true
		}
	}
	return false
}

func TestResultDetails(t *testing.T) {
	keys(t)
	m := world(t)
	raw := sign(t, message("Boss <Boss@Trusted.TEST>"), "trusted.test", "ed", edKey)
	raw = sign(t, raw, "evil.test", "ed", evilKey)
	got := check(t, m, Input{RemoteIP: evilIP, Helo: "evil.test", MailFrom: "x@EVIL.test", Raw: raw})
	if got.FromAddress != "Boss@trusted.test" || got.FromDomain != "trusted.test" {
		t.Errorf("From = %q / %q; want the local part kept and the domain lowercased", got.FromAddress, got.FromDomain)
	}
	wantDKIM := []store.AuthResult{
		{Result: "pass", Domain: "evil.test", Detail: "s=ed"},
		{Result: "pass", Domain: "trusted.test", Detail: "s=ed"},
	}
	if len(got.DKIM) != 2 || got.DKIM[0] != wantDKIM[0] || got.DKIM[1] != wantDKIM[1] {
		t.Errorf("DKIM = %+v, want %+v", got.DKIM, wantDKIM)
	}
	if got.SPF.Result != "pass" || got.SPF.Domain != "evil.test" || got.SPFScope != "mailfrom" {
		t.Errorf("SPF = %+v (%s)", got.SPF, got.SPFScope)
	}
	if got.DMARC != (store.AuthResult{Result: "pass", Domain: "trusted.test", Detail: "p=reject"}) {
		t.Errorf("DMARC = %+v", got.DMARC)
	}
	if !got.Aligned {
		t.Error("an aligned signature among others must align")
	}
	if s := Summary(got.DKIM[1]); s != "pass:trusted.test" {
		t.Errorf("Summary = %q", s)
	}
	if s := Summary(store.AuthResult{}); s != "none" {
		t.Errorf("Summary(zero) = %q", s)
	}
}

func TestMaxSignatures(t *testing.T) {
	keys(t)
	m := world(t)
	raw := message("boss@trusted.test")
	for range 4 {
		raw = sign(t, raw, "evil.test", "ed", evilKey)
	}
	raw = sign(t, raw, "trusted.test", "ed", edKey) // the newest, listed first
	c := &Checker{Resolver: m, MaxSignatures: 2}
	got := c.Check(context.Background(), Input{RemoteIP: evilIP, Helo: "evil.test", Raw: raw})
	if len(got.DKIM) != 3 || got.DKIM[0].Result != "pass" || got.DKIM[1].Result != "pass" || got.DKIM[2].Result != "neutral" {
		t.Fatalf("DKIM = %+v; want 2 verified and one neutral entry for the rest", got.DKIM)
	}
	if !strings.Contains(got.DKIM[2].Detail, "3 more") {
		t.Errorf("neutral entry detail = %q", got.DKIM[2].Detail)
	}
}

func TestOverDNSServer(t *testing.T) {
	t.Parallel() // waits on DNS deadlines or Python; the rest of the package need not wait with it
	keys(t)
	srv, addr := dnstest.Start(t,
		dnstest.Record{Name: "rsa._domainkey.trusted.test", Type: "TXT", Value: dkimTXT(t, rsaKey.Public())},
		dnstest.Record{Name: "_dmarc.trusted.test", Type: "TXT", Value: "v=DMARC1; p=reject"},
		dnstest.Record{Name: "trusted.test", Type: "TXT", Value: "v=spf1 mx -all"},
		dnstest.Record{Name: "trusted.test", Type: "MX", Value: "10 mx.trusted.test"},
		dnstest.Record{Name: "mx.trusted.test", Type: "A", Value: "192.0.2.10"},
	)
	c := &Checker{Resolver: resolver.New(addr, time.Second), Timeout: 3 * time.Second}
	raw := sign(t, message("boss@trusted.test"), "trusted.test", "rsa", rsaKey)
	in := Input{RemoteIP: trustedIP, Helo: "mx.trusted.test", MailFrom: "boss@trusted.test", Raw: raw}

	got := c.Check(context.Background(), in)
	assertResult(t, got, want{spf: "pass", dkim: []string{"pass"}, dmarc: "pass", aligned: true, trusted: "true", policy: "reject"})

	// A key server that stops answering gives temperror within the deadline,
	// never fail.
	srv.Hang("rsa._domainkey.trusted.test", true)
	srv.ServFail("trusted.test", true)
	c.Timeout = 250 * time.Millisecond
	start := time.Now()
	got = c.Check(context.Background(), in)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Check took %v with a 250ms timeout", d)
	}
	if got.DKIM[0].Result != "temperror" || got.SPF.Result != "temperror" || got.Aligned {
		t.Errorf("with DNS down: DKIM %+v, SPF %+v, aligned %v", got.DKIM, got.SPF, got.Aligned)
	}

	// The record changes while the server runs: the key is revoked.
	srv.Hang("rsa._domainkey.trusted.test", false)
	srv.ServFail("trusted.test", false)
	if err := srv.Set("rsa._domainkey.trusted.test", "TXT", "v=DKIM1; k=rsa; p="); err != nil {
		t.Fatal(err)
	}
	got = c.Check(context.Background(), in)
	if got.DKIM[0].Result != "permerror" {
		t.Errorf("revoked key: DKIM %+v, want permerror", got.DKIM)
	}
}

func TestContextDeadline(t *testing.T) {
	t.Parallel() // waits on DNS deadlines or Python; the rest of the package need not wait with it
	keys(t)
	srv, addr := dnstest.Start(t)
	srv.Hang("ed._domainkey.trusted.test", true)
	srv.Hang("trusted.test", true)
	srv.Hang("_dmarc.trusted.test", true)
	c := &Checker{Resolver: resolver.New(addr, 5*time.Second)}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	got := c.Check(ctx, Input{RemoteIP: trustedIP, Helo: "mx.trusted.test", MailFrom: "a@trusted.test",
		Raw: sign(t, message("boss@trusted.test"), "trusted.test", "ed", edKey)})
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Check ignored the context deadline: took %v", d)
	}
	if got.Aligned || got.SPF.Result != "temperror" || got.DKIM[0].Result != "temperror" {
		t.Errorf("got %+v; want temperrors and not aligned", got)
	}
}

// TestCheckWithoutAMessage: an Input that carries neither the bytes nor a
// way to read them is checked as an empty message (SPF still runs), not
// dereferenced.
func TestCheckWithoutAMessage(t *testing.T) {
	c := &Checker{Resolver: world(t), Roll: func() int { return 0 }}
	r := c.Check(context.Background(), Input{RemoteIP: trustedIP, Helo: "mx.trusted.test", MailFrom: "b@trusted.test"})
	if r.SPF.Result != "pass" || len(r.DKIM) != 1 || r.DKIM[0].Result != "none" || r.FromDomain != "" || r.Aligned {
		t.Errorf("no message: spf %+v dkim %+v from %q aligned %v", r.SPF, r.DKIM, r.FromDomain, r.Aligned)
	}
}

// TestHeaderReadStopsAtTheBlankLine: a message read from disk is read for
// its header only as far as the line that ends it, however long the body.
func TestHeaderReadStopsAtTheBlankLine(t *testing.T) {
	const head = "From: Boss <boss@trusted.test>\r\nSubject: hi\r\n\r\n"
	body := strings.Repeat("From: evil@evil.test\r\n", 1000)
	for _, ending := range []string{"\r\n", "\n"} {
		h := strings.ReplaceAll(head, "\r\n", ending)
		in := Input{Read: func() io.Reader { return strings.NewReader(h + body) }}
		if got := string(in.header()); got != h {
			t.Errorf("header with %q line ends = %d bytes %q..., want the %d bytes up to the blank line", ending, len(got), got[:min(len(got), 80)], len(h))
		}
	}
	in := Input{Read: func() io.Reader { return strings.NewReader("From: a@b.test\r\nSubject: no body") }}
	if got := string(in.header()); got != "From: a@b.test\r\nSubject: no body" {
		t.Errorf("header of a message without a body = %q", got)
	}
}

// TestDispositionWithTheDefaultRoll: a Checker without an injected roll
// samples pct= with its own random numbers, giving one of the two
// dispositions the record allows.
func TestDispositionWithTheDefaultRoll(t *testing.T) {
	m := world(t)
	m.SetTXT("_dmarc.trusted.test", "v=DMARC1; p=reject; pct=50")
	c := &Checker{Resolver: m}
	seen := map[string]bool{}
	for range 200 {
		r := c.Check(context.Background(), Input{RemoteIP: evilIP, Helo: "evil.test", MailFrom: "x@evil.test", Raw: message("boss@trusted.test")})
		if r.Disposition != "reject" && r.Disposition != "quarantine" {
			t.Fatalf("disposition %q, want reject or quarantine", r.Disposition)
		}
		seen[r.Disposition] = true
	}
	if len(seen) != 2 {
		t.Errorf("200 messages at pct=50 all got %v", seen)
	}
}
