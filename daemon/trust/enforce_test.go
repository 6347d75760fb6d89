package trust

import (
	"context"
	"net"
	"testing"

	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/store"
)

// TestDisposition checks the policy a failing message gets: p=, sp= for a
// subdomain, and pct= sampling with an injected roll (RFC 7489 §6.6.4: a
// message outside the sample gets the next less strict policy).
func TestDisposition(t *testing.T) {
	tests := []struct {
		name   string
		record string
		from   string
		roll   int
		want   string
		detail string
		rolls  int // a roll is drawn only when pct= leaves something to chance
	}{
		{"reject", "v=DMARC1; p=reject", "boss@trusted.test", 99, "reject", "p=reject", 0},
		{"quarantine", "v=DMARC1; p=quarantine", "boss@trusted.test", 0, "quarantine", "p=quarantine", 0},
		{"none", "v=DMARC1; p=none", "boss@trusted.test", 0, "none", "p=none", 0},
		{"pct sampled in", "v=DMARC1; p=reject; pct=50", "boss@trusted.test", 49, "reject", "p=reject", 1},
		{"pct sampled out: reject becomes quarantine", "v=DMARC1; p=reject; pct=50", "boss@trusted.test", 50, "quarantine", "p=reject pct=50 (not sampled: quarantine)", 1},
		{"pct sampled out: quarantine becomes none", "v=DMARC1; p=quarantine; pct=10", "boss@trusted.test", 10, "none", "p=quarantine pct=10 (not sampled: none)", 1},
		{"pct=0 samples nothing", "v=DMARC1; p=reject; pct=0", "boss@trusted.test", 0, "quarantine", "p=reject pct=0 (not sampled: quarantine)", 0},
		{"pct=100 samples everything", "v=DMARC1; p=reject; pct=100", "boss@trusted.test", 99, "reject", "p=reject", 0},
		{"sp applies to a subdomain", "v=DMARC1; p=reject; sp=quarantine", "news@news.trusted.test", 0, "quarantine", "p=reject sp=quarantine", 0},
		{"sp=none spares a subdomain", "v=DMARC1; p=reject; sp=none", "news@news.trusted.test", 0, "none", "p=reject sp=none", 0},
		{"p applies to a subdomain without sp", "v=DMARC1; p=reject", "news@news.trusted.test", 0, "reject", "p=reject", 0},
		{"p=none draws no sample", "v=DMARC1; p=none; pct=50", "boss@trusted.test", 0, "none", "p=none", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := world(t)
			m.SetTXT("_dmarc.trusted.test", tc.record)
			rolls := 0
			c := &Checker{Resolver: m, Roll: func() int { rolls++; return tc.roll }}
			r := c.Check(context.Background(), Input{RemoteIP: evilIP, Helo: "evil.test", MailFrom: "x@evil.test", Raw: message(tc.from)})
			if r.DMARC.Result != "fail" || r.Disposition != tc.want || r.DMARC.Detail != tc.detail {
				t.Errorf("dmarc %+v disposition %q, want fail, %q, detail %q", r.DMARC, r.Disposition, tc.want, tc.detail)
			}
			if rolls != tc.rolls {
				t.Errorf("rolled %d times for one message, want %d", rolls, tc.rolls)
			}
		})
	}
}

// TestDispositionOnlyOnFail: a pass, or a record that could not be read,
// asks nothing of the message.
func TestDispositionOnlyOnFail(t *testing.T) {
	m := world(t)
	c := &Checker{Resolver: m, Roll: func() int { return 0 }}
	pass := c.Check(context.Background(), Input{RemoteIP: trustedIP, Helo: "mx.trusted.test", MailFrom: "b@trusted.test", Raw: message("boss@trusted.test")})
	if pass.DMARC.Result != "pass" || pass.Disposition != "" {
		t.Errorf("pass: %+v disposition %q", pass.DMARC, pass.Disposition)
	}
	m.Fail = map[string]bool{"_dmarc.trusted.test": true}
	temp := c.Check(context.Background(), Input{RemoteIP: evilIP, Helo: "evil.test", MailFrom: "x@evil.test", Raw: message("boss@trusted.test")})
	if temp.DMARC.Result != "temperror" || temp.Disposition != "" {
		t.Errorf("temperror: %+v disposition %q", temp.DMARC, temp.Disposition)
	}
}

func TestParseForwarders(t *testing.T) {
	good := []string{"192.0.2.0/24", "2001:db8::/32", "198.51.100.7", "::ffff:192.0.2.0/120", "lists.example.org", "Example.COM."}
	fs, err := ParseForwarders(good)
	if err != nil || len(fs) != len(good) {
		t.Fatalf("ParseForwarders(%q) = %v, %v", good, fs, err)
	}
	for _, bad := range []string{"", "0.0.0.0/0", "::/0", "localhost", "not a domain", "10.0.0.0/33", "*.example.com"} {
		if _, err := ParseForwarders([]string{bad}); err == nil {
			t.Errorf("ParseForwarders(%q) accepted it", bad)
		}
	}
}

