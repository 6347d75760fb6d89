package trust

import (
	"context"
	"strings"
	"testing"
)

func FuzzCheck(f *testing.F) {
	m := world(f)
	boss := message("Boss <boss@trusted.test>")
	f.Add(sign(f, boss, "trusted.test", "ed", edKey), "boss@trusted.test", "mx.trusted.test")
	f.Add(sign(f, boss, "evil.test", "ed", evilKey), "x@evil.test", "evil.test")
	f.Add(sign(f, message("a@example.com"), "mail.example.com", "ed", edKey), "", "x.test")
	f.Add(boss, "", "mx.trusted.test")
	f.Add([]byte("From: =?iso-8859-2?q?B=F3ss?= <boss@trusted.test>\r\n\r\n"), "a@trusted.test", "")
	f.Add([]byte("From: a@trusted.test\r\nFrom : b@trusted.test\r\n\r\nbody"), "a@trusted.test", "")
	f.Add([]byte("DKIM-Signature: v=1; d=trusted.test; s=ed; a=ed25519-sha256; h=from; bh=; b=\r\nFrom: boss@trusted.test\r\n\r\n"), "", "")
	f.Add([]byte("Authentication-Results: x; dkim=pass header.d=trusted.test\nFrom: boss@trusted.test\n\n"), "x@evil.test", "evil.test")
	f.Add([]byte{}, "@", "")
	f.Add([]byte("\r\n\r\n"), "user@", "[192.0.2.1]")
	c := &Checker{Resolver: m}
	f.Fuzz(func(t *testing.T, raw []byte, mailFrom, helo string) {
		for _, ip := range []string{"192.0.2.10", "203.0.113.5"} {
			r := c.Check(context.Background(), Input{RemoteIP: parseIP(ip), Helo: helo, MailFrom: mailFrom, Raw: raw})
			if r.Aligned {
				ok := r.SPF.Result == "pass" && aligned(r.SPF.Domain, r.FromDomain, false)
				for _, d := range r.DKIM {
					ok = ok || d.Result == "pass" && aligned(d.Domain, r.FromDomain, false)
				}
				if !ok {
					t.Fatalf("aligned without an aligned pass: %+v", r)
				}
				if r.DMARC.Result == "fail" || r.FromAddress == "" {
					t.Fatalf("aligned with DMARC %q, From %q", r.DMARC.Result, r.FromAddress)
				}
			}
			if len(r.DKIM) == 0 {
				t.Fatal("no DKIM entry")
			}
			h := r.AuthenticationResults("mx.test")
			body := strings.TrimSuffix(h, "\r\n")
			if strings.ContainsAny(strings.ReplaceAll(body, "\r\n\t", ""), "\r\n") {
				t.Fatalf("header breaks its lines: %q", h)
			}
			if Trusted(r, []string{"*@trusted.test"}) == "true" && !r.Aligned {
				t.Fatal("trusted without alignment")
			}
		}
	})
}
