package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// ValidDomain reports whether d is a plausible mail domain (at least two labels).
func ValidDomain(d string) bool { return len(d) <= 253 && domainRE.MatchString(d) }

// complain records one validation error.
type complain func(format string, args ...any)

// Validate checks values that parse but make no sense, and reports every
// problem at once. Each check decides about one part of the file.
func (c *Config) Validate() error {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	for _, check := range []func(complain){
		c.validateDomains, c.validatePaths, c.validateSMTP, c.validateLMTP, c.validateControl, c.validateMetrics, c.validateStorage,
		c.validateRelay, c.validateDelivery, c.validateSend, c.validateTLSRPT, c.validateDNS, c.validateTrust, c.validateMailboxes, c.validateAliases, c.validateHooks, c.validateBounds,
	} {
		check(bad)
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// validateDomains lower-cases the domains and refuses bad or repeated ones.
func (c *Config) validateDomains(bad complain) {
	seen := map[string]bool{}
	for i, d := range c.Domains {
		d = strings.ToLower(strings.TrimSuffix(d, "."))
		c.Domains[i] = d
		if !ValidDomain(d) {
			bad("domains: %q is not a domain name", d)
		}
		if seen[d] {
			bad("domains: %q is listed twice", d)
		}
		seen[d] = true
	}
}

func (c *Config) validatePaths(bad complain) {
	for _, p := range []struct{ key, v string }{{"paths.state_dir", c.Paths.StateDir}, {"paths.socket", c.Paths.Socket}, {"paths.dkim_dir", c.Paths.DKIMDir}} {
		if !filepath.IsAbs(p.v) {
			bad("%s: %q must be an absolute path", p.key, p.v)
		}
	}
}

func (c *Config) validateSMTP(bad complain) {
	s := c.SMTP
	for _, a := range s.Listen {
		if _, _, err := net.SplitHostPort(a); err != nil {
			bad("smtp.listen: %q is not host:port", a)
		}
	}
	if (s.TLSCert == "") != (s.TLSKey == "") {
		bad("smtp.tls_cert and smtp.tls_key must be set together")
	}
	c.validateDNSBL(bad)
	if s.MaxMessageBytes < 1024 || s.MaxRecipients < 1 || s.MaxLineLength < 1000 ||
		s.MaxConnections < 1 || s.MaxConnectionsPerIP < 1 || s.MaxErrors < 1 || s.MaxReceivedHeaders < 1 {
		bad("smtp: limits must be positive (max_message_bytes >= 1024, max_line_length >= 1000 as RFC 5321 requires)")
	}
}

// minIdempotencyWindow is the shortest delivery.idempotency_window: a client that
// retries after an outage of a day still gets its message back.
const minIdempotencyWindow = 24 * time.Hour

// validateDelivery keeps the outbound queue's limits usable.
func (c *Config) validateDelivery(bad complain) {
	d := c.Delivery
	if d.MaxConcurrent < 1 {
		bad("delivery.max_concurrent must be at least 1")
	}
	if d.MaxPerDestination < 1 || d.MaxPerDestination > d.MaxConcurrent {
		bad("delivery.max_per_destination must be between 1 and delivery.max_concurrent (%d)", d.MaxConcurrent)
	}
	if d.Port < 1 || d.Port > 65535 {
		bad("delivery.port: %d is not a port", d.Port)
	}
	if k := d.IdempotencyWindow.Duration; k < minIdempotencyWindow || k < d.RetryFor.Duration {
		bad("delivery.idempotency_window: %s is too short; give at least a day and at least delivery.retry_for (%s), so that a client's retry of a send, and a check of it while its message is retried, is answered with that message (default 30d)",
			k, d.RetryFor.Duration)
	}
	if c.Relay.Port < 0 || c.Relay.Port > 65535 {
		bad("relay.port: %d is not a port", c.Relay.Port)
	}
	if c.HookRules.MaxPerMailbox < 0 {
		bad("hook_rules.max_per_mailbox: %d is negative; give how many hooks users may create on one mailbox (default 100)", c.HookRules.MaxPerMailbox)
	}
	if c.MailboxRules.MaxPerOwner < 0 {
		bad("mailbox_rules.max_per_owner: %d is negative; give how many mailboxes one user may create (default 100)", c.MailboxRules.MaxPerOwner)
	}
	if c.HookRules.MaxConcurrent < 0 {
		bad("hook_rules.max_concurrent: %d is negative; give how many hooks may run at once (default 4)", c.HookRules.MaxConcurrent)
	}
}

// validateSend refuses negative send limits, which read as no limit at all
// (a 0 is refused as the default it would be taken as: zeroesTakenAsDefault).
func (c *Config) validateSend(bad complain) {
	check := func(where string, p *SendPolicy) {
		for _, l := range []struct {
			key string
			v   int64
		}{{"max_recipients", int64(p.MaxRecipients)}, {"max_message_bytes", p.MaxMessageBytes}, {"max_attachment_bytes", p.MaxAttachmentBytes},
			{"max_attachments", int64(p.MaxAttachments)}, {"per_minute", int64(p.PerMinute)}, {"per_hour", int64(p.PerHour)}, {"per_day", int64(p.PerDay)}} {
			if l.v < 0 {
				bad("%s.%s: %d is negative; give a limit", where, l.key, l.v)
			}
		}
	}
	check("send", &c.Send)
	for _, m := range c.Mailboxes {
		if m.Send != nil {
			check(fmt.Sprintf("mailboxes %q send", m.Name), m.Send)
		}
	}
}

// validateLMTP keeps LMTP over TCP to the front MTAs the operator names: an
// LMTP client hands in mail for every local domain and, with XFORWARD,
// names the client address SPF judges, so an open listener would let anyone
// who reaches it claim any sender's address.
func (c *Config) validateLMTP(bad complain) {
	l := c.LMTP
	for _, a := range l.ListenTCP {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			bad("lmtp.listen_tcp: %q is not host:port (e.g. \"10.0.0.5:24\")", a)
		}
	}
	if len(l.ListenTCP) > 0 && len(l.AllowFrom) == 0 {
		bad("lmtp.listen_tcp is set but lmtp.allow_from is empty: an LMTP client may pass on any client address with XFORWARD, " +
			"which SPF then trusts, so LMTP over TCP is served only to the front MTAs you list; add their addresses, e.g. allow_from = [\"10.0.0.1/32\"]")
	}
	if len(l.ListenTCP) == 0 && len(l.AllowFrom) > 0 {
		bad("lmtp.allow_from is set but lmtp.listen_tcp is empty: nothing listens for those front MTAs; add listen_tcp = [\"<this host's address>:24\"] or remove allow_from")
	}
	for _, a := range l.AllowFrom {
		p, err := parseAllow(a)
		switch {
		case err != nil:
			bad("lmtp.allow_from: %q is not a CIDR or an address (e.g. \"10.0.0.1/32\", \"fd00::/64\")", a)
		case p.Bits() == 0:
			bad("lmtp.allow_from: %q admits every address; list the front MTAs' addresses instead", a)
		case p.Bits() < minAllowBits:
			bad("lmtp.allow_from: %q admits a /%d, a large part of the internet; list the front MTAs' addresses or their network (at most a /%d)", a, p.Bits(), minAllowBits)
		case strings.Contains(a, "%"):
			bad("lmtp.allow_from: %q names an interface (a zone), which is not checked; give the address without it", a)
		}
	}
	// Pieces that together admit every address are "everything" too
	// (0.0.0.0/1 and 128.0.0.0/1).
	for _, fam := range []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")} {
		if covers(fam, l.AllowPrefixes()) {
			bad("lmtp.allow_from together admits every %s address; list the front MTAs' addresses instead", map[bool]string{true: "IPv4", false: "IPv6"}[fam.Addr().Is4()])
		}
	}
}

