package config

import (
	"net/netip"
	"strings"
	"testing"
)

// allow_from is the whole of LMTP over TCP's defence: each way of writing
// "everyone" (or a good part of it: anything broader than a /8) or an
// address that is not checked as written is refused, and
// the forms that name one host name the host the connection will show.
func TestAllowFromCannotAdmitEveryone(t *testing.T) {
	for _, list := range [][]string{
		{"0.0.0.0/0"}, {"::/0"}, {"::ffff:0.0.0.0/96"},
		{"0.0.0.0/1", "128.0.0.0/1"},
		{"0.0.0.0/2", "64.0.0.0/2", "128.0.0.0/1"},
		{"::/1", "8000::/1"},
		{"fe80::1%eth0"},
		{"mx1.example.com"},
		{"10.0.0.1/33"},
		{"0.0.0.0/1"}, {"128.0.0.0/7"}, {"8000::/4"},
	} {
		c := Default()
		c.LMTP.ListenTCP, c.LMTP.AllowFrom = []string{"127.0.0.1:24"}, list
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "allow_from") {
			t.Errorf("allow_from %q accepted (err %v)", list, err)
		}
	}
	for _, ok := range [][]string{{"10.0.0.0/8", "192.168.0.0/16"}, {"fd00::/8", "127.0.0.1"}} {
		c := Default()
		c.LMTP.ListenTCP, c.LMTP.AllowFrom = []string{"127.0.0.1:24"}, ok
		if err := c.Validate(); err != nil {
			t.Errorf("allow_from %q refused: %v", ok, err)
		}
	}
	c := LMTP{AllowFrom: []string{"::ffff:127.0.0.1", "::ffff:10.0.0.0/104"}}
	got := c.AllowPrefixes()
	if len(got) != 2 || got[0] != netip.MustParsePrefix("127.0.0.1/32") || got[1] != netip.MustParsePrefix("10.0.0.0/8") {
		t.Errorf("IPv4-mapped allow_from parsed as %v; want the IPv4 prefixes a connection is compared with", got)
	}
}
