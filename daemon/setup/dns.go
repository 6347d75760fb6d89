package setup

import (
	"fmt"
	"net"
	"strings"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/outbound/dkim"
)

// Placeholders printed when this host's public addresses are unknown; they are
// documentation addresses (RFC 5737, RFC 3849) that can never work by accident.
const (
	PlaceholderIPv4 = "192.0.2.1"
	PlaceholderIPv6 = "2001:db8::1"
)

// DNSRecords renders, in zone-file syntax, the records a host needs: MX, A and
// AAAA of the host name (ips are this host's public addresses; placeholders
// when none is known), SPF, one DKIM TXT per key (split in 255-byte strings),
// DMARC and TLS-RPT, for every configured domain.
func DNSRecords(cfg *config.Config, keys []*dkim.Key, ips []net.IP) string {
	var b strings.Builder
	host := strings.TrimSuffix(cfg.Hostname, ".")
	var v4, v6 []string
	for _, ip := range ips {
		if ip.To4() != nil {
			v4 = append(v4, ip.String())
		} else {
			v6 = append(v6, ip.String())
		}
	}
	fmt.Fprintf(&b, "; The host that receives mail\n")
	addrRecords := func(rr string, ips []string, placeholder, which string) {
		if len(ips) == 0 {
			fmt.Fprintf(&b, "; replace %s with this server's public %s\n", placeholder, which)
			ips = []string{placeholder}
		}
		for _, ip := range ips {
			fmt.Fprintf(&b, "%s. 3600 IN %s %s\n", host, rr, ip)
		}
	}
	addrRecords("A", v4, PlaceholderIPv4, "IPv4 address")
	addrRecords("AAAA", v6, PlaceholderIPv6, "IPv6 address, or leave AAAA out")
	fmt.Fprintf(&b, "; Ask your provider to set the reverse DNS (PTR) of these addresses to %s.\n", host)
	for _, d := range cfg.Domains {
		fmt.Fprintf(&b, "\n; Mail for %s\n", d)
		fmt.Fprintf(&b, "%s. 3600 IN MX 10 %s.\n", d, host)
		// The SPF, DMARC and TLS-RPT policies setup recommends; reports go
		// to postmaster, which setup declares.
		fmt.Fprintf(&b, "%s. 3600 IN TXT %q\n", d, "v=spf1 mx -all")
		for _, k := range keys {
			b.WriteString(dkim.TXTRecord(d, k) + "\n")
		}
		fmt.Fprintf(&b, "_dmarc.%s. 3600 IN TXT %q\n", d, "v=DMARC1; p=quarantine; rua=mailto:postmaster@"+d)
		fmt.Fprintf(&b, "; optional: TLS reporting, and MTA-STS once https://mta-sts.%s/.well-known/mta-sts.txt serves a policy\n", d)
		fmt.Fprintf(&b, "_smtp._tls.%s. 3600 IN TXT %q\n", d, "v=TLSRPTv1; rua=mailto:postmaster@"+d)
		fmt.Fprintf(&b, "; _mta-sts.%s. 3600 IN TXT \"v=STSv1; id=YYYYMMDD01\"\n", d)
	}
	return b.String()
}

// PublicAddrs returns this host's global unicast addresses that are not
// private: the ones worth publishing.
func PublicAddrs() ([]net.IP, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []net.IP
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip := n.IP
		if ip.IsGlobalUnicast() && !ip.IsPrivate() {
			out = append(out, ip)
		}
	}
	return out, nil
}