// minAllowBits bounds how broad one allow_from entry may be: front MTAs are
// a few hosts, and a /8 (10.0.0.0/8, fd00::/8) already holds any private
// network they live in.
const minAllowBits = 8

// covers reports whether the prefixes in list together contain all of p.
func covers(p netip.Prefix, list []netip.Prefix) bool {
	for _, q := range list {
		if q.Addr().Is4() == p.Addr().Is4() && q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
			return true
		}
	}
	if p.Bits() >= p.Addr().BitLen() || !slices.ContainsFunc(list, func(q netip.Prefix) bool {
		return q.Addr().Is4() == p.Addr().Is4() && q.Bits() > p.Bits() && p.Contains(q.Addr())
	}) {
		return false
	}
	lo := netip.PrefixFrom(p.Addr(), p.Bits()+1)
	hi := lo.Addr()
	b := hi.AsSlice()
	b[p.Bits()/8] |= 0x80 >> (p.Bits() % 8)
	hi, _ = netip.AddrFromSlice(b)
	return covers(lo, list) && covers(netip.PrefixFrom(hi, p.Bits()+1), list)
}

func (c *Config) validateControl(bad complain) {
	ct := c.Control
	if ct.MaxConnections < 1 || ct.MaxConnectionsPerUID < 1 || ct.ReservedForRoot < 0 || ct.ReservedForRoot >= ct.MaxConnections ||
		ct.IdleTimeout.Duration <= 0 || ct.RequestTimeout.Duration <= 0 {
		bad("control: limits must be positive and reserved_for_root below max_connections")
	}
	if ct.RequestMemoryPerUID < 1<<20 || ct.RequestMemory < 2*ct.RequestMemoryPerUID {
		bad("control: request_memory_per_uid must be at least 1 MiB and request_memory at least twice it")
	}
}

