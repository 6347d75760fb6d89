package config

import (
	"net/netip"
	"strings"
	"testing"
)

// TestLMTPOverTCPNeedsAllowFrom: a TCP LMTP listener is served only to the
// front MTAs the operator lists, and the config says so when they are
// missing or admit everyone.
func TestLMTPOverTCPNeedsAllowFrom(t *testing.T) {
	for _, tt := range []struct{ lmtp, want string }{
		{`listen_tcp = ["10.0.0.5:24"]`, "lmtp.allow_from is empty"},
		{`allow_from = ["10.0.0.1/32"]`, "lmtp.listen_tcp is empty"},
		{"listen_tcp = [\"24\"]\nallow_from = [\"10.0.0.1\"]", "not host:port"},
		{"listen_tcp = [\"10.0.0.5:24\"]\nallow_from = [\"10.0.0.300/32\"]", "not a CIDR"},
		{"listen_tcp = [\"10.0.0.5:24\"]\nallow_from = [\"0.0.0.0/0\"]", "admits every address"},
		{"listen_tcp = [\"10.0.0.5:24\"]\nallow_from = [\"::/0\"]", "admits every address"},
	} {
		_, err := Parse([]byte("domains = [\"a.test\"]\n[lmtp]\n" + tt.lmtp + "\n"))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want one saying %q", tt.lmtp, err, tt.want)
		}
	}

	c, err := Parse([]byte("domains = [\"a.test\"]\n[lmtp]\nlisten_tcp = [\"10.0.0.5:24\", \"[fd00::5]:24\"]\n" +
		"allow_from = [\"10.0.0.1/32\", \"10.0.1.7\", \"fd00::/64\", \"::ffff:10.0.2.0/120\", \"10.0.3.9/24\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range c.LMTP.AllowPrefixes() {
		got = append(got, p.String())
	}
	if want := "10.0.0.1/32 10.0.1.7/32 fd00::/64 10.0.2.0/24 10.0.3.0/24"; strings.Join(got, " ") != want {
		t.Errorf("allow_from parsed as %v, want %s", got, want)
	}
	if !c.LMTP.AllowPrefixes()[3].Contains(netip.MustParseAddr("10.0.2.8")) {
		t.Error("a 4-in-6 prefix does not match its IPv4 addresses")
	}
}

// TestSplitDomainsNeedsARelay: relay.split_domains sends mail for local
// addresses this host lacks to the relay, so it needs one.
func TestSplitDomainsNeedsARelay(t *testing.T) {
	if _, err := Parse([]byte("domains = [\"a.test\"]\n[relay]\nsplit_domains = true\n")); err == nil || !strings.Contains(err.Error(), "relay.split_domains needs relay.host") {
		t.Errorf("split_domains without a relay: %v", err)
	}
	if _, err := Parse([]byte("domains = [\"a.test\"]\n[relay]\nhost = \"tier.a.test\"\nport = 25\nsplit_domains = true\n")); err != nil {
		t.Error(err)
	}
}
