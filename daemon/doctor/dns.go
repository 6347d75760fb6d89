package doctor

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/outbound/dkim"
	"github.com/mailctl/mailctl/daemon/resolver"
)

// lookupFailed turns a DNS error into a finding; it reports whether the
// record is simply absent (the caller then says what to publish).
func lookupFailed(f *findings, id, name string, err error) (absent bool) {
	if resolver.IsNotFound(err) {
		return true
	}
	f.add(id, Warn, "check the resolver (dns.resolver in the config, or /etc/resolv.conf) and retry", "looking up %s failed: %v", name, err)
	return false
}

// lookup runs one DNS query under its own deadline, so one slow name
// cannot stall the rest of the checks.
func lookup[T any](ctx context.Context, query func(context.Context, string) (T, error), name string) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return query(ctx, name)
}

// tagValue returns the value of tag in a "k=v; k=v" record, spaces removed.
func tagValue(rec, tag string) (string, bool) {
	for _, part := range strings.Split(rec, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), tag) {
			return strings.Join(strings.Fields(v), ""), true
		}
	}
	return "", false
}

func checkDNS(ctx context.Context, f *findings, cfg *config.Config, env Env, keys []*dkim.Key) {
	r := env.Resolver
	host := strings.ToLower(strings.TrimSuffix(cfg.Hostname, "."))
	fix := "publish the records `sudo mailctl setup` prints (re-running it is safe)"
	ips, err := lookup(ctx, r.LookupIPAddr, host)
	if err != nil {
		if lookupFailed(f, "dns.host", host, err) {
			f.add("dns.host", Fail, fix, "%s has no A or AAAA record: senders cannot reach this host", host)
		}
	} else {
		var s []string
		for _, ip := range ips {
			s = append(s, ip.IP.String())
		}
		f.add("dns.host", OK, "", "%s resolves to %s", host, strings.Join(s, ", "))
		checkHostAddrs(f, host, ips, env, fix)
		checkPTR(ctx, f, r, host, ips)
	}
	for _, d := range cfg.Domains {
		mxs, err := lookup(ctx, r.LookupMX, d)
		var names []string
		for _, mx := range mxs {
			names = append(names, strings.ToLower(strings.TrimSuffix(mx.Host, ".")))
		}
		switch {
		case err != nil:
			if lookupFailed(f, "dns.mx", d, err) {
				f.add("dns.mx", Fail, fix, "%s has no MX record: mail for it goes elsewhere or nowhere", d)
			}
		case slices.Contains(names, host):
			f.add("dns.mx", OK, "", "MX of %s points to %s", d, host)
		default:
			f.add("dns.mx", Fail, fix, "MX of %s is %s, not this host (%s)", d, strings.Join(names, ", "), host)
		}
		checkSPF(ctx, f, r, d, fix)
		checkDMARC(ctx, f, r, d, fix)
		checkDKIMDNS(ctx, f, r, d, keys, fix)
	}
}

func checkSPF(ctx context.Context, f *findings, r resolver.Resolver, d, fix string) {
	txts, err := lookup(ctx, r.LookupTXT, d)
	if err != nil && !lookupFailed(f, "dns.spf", d, err) {
		return
	}
	var spf []string
	for _, t := range txts {
		if strings.HasPrefix(strings.ToLower(t), "v=spf1") {
			spf = append(spf, t)
		}
	}
	switch len(spf) {
	case 0:
		f.add("dns.spf", Warn, fix, "%s publishes no SPF record: receivers treat its mail as unauthenticated", d)
	case 1:
		f.add("dns.spf", OK, "", "SPF of %s: %s", d, spf[0])
	default:
		f.add("dns.spf", Fail, "merge them into one TXT record", "%s publishes %d SPF records: SPF evaluates to permerror", d, len(spf))
	}
}

func checkDMARC(ctx context.Context, f *findings, r resolver.Resolver, d, fix string) {
	name := "_dmarc." + d
	txts, err := lookup(ctx, r.LookupTXT, name)
	if err != nil && !lookupFailed(f, "dns.dmarc", name, err) {
		return
	}
	for _, t := range txts {
		if strings.HasPrefix(strings.ToLower(t), "v=dmarc1") {
			f.add("dns.dmarc", OK, "", "DMARC of %s: %s", d, t)
			return
		}
	}
	f.add("dns.dmarc", Warn, fix, "%s publishes no DMARC record: large providers may junk its mail", d)
}