// validateStorage refuses a negative reserve.
func (c *Config) validateStorage(bad complain) {
	if r := c.Storage.DiskReserveBytes; r != nil && *r < 0 {
		bad("storage.disk_reserve_bytes: %d is negative; give bytes to keep free (e.g. 268435456 for 256 MiB), or 0 for no reserve", *r)
	}
	for folder := range c.Storage.Retention {
		if !slices.Contains(RetentionFolders, folder) {
			bad("storage.retention: %q is not a folder; use %s", folder, strings.Join(RetentionFolders, ", "))
		}
	}
	if c.Storage.PruneEvery.Duration < time.Minute {
		bad("storage.prune_every: %s is too often; give a minute or more (default 1h)", c.Storage.PruneEvery.Duration)
	}
	if c.Storage.QuotaBytes < 0 || c.Storage.QuotaMessages < 0 {
		bad("storage.quota_bytes and quota_messages: give a limit, or 0 for none")
	}
	for _, m := range c.Mailboxes {
		if m.QuotaBytes != nil && *m.QuotaBytes < 0 || m.QuotaMessages != nil && *m.QuotaMessages < 0 {
			bad("mailbox %q: quota_bytes and quota_messages: give a limit, or 0 for none", m.Name)
		}
	}
}

// maxDestinationDomains bounds metrics.destination_domains, and so the
// series of the delivery metrics.
const maxDestinationDomains = 50

// validateMetrics keeps the metrics endpoint on loopback: it is unauthenticated.
func (c *Config) validateMetrics(bad complain) {
	if len(c.Metrics.DestinationDomains) > maxDestinationDomains {
		bad("metrics.destination_domains: %d domains; at most %d get labels of their own", len(c.Metrics.DestinationDomains), maxDestinationDomains)
	}
	for i, dom := range c.Metrics.DestinationDomains {
		if dom == "" || dom != strings.ToLower(dom) || strings.ContainsAny(dom, "@ \t") || strings.HasSuffix(dom, ".") {
			bad("metrics.destination_domains: %q is not a lower-case domain name such as gmail.com", dom)
		}
		c.Metrics.DestinationDomains[i] = dom
	}
	if c.Metrics.Listen == "" {
		return
	}
	host, _, err := net.SplitHostPort(c.Metrics.Listen)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		bad("metrics.listen: %q must be a loopback host:port", c.Metrics.Listen)
	}
}

