package dnstest

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func resolverFor(addr string) *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
}

func TestServesRecords(t *testing.T) {
	long := strings.Repeat("k", 700) // a 4096-bit DKIM key is about this long
	_, addr := Start(t,
		Record{"host.example.test", "A", "192.0.2.7"},
		Record{"host.example.test", "AAAA", "2001:db8::7"},
		Record{"example.test.", "MX", "10 host.example.test"},
		Record{"nullmx.test", "MX", "0 ."},
		Record{"Example.Test", "TXT", "v=spf1 -all"},
		Record{"long.example.test", "TXT", long},
		Record{"quote.example.test", "TXT", `a\b"c`},
	)
	r := resolverFor(addr)
	ctx := context.Background()

	ips, err := r.LookupIPAddr(ctx, "host.example.test")
	if err != nil || len(ips) != 2 {
		t.Fatalf("LookupIPAddr = %v, %v; want two addresses", ips, err)
	}
	mx, err := r.LookupMX(ctx, "example.test")
	if err != nil || len(mx) != 1 || mx[0].Host != "host.example.test." || mx[0].Pref != 10 {
		t.Fatalf("LookupMX = %v, %v", mx, err)
	}
	// Go's resolver refuses the null MX target "." in LookupMX but still
	// returns the record; check it on the wire instead.
	c := new(dns.Client)
	q := new(dns.Msg)
	q.SetQuestion("nullmx.test.", dns.TypeMX)
	in, _, err := c.Exchange(q, addr)
	if err != nil || len(in.Answer) != 1 || in.Answer[0].(*dns.MX).Mx != "." {
		t.Fatalf("null MX on the wire = %v, %v", in, err)
	}
	txt, err := r.LookupTXT(ctx, "example.test")
	if err != nil || len(txt) != 1 || txt[0] != "v=spf1 -all" {
		t.Fatalf("LookupTXT = %q, %v", txt, err)
	}
	txt, err = r.LookupTXT(ctx, "long.example.test")
	if err != nil || len(txt) != 1 || txt[0] != long {
		t.Fatalf("long TXT came back as %d records, err %v", len(txt), err)
	}
	q.SetQuestion("long.example.test.", dns.TypeTXT)
	c.Net = "tcp"
	in, _, err = c.Exchange(q, addr)
	if err != nil || len(in.Answer[0].(*dns.TXT).Txt) != 3 {
		t.Fatalf("long TXT not split into 255-byte strings: %v, %v", in, err)
	}
	txt, err = r.LookupTXT(ctx, "quote.example.test")
	if err != nil || len(txt) != 1 || txt[0] != `a\b"c` {
		t.Fatalf("TXT with quote and backslash = %q, %v", txt, err)
	}
}

func TestNotFoundAndNoData(t *testing.T) {
	_, addr := Start(t, Record{"a.test", "A", "192.0.2.1"})
	r := resolverFor(addr)
	for _, name := range []string{"missing.test", "a.test"} { // NXDOMAIN, then NODATA
		_, err := r.LookupTXT(context.Background(), name)
		var de *net.DNSError
		if !errors.As(err, &de) || !de.IsNotFound {
			t.Errorf("LookupTXT(%s) err = %v; want not found", name, err)
		}
	}
}

func TestHangServFailAndChange(t *testing.T) {
	s, addr := Start(t, Record{"a.test", "TXT", "one"})
	r := resolverFor(addr)

	s.Hang("a.test", true)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := r.LookupTXT(ctx, "a.test")
	cancel()
	var de *net.DNSError
	if !errors.As(err, &de) || de.IsNotFound || !(de.IsTimeout || de.IsTemporary) {
		t.Fatalf("hung name: err = %#v; want a timeout", err)
	}
	s.Hang("a.test", false)

	s.ServFail("a.test", true)
	_, err = r.LookupTXT(context.Background(), "a.test")
	if !errors.As(err, &de) || de.IsNotFound || !de.IsTemporary {
		t.Fatalf("SERVFAIL: err = %#v; want temporary", err)
	}
	s.ServFail("a.test", false)

	if err := s.Set("a.test", "TXT", "two"); err != nil {
		t.Fatal(err)
	}
	txt, err := r.LookupTXT(context.Background(), "a.test")
	if err != nil || len(txt) != 1 || txt[0] != "two" {
		t.Fatalf("after Set: %q, %v", txt, err)
	}
	if err := s.Set("a.test", "TXT"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.LookupTXT(context.Background(), "a.test"); err == nil {
		t.Fatal("record still served after removal")
	}
	if err := s.Set("a.test", "A", "not-an-ip"); err == nil {
		t.Fatal("Set accepted an invalid A record")
	}
}

func TestParseZone(t *testing.T) {
	in := `# test zone
example.test MX 10 mx.example.test
mx.example.test	A 192.0.2.1
example.test TXT "v=spf1 ip4:192.0.2.0/24 -all"
sel._domainkey.example.test TXT v=DKIM1; k=ed25519; p=abc
slow.test HANG
broken.test servfail
`
	z, err := ParseZone(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{
		{"example.test", "MX", "10 mx.example.test"},
		{"mx.example.test", "A", "192.0.2.1"},
		{"example.test", "TXT", "v=spf1 ip4:192.0.2.0/24 -all"},
		{"sel._domainkey.example.test", "TXT", "v=DKIM1; k=ed25519; p=abc"},
	}
	if len(z.Records) != len(want) {
		t.Fatalf("got %d records, want %d: %+v", len(z.Records), len(want), z.Records)
	}
	for i := range want {
		if z.Records[i] != want[i] {
			t.Errorf("record %d = %+v, want %+v", i, z.Records[i], want[i])
		}
	}
	if len(z.Hang) != 1 || z.Hang[0] != "slow.test" || len(z.ServFail) != 1 {
		t.Errorf("Hang = %v, ServFail = %v", z.Hang, z.ServFail)
	}

	for _, bad := range []string{"a.test A 300.1.1.1", "a.test AAAA 192.0.2.1", "a.test MX mx", "a.test CNAME b.test", "a..test A 192.0.2.1"} {
		if _, err := ParseZone(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseZone(%q) accepted it", bad)
		}
	}
}

func FuzzParseZone(f *testing.F) {
	f.Add("example.test MX 10 mx.example.test\nmx.example.test A 192.0.2.1\n")
	f.Add("x TXT \"\"\n# c\n\ny HANG\n")
	f.Add("a.test AAAA 2001:db8::1")
	f.Fuzz(func(t *testing.T, in string) {
		z, err := ParseZone(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, r := range z.Records {
			if r.validate() != nil {
				t.Fatalf("ParseZone returned an invalid record %+v", r)
			}
			if r.rr(fqdn(r.Name), typeOf(r.Type)) == nil {
				t.Fatalf("record %+v does not render", r)
			}
		}
	})
}

func typeOf(s string) uint16 { return dns.StringToType[strings.ToUpper(s)] }