// TestDecide attacks the exemption and the switch: only a DMARC fail with a
// reject or quarantine disposition acts, a forwarder is matched by network
// or by a domain that really authenticated the message (a failing DKIM
// signature or a look-alike domain does not count), and local submissions
// are never judged.
func TestDecide(t *testing.T) {
	fw, err := ParseForwarders([]string{"192.0.2.0/24", "lists.example.org", "2001:db8:1::/48", "::ffff:198.51.100.0/120"})
	if err != nil {
		t.Fatal(err)
	}
	on := Enforcement{Enabled: true, Forwarders: fw}
	fail := func(disp string) Result {
		return Result{DMARC: store.AuthResult{Result: "fail", Domain: "trusted.test", Detail: "p=" + disp}, Disposition: disp,
			SPF: store.AuthResult{Result: "none"}, SPFScope: "mailfrom", DKIM: []store.AuthResult{{Result: "none"}}}
	}
	with := func(r Result, f func(*Result)) Result { f(&r); return r }
	tests := []struct {
		name string
		e    Enforcement
		ip   string
		r    Result
		want Action
	}{
		{"reject", on, "203.0.113.5", fail("reject"), Reject},
		{"quarantine", on, "203.0.113.5", fail("quarantine"), Quarantine},
		{"none", on, "203.0.113.5", fail("none"), Deliver},
		{"switched off", Enforcement{Forwarders: fw}, "203.0.113.5", fail("reject"), Deliver},
		{"pass", on, "203.0.113.5", with(fail("reject"), func(r *Result) { r.DMARC.Result = "pass" }), Deliver},
		{"temperror", on, "203.0.113.5", with(fail("reject"), func(r *Result) { r.DMARC.Result = "temperror" }), Deliver},
		{"forwarder network", on, "192.0.2.77", fail("reject"), Deliver},
		{"forwarder IPv6 network", on, "2001:db8:1::25", fail("reject"), Deliver},
		{"IPv4-mapped client in the network", on, "::ffff:192.0.2.9", fail("reject"), Deliver},
		{"next network is not exempt", on, "192.0.3.1", fail("reject"), Reject},
		{"network written IPv4-mapped", on, "198.51.100.9", fail("reject"), Deliver},
		{"next to the network written IPv4-mapped", on, "198.51.101.9", fail("reject"), Reject},
		{"forwarder DKIM domain", on, "203.0.113.5", with(fail("reject"), func(r *Result) {
			r.DKIM = []store.AuthResult{{Result: "pass", Domain: "lists.example.org"}}
		}), Deliver},
		{"forwarder DKIM subdomain", on, "203.0.113.5", with(fail("reject"), func(r *Result) {
			r.DKIM = []store.AuthResult{{Result: "pass", Domain: "eu.lists.example.org"}}
		}), Deliver},
		{"failing DKIM of the forwarder is not authentication", on, "203.0.113.5", with(fail("reject"), func(r *Result) {
			r.DKIM = []store.AuthResult{{Result: "fail", Domain: "lists.example.org"}}
		}), Reject},
		{"look-alike domain", on, "203.0.113.5", with(fail("reject"), func(r *Result) {
			r.DKIM = []store.AuthResult{{Result: "pass", Domain: "evillists.example.org"}}
		}), Reject},
		{"parent of the forwarder domain", on, "203.0.113.5", with(fail("reject"), func(r *Result) {
			r.DKIM = []store.AuthResult{{Result: "pass", Domain: "example.org"}}
		}), Reject},
		{"forwarder SPF domain", on, "203.0.113.5", with(fail("reject"), func(r *Result) {
			r.SPF = store.AuthResult{Result: "pass", Domain: "lists.example.org"}
		}), Deliver},
		{"HELO SPF pass is not the envelope's", on, "203.0.113.5", with(fail("reject"), func(r *Result) {
			r.SPF, r.SPFScope = store.AuthResult{Result: "pass", Domain: "lists.example.org"}, "helo"
		}), Reject},
		{"local submission", on, "203.0.113.5", with(fail("reject"), func(r *Result) { r.SubmittedBy = "agent" }), Deliver},
		{"daemon report", on, "203.0.113.5", with(fail("reject"), func(r *Result) { r.Generated = true }), Deliver},
		{"no client address", on, "", fail("reject"), Reject},
	}
	for _, tc := range tests {
		var ip net.IP
		if tc.ip != "" {
			ip = net.ParseIP(tc.ip)
		}
		got, why := tc.e.Decide(ip, tc.r)
		if got != tc.want {
			t.Errorf("%s: Decide = %q (%s), want %q", tc.name, got, why, tc.want)
		}
		if got == Reject && why != "DMARC policy of trusted.test (p=reject)" {
			t.Errorf("%s: reason %q does not name the policy", tc.name, why)
		}
	}
}

// A Map with no DMARC for the From domain: nothing to enforce.
func TestDecideNoRecord(t *testing.T) {
	c := &Checker{Resolver: &resolver.Map{}, Roll: func() int { return 0 }}
	r := c.Check(context.Background(), Input{RemoteIP: evilIP, Helo: "evil.test", MailFrom: "x@evil.test", Raw: message("a@norecord.test")})
	if act, _ := (Enforcement{Enabled: true}).Decide(evilIP, r); act != Deliver || r.DMARC.Result != "none" {
		t.Errorf("no record: %q, dmarc %+v", act, r.DMARC)
	}
}