func (c *Config) validateRelay(bad complain) {
	r := c.Relay
	if r.Host != "" && r.Username != "" && r.PasswordFile == "" {
		bad("relay.password_file is required with relay.username")
	}
	if r.TLS != "" && r.TLS != RelayStartTLS && r.TLS != RelayImplicitTLS {
		bad("relay.tls: %q is neither %q (TLS from the first byte, as on port 465) nor %q (STARTTLS after the greeting, as on port 587)", r.TLS, RelayImplicitTLS, RelayStartTLS)
	}
	if r.Host == "" && (r.TLS != "" || r.CAFile != "" || r.Username != "" || r.PasswordFile != "") {
		bad("relay.tls, relay.ca_file, relay.username and relay.password_file need relay.host: set the relay's host name, or remove them")
	}
	for _, p := range []struct{ key, v string }{{"relay.password_file", r.PasswordFile}, {"relay.ca_file", r.CAFile}} {
		if p.v != "" && !filepath.IsAbs(p.v) {
			bad("%s: %q must be an absolute path", p.key, p.v)
		}
	}
	if c.Relay.SplitDomains && c.Relay.Host == "" {
		bad("relay.split_domains needs relay.host: the mail for local addresses this host does not have goes to the relay (the MTA tier that knows every host)")
	}
}

func (c *Config) validateDNS(bad complain) {
	if c.Trust.Resolver != "" && c.Trust.Resolver != c.DNS.Resolver {
		bad("trust.resolver %q and dns.resolver %q differ: trust.resolver is the former name of dns.resolver; keep dns.resolver only", c.Trust.Resolver, c.DNS.Resolver)
	}
}

func (c *Config) validateMailboxes(bad complain) {
	names := map[string]bool{}
	for i, m := range c.Mailboxes {
		if !mailboxRE.MatchString(m.Name) || strings.Contains(m.Name, "..") {
			bad("mailboxes[%d]: name %q must match [a-z0-9._-]+ without leading/trailing dots or \"..\"", i, m.Name)
		}
		if names[m.Name] {
			bad("mailboxes: %q is declared twice", m.Name)
		}
		names[m.Name] = true
		if m.Owner == "" {
			bad("mailboxes[%d] %q: owner is required (a user name or uid)", i, m.Name)
		}
		for _, a := range m.Aliases {
			if strings.ContainsAny(a, " \t\r\n") || a == "" {
				bad("mailboxes[%d] %q: alias %q is not an address or local part", i, m.Name, a)
			}
		}
		if err := ValidDisplayName(m.DisplayName); err != nil {
			bad("mailboxes[%d] %q: %v", i, m.Name, err)
		}
	}
	if c.CatchAll != "" && !mailboxRE.MatchString(c.CatchAll) {
		bad("catch_all: %q is not a mailbox name", c.CatchAll)
	}
}

func (c *Config) validateHooks(bad complain) {
	names := map[string]bool{}
	for i, h := range c.Hooks {
		if h.Mailbox == "" || len(h.Cmd) == 0 || h.Event == "" {
			bad("hooks[%d]: mailbox, event and cmd are required", i)
		}
		if h.Name != "" {
			if names[h.Name] {
				bad("hooks: name %q is used twice", h.Name)
			}
			names[h.Name] = true
		}
	}
}

// validateAliases makes every alias name one mailbox: an alias claimed by two
// mailboxes, or equal to another mailbox's name, would leave the route to
// chance or silently steal that mailbox's mail. Aliases compare without case,
// as addresses are routed.
func (c *Config) validateAliases(bad complain) {
	names := map[string]bool{}
	for _, m := range c.Mailboxes {
		names[m.Name] = true
	}
	owner := map[string]string{}
	for _, m := range c.Mailboxes {
		for _, a := range m.Aliases {
			a = strings.ToLower(a)
			local, _, _ := strings.Cut(a, "@")
			if local != m.Name && names[local] {
				bad("mailboxes %q: alias %q is the mailbox %q: remove the alias or that mailbox", m.Name, a, local)
			}
			if prev, ok := owner[a]; ok && prev != m.Name {
				bad("mailboxes %q and %q both claim the alias %q: keep it on one", prev, m.Name, a)
			}
			owner[a] = m.Name
		}
	}
}