// checkDKIMDNS compares each local key with what DNS publishes for it.
func checkDKIMDNS(ctx context.Context, f *findings, r resolver.Resolver, d string, keys []*dkim.Key, fix string) {
	published := 0
	for _, k := range keys {
		name := k.Selector + "._domainkey." + d
		txts, err := lookup(ctx, r.LookupTXT, name)
		if err != nil {
			if lookupFailed(f, "dkim.dns_missing", name, err) {
				f.add("dkim.dns_missing", Warn, fix, "%s is not published: receivers cannot verify signatures by key %s", name, k.Selector)
			}
			continue
		}
		want, _ := tagValue(k.TXTValue(), "p")
		var got string
		for _, t := range txts {
			if p, ok := tagValue(t, "p"); ok {
				got = p
				break
			}
		}
		if got != want {
			shown := got
			if len(shown) > 24 {
				shown = shown[:24] + "…"
			}
			f.add("dkim.dns_mismatch", Fail, fmt.Sprintf("publish %s TXT \"%s\" (see `sudo mailctl setup`)", name, k.TXTValue()),
				"%s publishes p=%s, which is not the local key %s: every signature by it fails", name, shown, k.Selector)
			continue
		}
		published++
	}
	if published > 0 && published == len(keys) {
		f.add("dkim.dns", OK, "", "all %d DKIM keys of %s are published and match", published, d)
	}
}

// checkHostAddrs compares the host name's addresses with this host's public
// ones, when they are known (a host behind NAT has none on its interfaces).
func checkHostAddrs(f *findings, host string, ips []net.IPAddr, env Env, fix string) {
	if env.LocalAddrs == nil {
		return
	}
	local, err := env.LocalAddrs()
	if err != nil || len(local) == 0 {
		return
	}
	for _, ip := range ips {
		if slices.ContainsFunc(local, ip.IP.Equal) {
			return
		}
	}
	var ls []string
	for _, l := range local {
		ls = append(ls, l.String())
	}
	f.add("dns.host_address", Warn, fix, "%s does not resolve to any of this host's public addresses (%s): mail for it goes elsewhere", host, strings.Join(ls, ", "))
}

// checkPTR wants the reverse DNS of each address to name the host: many
// receivers refuse or junk mail from addresses without matching PTR.
func checkPTR(ctx context.Context, f *findings, r resolver.Resolver, host string, ips []net.IPAddr) {
	namesHost := func(n string) bool { return strings.EqualFold(strings.TrimSuffix(n, "."), host) }
	for _, ip := range ips {
		names, err := lookup(ctx, r.LookupAddr, ip.IP.String())
		if !slices.ContainsFunc(names, namesHost) {
			what := strings.Join(names, ", ")
			if err != nil || what == "" {
				what = "nothing"
			}
			f.add("dns.ptr", Warn, "ask your hosting provider to set the reverse DNS of "+ip.IP.String()+" to "+host,
				"reverse DNS of %s is %s, not %s: receivers may refuse mail from it", ip.IP, what, host)
			continue
		}
		f.add("dns.ptr", OK, "", "reverse DNS of %s is %s", ip.IP, host)
	}
}

// checkDNSSEC says whether the configured resolver validates DNSSEC, which
// DANE needs: it asks for the SOA of a signed name (dns.dnssec_probe) and
// looks at the AD bit of the answer. mailctl does not validate itself.
func checkDNSSEC(ctx context.Context, f *findings, cfg *config.Config, env Env) {
	if env.DNSSEC == nil {
		return
	}
	if !*cfg.Delivery.DANE {
		f.add("dns.dnssec", Info, "", "DANE is off (delivery.dane = false): the resolver's DNSSEC validation is not needed")
		return
	}
	name := cfg.DNS.DNSSECProbe
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := env.DNSSEC.Exchange(ctx, name, dns.TypeSOA)
	fix := "run a validating resolver on this host (e.g. `apt install unbound`) and set dns.resolver = \"127.0.0.1:53\"; see docs/outbound.md"
	switch {
	case err != nil:
		f.add("dns.dnssec", Warn, "check dns.resolver and retry", "asking the resolver about %q to see whether it validates DNSSEC failed: %v", name, err)
	case m.Rcode != dns.RcodeSuccess:
		f.add("dns.dnssec", Warn, fix+"; or set dns.dnssec_probe to a signed name it can resolve",
			"the resolver answered %s for the signed name %q: it does not validate, or the name is not reachable; DANE is not applied", dns.RcodeToString[m.Rcode], name)
	case !m.AuthenticatedData:
		f.add("dns.dnssec", Warn, fix, "the resolver does not validate DNSSEC (no AD bit for the signed name %q): DANE (RFC 7672) is never applied", name)
	default:
		f.add("dns.dnssec", OK, "", "the resolver validates DNSSEC (AD set for %q): DANE is applied to MX hosts with TLSA records", name)
	}
}
