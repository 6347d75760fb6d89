// Package config loads mailctl's operator configuration: a strict TOML file in
// which an unknown or misspelled key is an error that names it. Every setting
// has a documented default (docs/configuration.md); Load fills them in.
package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/internal/tomlkeys"
	"github.com/mailctl/mailctl/protocol"
)

// DefaultPath is where the system daemon reads its config.
const DefaultPath = "/etc/mailctl/config.toml"

// Config is the whole operator configuration.
type Config struct {
	// Format is the version of this file's format (formats.Config when
	// left out); a higher one is refused, naming the release to run.
	Format int `toml:"format"`
	// Hostname is the name this host answers SMTP with and uses in EHLO.
	Hostname string `toml:"hostname"`
	// Domains are the mail domains this host receives for; the first is the
	// default for new mailboxes' addresses and Message-IDs.
	Domains []string `toml:"domains"`
	// CatchAll names the mailbox that receives mail for unknown local parts;
	// empty refuses them with 550 5.1.1.
	CatchAll string `toml:"catch_all"`

	Paths     Paths      `toml:"paths"`
	SMTP      SMTP       `toml:"smtp"`
	LMTP      LMTP       `toml:"lmtp"`
	Trust     Trust      `toml:"trust"`
	DNS       DNS        `toml:"dns"`
	Send      SendPolicy `toml:"send"`
	Relay     Relay      `toml:"relay"`
	Delivery  Delivery   `toml:"delivery"`
	TLSRPT    TLSRPT     `toml:"tlsrpt"`
	HookRules HookRules  `toml:"hook_rules"`
	// MailboxRules say what owners may set on their own mailboxes.
	MailboxRules MailboxRules    `toml:"mailbox_rules"`
	Control      Control         `toml:"control"`
	Metrics      Metrics         `toml:"metrics"`
	Storage      Storage         `toml:"storage"`
	Mailboxes    []MailboxConfig `toml:"mailboxes"`
	Hooks        []HookConfig    `toml:"hooks"`

	// File is the path the config was loaded from (not a TOML key).
	File string `toml:"-"`
}

// Paths are the daemon's directories and its socket.
type Paths struct {
	StateDir string `toml:"state_dir" secret:"none"` // registry, mailboxes, queue, hook runs
	Socket   string `toml:"socket" secret:"none"`
	DKIMDir  string `toml:"dkim_dir" secret:"dir:*.key"`
}

// MailboxesDir is where mailbox folders live.
func (p Paths) MailboxesDir() string { return filepath.Join(p.StateDir, "mailboxes") }

// IndexFile is the message index database: in a directory of the state
// directory only root can enter, never inside a mailbox.
func (p Paths) IndexFile() string { return filepath.Join(p.StateDir, "index", "index.db") }

// RegistryDir holds mailboxes and hooks created over the socket.
func (p Paths) RegistryDir() string { return filepath.Join(p.StateDir, "registry") }

// QueueDir holds outbound queue items.
func (p Paths) QueueDir() string { return filepath.Join(p.StateDir, "queue") }

// InboundDir holds the inbound journal: accepted messages not yet known to
// be durable in their mailboxes.
func (p Paths) InboundDir() string { return filepath.Join(p.StateDir, "inbound") }

// SMTP configures the inbound listeners and their limits.
type SMTP struct {
	Listen     []string `toml:"listen"`                    // SMTP listen addresses
	LMTPSocket string   `toml:"lmtp_socket" secret:"none"` // optional LMTP Unix socket
	// LMTPXForwardUsers may pass on their client's address with XFORWARD
	// over the LMTP socket (the front MTA's user; root may anyway).
	LMTPXForwardUsers   []string `toml:"lmtp_xforward_users"`
	TLSCert             string   `toml:"tls_cert" secret:"none"`
	TLSKey              string   `toml:"tls_key" secret:"file"`
	MaxMessageBytes     int64    `toml:"max_message_bytes"`
	MaxRecipients       int      `toml:"max_recipients"`
	MaxLineLength       int      `toml:"max_line_length"`
	CommandTimeout      Duration `toml:"command_timeout"`
	SessionTimeout      Duration `toml:"session_timeout"`
	MaxConnections      int      `toml:"max_connections"`
	MaxConnectionsPerIP int      `toml:"max_connections_per_ip"`
	MaxErrors           int      `toml:"max_errors"`
	MaxReceivedHeaders  int      `toml:"max_received_headers"`
	// PregreetWait holds the greeting back; a client that talks before it
	// is refused (as postscreen's pregreet test). 0 turns the wait off; the
	// check still runs while DNS lists are asked.
	PregreetWait Duration `toml:"pregreet_wait"`
	// DNSBL are the DNS block- and allow-lists asked about each client at
	// connect; none by default.
	DNSBL []DNSList `toml:"dnsbl"`
	// DNSBLThreshold: a client whose lists' weights add up to this or more
	// is refused at connect with 554 5.7.1; a listed one below it has its
	// mail marked and put in junk.
	DNSBLThreshold int `toml:"dnsbl_threshold"`
	// DNSBLTimeout bounds each list's answer; a list that has not answered
	// counts as not listing the client.
	DNSBLTimeout Duration `toml:"dnsbl_timeout"`
}

// LMTP configures LMTP over TCP, for a tier of front MTAs on other hosts
// (docs/scale.md). The Unix socket is smtp.lmtp_socket.
type LMTP struct {
	// ListenTCP are host:port addresses to take LMTP on.
	ListenTCP []string `toml:"listen_tcp"`
	// AllowFrom are the front MTAs' networks (CIDR, or a bare address):
	// only they may connect, and they may pass on their client's address
	// with XFORWARD. Required with ListenTCP.
	AllowFrom []string `toml:"allow_from"`
}

// AllowPrefixes parses AllowFrom; Validate has refused what does not parse.
func (l LMTP) AllowPrefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, a := range l.AllowFrom {
		if p, err := parseAllow(a); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// parseAllow reads "10.0.0.1/32", "fd00::/64" or a bare address (one host).
func parseAllow(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if p.Addr().Is4In6() {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// Trust configures inbound authentication.
type Trust struct {
	// TrustedSenders are address patterns ("*@example.com") whose authenticated
	// mail is marked trusted; a mailbox's own list replaces this one.
	TrustedSenders []string `toml:"trusted_senders"`
	// Resolver is the former name of [dns] resolver, still read.
	Resolver string `toml:"resolver"`
	// DMARCEnforce applies the From domain's DMARC policy to mail that
	// fails DMARC (RFC 7489 §6.6): p=reject is refused with 550 5.7.1 at
	// the end of DATA, p=quarantine is stored in the junk folder. On by
	// default.
	DMARCEnforce *bool `toml:"dmarc_enforce"`
	// Forwarders are networks (CIDR or address) and domains whose mail is
	// exempt from DMARC enforcement: mailing lists and forwarders that pass
	// on mail which then fails DMARC for its original From. A domain counts
	// when it authenticated the message (DKIM pass for it or a subdomain,
	// or SPF pass for the envelope sender).
	Forwarders []string `toml:"forwarders"`
}

// DNS configures the lookups of every part of the daemon: SPF, DKIM and DMARC
// for inbound mail, MX and address records for delivery, and doctor's checks.
type DNS struct {
	// Resolver is a DNS server "host:port"; empty uses the system resolver.
	Resolver string `toml:"resolver"`
	// DNSSECProbe is a DNSSEC-signed name doctor asks the resolver about:
	// a validating resolver answers it with the AD bit. Default "." (the
	// root zone, signed since 2010).
	DNSSECProbe string `toml:"dnssec_probe"`
}

// SendPolicy governs outbound mail; the global one is the default of every
// mailbox, and a mailbox's [mailboxes.send] table overrides the keys it sets.
type SendPolicy struct {
	Enabled            *bool    `toml:"enabled"`
	DryRunOnly         *bool    `toml:"dry_run_only"`
	AllowDomains       []string `toml:"allow_domains"`
	AllowAddresses     []string `toml:"allow_addresses"`
	MaxRecipients      int      `toml:"max_recipients"`
	MaxMessageBytes    int64    `toml:"max_message_bytes"`
	MaxAttachmentBytes int64    `toml:"max_attachment_bytes"`
	MaxAttachments     int      `toml:"max_attachments"`
	PerMinute          int      `toml:"per_minute"`
	PerHour            int      `toml:"per_hour"`
	PerDay             int      `toml:"per_day"`
	Hold               *bool    `toml:"hold"`
}

// Relay sends all outbound mail through a smarthost instead of MX delivery.
type Relay struct {
	Host string `toml:"host"`
	// Port defaults to 465 with implicit TLS, else 587.
	Port int `toml:"port"`
	// TLS is how TLS starts: RelayImplicitTLS from the first byte, or
	// RelayStartTLS after the greeting. Load fills it in from the port
	// (465 implicit, any other STARTTLS).
	TLS          string `toml:"tls"`
	Username     string `toml:"username"`
	PasswordFile string `toml:"password_file" secret:"file"` // root-only file holding the password
	// CAFile is a PEM bundle of the certificate authorities the relay's
	// certificate must chain to, instead of the system's (a private CA).
	CAFile string `toml:"ca_file" secret:"none"`
	// SplitDomains says the local domains' mailboxes are spread over
	// several mailctl hosts behind one MTA tier (docs/scale.md): mail from
	// here to a local address with no mailbox on this host goes to the
	// relay, which routes it to the host that has it, instead of failing.
	SplitDomains bool `toml:"split_domains"`
}

// Delivery tunes the outbound queue.
type Delivery struct {
	RetryFor           Duration `toml:"retry_for"`          // give up on 4xx after this long
	FirstAttemptWait   Duration `toml:"first_attempt_wait"` // how long a send waits for its first attempt
	AllowPlaintext     *bool    `toml:"allow_plaintext"`    // deliver without TLS when the peer offers none
	ConnectTimeout     Duration `toml:"connect_timeout"`
	TransactionTimeout Duration `toml:"transaction_timeout"`
	MaxConcurrent      int      `toml:"max_concurrent"`
	Port               int      `toml:"port"` // remote SMTP port, 25 except in tests
	// DelayWarning is how long after a message became due its sender gets
	// one "delayed" report (RFC 3464) while retries go on; "0s" sends none.
	DelayWarning *Duration `toml:"delay_warning"`
	// MTASTS honours recipient domains' MTA-STS policies (RFC 8461).
	MTASTS *bool `toml:"mta_sts"`
	// DANE honours TLSA records the resolver validated (RFC 7672).
	DANE *bool `toml:"dane"`
	// CAFile is a PEM file of certificates that verify MX hosts and
	// MTA-STS policy hosts instead of the system roots (a private CA, tests).
	CAFile string `toml:"ca_file" secret:"none"`
	// MTASTSPort is the HTTPS port MTA-STS policies are fetched from; 443
	// except in tests.
	MTASTSPort int `toml:"mta_sts_port"`
}

// HookRules are the operator's limits on hooks.
type HookRules struct {
	// AllowUntrustedForUsers lets non-root callers create hooks with
	// fire_on_untrusted. Off by default so a prompt-injected agent cannot plant
	// a trigger that runs on attacker mail.
	AllowUntrustedForUsers bool `toml:"allow_untrusted_for_users"`
	MaxConcurrent          int  `toml:"max_concurrent"`
}

// MailboxRules are the operator's limits on what an owner may change on its
// own (registry) mailbox with mailbox.update; root may always, and
// mailboxes declared in this file are changed only here.
type MailboxRules struct {
	// OwnersMaySetTrustedSenders lets owners choose whose authenticated mail
	// to their mailbox is trusted (unfenced, and firing hooks). Off by
	// default: a prompt-injected agent could otherwise trust its attacker.
	OwnersMaySetTrustedSenders bool `toml:"owners_may_set_trusted_senders"`
	// OwnersMaySetDisplayName lets owners name their From; on by default.
	OwnersMaySetDisplayName *bool `toml:"owners_may_set_display_name"`
}

// Control tunes the control socket.
type Control struct {
	MaxConnections int `toml:"max_connections"`
	// MaxConnectionsPerUID bounds one uid's connections; ReservedForRoot of
	// MaxConnections are root's alone, so no user can lock the operator out.
	MaxConnectionsPerUID int      `toml:"max_connections_per_uid"`
	ReservedForRoot      int      `toml:"reserved_for_root"`
	IdleTimeout          Duration `toml:"idle_timeout"` // a connection with no request in flight is closed after this
	RequestTimeout       Duration `toml:"request_timeout"`
	// RequestMemory bounds the bytes requests hold, from their frame to
	// their end; one uid may hold RequestMemoryPerUID of it, and one such
	// share is kept for root.
	RequestMemory       int64 `toml:"request_memory"`
	RequestMemoryPerUID int64 `toml:"request_memory_per_uid"`
}

// Storage sets the limits of the mail store.
type Storage struct {
	// DiskReserveBytes is the free space on the store's filesystem below
	// which new mail is answered 452 4.3.1 and sends are refused, so that
	// what is under way can finish before the disk is full. 0 disables.
	DiskReserveBytes *int64 `toml:"disk_reserve_bytes"`
	// QuotaBytes and QuotaMessages are every mailbox's quota unless its
	// own is set ([[mailboxes]], or root's mailbox.update). 0: none.
	QuotaBytes    int64 `toml:"quota_bytes"`
	QuotaMessages int64 `toml:"quota_messages"`
	// Retention is how long messages stay in a folder, by folder name
	// ("0s": forever). Past it, a message moves to trash; past trash's
	// own, counted from when it came to trash, it is removed for good.
	// Defaults: trash 30 days, sent 365 days, the other folders forever.
	Retention map[string]Duration `toml:"retention"`
	// PruneEvery is how often the daemon applies Retention.
	PruneEvery Duration `toml:"prune_every"`
}

// RetentionFolders are the folders a retention may name.
var RetentionFolders = []string{"inbox", "sent", "archive", "drafts", "junk", "trash"}

// Metrics configures the optional Prometheus endpoint.
type Metrics struct {
	Listen string `toml:"listen"` // loopback address, e.g. "127.0.0.1:9325"; empty disables
	// DestinationDomains are the domains that get a label of their own in
	// the delivery metrics; every other destination is local, relay or
	// remote, so a label never takes a value from outside this list.
	DestinationDomains []string `toml:"destination_domains"`
}

// MailboxConfig declares a mailbox in the config. Such mailboxes cannot be
// deleted or changed by non-root callers.
type MailboxConfig struct {
	Name           string      `toml:"name"`
	Owner          string      `toml:"owner"` // user name or numeric uid
	Aliases        []string    `toml:"aliases"`
	DisplayName    string      `toml:"display_name"` // the name outgoing From carries
	TrustedSenders []string    `toml:"trusted_senders"`
	Send           *SendPolicy `toml:"send"`
	// QuotaBytes and QuotaMessages replace [storage]'s default quota for
	// this mailbox (0: none).
	QuotaBytes    *int64 `toml:"quota_bytes"`
	QuotaMessages *int64 `toml:"quota_messages"`
}

// HookConfig declares an operator hook.
type HookConfig struct {
	Name            string   `toml:"name"`
	Mailbox         string   `toml:"mailbox"`
	Event           string   `toml:"event"`
	Cmd             []string `toml:"cmd"`
	TimeoutSecs     int      `toml:"timeout_secs"`
	FireOnUntrusted bool     `toml:"fire_on_untrusted"`
	FireOnAuto      bool     `toml:"fire_on_auto_submitted"`
	FireOnLists     bool     `toml:"fire_on_lists"`
}

// Duration is a time.Duration written as "30s", "5m", "5d" in TOML.
type Duration struct{ time.Duration }

// UnmarshalText accepts Go durations plus a "d" suffix for days.
func (d *Duration) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if strings.HasSuffix(s, "d") {
		var n float64
		if _, err := fmt.Sscanf(strings.TrimSuffix(s, "d"), "%g", &n); err != nil || n < 0 {
			return fmt.Errorf("bad duration %q: use forms like 30s, 5m, 2h or 5d", s)
		}
		d.Duration = time.Duration(n * 24 * float64(time.Hour))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("bad duration %q: use forms like 30s, 5m, 2h or 5d", s)
	}
	d.Duration = v
	return nil
}

// MarshalText writes the duration in Go's notation.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.Duration.String()), nil }

// Default returns the configuration with every default filled in and no domain.
func Default() *Config {
	c := &Config{}
	c.applyDefaults()
	return c
}

// DefaultSMTPListen is where SMTP listens unless smtp.listen says otherwise,
// and what `mailctl setup` writes: every IPv4 and every IPv6 address on
// port 25, as two sockets (the daemon binds each family on its own, so this
// works whatever net.ipv6.bindv6only says).
var DefaultSMTPListen = []string{"0.0.0.0:25", "[::]:25"}

func (c *Config) applyDefaults() {
	if c.Hostname == "" {
		if h, err := os.Hostname(); err == nil {
			c.Hostname = h
		}
	}
	setDefault(&c.Format, formats.Config)
	setDefault(&c.DNS.Resolver, c.Trust.Resolver)
	setDefault(&c.Trust.DMARCEnforce, new(true))
	setDefault(&c.DNS.DNSSECProbe, ".")
	setDefault(&c.Paths.StateDir, "/var/lib/mailctl")
	setDefault(&c.Paths.Socket, protocol.DefaultSocket)
	setDefault(&c.Paths.DKIMDir, "/etc/mailctl/dkim")
	if c.SMTP.Listen == nil {
		c.SMTP.Listen = append([]string(nil), DefaultSMTPListen...)
	}
	s := &c.SMTP
	if s.LMTPXForwardUsers == nil {
		s.LMTPXForwardUsers = []string{"postfix"}
	}
	setDefault(&s.MaxMessageBytes, 25<<20)
	setDefault(&s.MaxRecipients, 100)
	setDefault(&s.MaxLineLength, 4096)
	setDefault(&s.CommandTimeout, Duration{5 * time.Minute})
	setDefault(&s.SessionTimeout, Duration{30 * time.Minute})
	setDefault(&s.MaxConnections, 500)
	setDefault(&s.MaxConnectionsPerIP, 20)
	setDefault(&s.MaxErrors, 10)
	setDefault(&s.MaxReceivedHeaders, 50)
	setDefault(&s.DNSBLThreshold, 1)
	setDefault(&s.DNSBLTimeout, Duration{2 * time.Second})
	for i := range s.DNSBL {
		setDefault(&s.DNSBL[i].Weight, 1)
	}
	p := &c.Send
	setDefault(&p.Enabled, new(true))
	setDefault(&p.DryRunOnly, new(false))
	setDefault(&p.Hold, new(false))
	setDefault(&p.MaxRecipients, 50)
	setDefault(&p.MaxMessageBytes, 20<<20)
	setDefault(&p.MaxAttachmentBytes, 15<<20)
	setDefault(&p.MaxAttachments, 20)
	setDefault(&p.PerMinute, 20)
	setDefault(&p.PerHour, 200)
	setDefault(&p.PerDay, 1000)
	d := &c.Delivery
	setDefault(&d.RetryFor, Duration{5 * 24 * time.Hour})
	setDefault(&d.FirstAttemptWait, Duration{10 * time.Second})
	setDefault(&d.AllowPlaintext, new(true))
	setDefault(&d.ConnectTimeout, Duration{30 * time.Second})
	setDefault(&d.TransactionTimeout, Duration{10 * time.Minute})
	setDefault(&d.MaxConcurrent, 8)
	setDefault(&d.Port, 25)
	setDefault(&d.DelayWarning, &Duration{4 * time.Hour})
	setDefault(&c.Storage.DiskReserveBytes, new(int64(256<<20)))
	setDefault(&c.Storage.PruneEvery, Duration{time.Hour})
	if c.Storage.Retention == nil {
		c.Storage.Retention = map[string]Duration{}
	}
	for folder, keep := range map[string]time.Duration{"trash": 30 * 24 * time.Hour, "junk": 30 * 24 * time.Hour, "sent": 365 * 24 * time.Hour} {
		if _, set := c.Storage.Retention[folder]; !set {
			c.Storage.Retention[folder] = Duration{keep}
		}
	}
	setDefault(&d.MTASTS, new(true))
	setDefault(&d.DANE, new(true))
	setDefault(&d.MTASTSPort, 443)
	setDefault(&c.TLSRPT.Enabled, new(true))
	setDefault(&c.TLSRPT.Mailbox, "postmaster")
	setDefault(&c.TLSRPT.Organization, c.Hostname)
	setDefault(&c.HookRules.MaxConcurrent, 4)
	setDefault(&c.MailboxRules.OwnersMaySetDisplayName, new(true))
	setDefault(&c.Control.MaxConnections, 512)
	setDefault(&c.Control.MaxConnectionsPerUID, 64)
	setDefault(&c.Control.ReservedForRoot, 32)
	setDefault(&c.Control.IdleTimeout, Duration{10 * time.Minute})
	setDefault(&c.Control.RequestTimeout, Duration{30 * time.Second})
	setDefault(&c.Control.RequestMemory, 512<<20)
	setDefault(&c.Control.RequestMemoryPerUID, 224<<20)
	if r := &c.Relay; r.Host != "" {
		if r.TLS == RelayImplicitTLS {
			setDefault(&r.Port, 465)
		}
		setDefault(&r.Port, 587)
		if r.Port == 465 {
			setDefault(&r.TLS, RelayImplicitTLS)
		}
		setDefault(&r.TLS, RelayStartTLS)
	}
}

// The values of relay.tls.
const (
	RelayStartTLS    = "starttls"
	RelayImplicitTLS = "implicit"
)

// setDefault sets *p to v when the file left it unset (the zero value).
func setDefault[T comparable](p *T, v T) { *p = cmp.Or(*p, v) }

// Load reads and validates the config at path. Unknown keys are errors that
// name the key and the line.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	c, err := Parse(data)
	if ne, ok := errors.AsType[*formats.NewerError](err); ok {
		ne.Path = path
		return nil, ne
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c.File = path
	return c, nil
}

// Parse decodes and validates config text.
func Parse(data []byte) (*Config, error) {
	var c Config
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&c)
	if err != nil {
		if pe, ok := errors.AsType[toml.ParseError](err); ok {
			return nil, fmt.Errorf("line %d: %s", pe.Position.Line, pe.Message)
		}
		return nil, err
	}
	// First: a later release's file may hold keys this one does not know.
	if err := c.checkFormat(md.IsDefined("format")); err != nil {
		return nil, err
	}
	if err := tomlkeys.Exact(md.Keys(), &c); err != nil {
		return nil, err
	}
	if und := md.Undecoded(); len(und) > 0 {
		var keys []string
		for _, k := range und {
			keys = append(keys, k.String())
		}
		return nil, fmt.Errorf("unknown key %s (check the spelling against docs/configuration.md)", strings.Join(keys, ", "))
	}
	c.applyDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

var (
	domainRE  = regexp.MustCompile(`^(?i)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$`)
	mailboxRE = regexp.MustCompile(`^[a-z0-9_-]([a-z0-9._-]{0,62}[a-z0-9_-])?$`)
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
		c.validateRelay, c.validateTLSRPT, c.validateDNS, c.validateTrust, c.validateMailboxes, c.validateAliases, c.validateHooks,
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

// IsLocalDomain reports whether domain is one this host receives for.
func (c *Config) IsLocalDomain(domain string) bool {
	return slices.Contains(c.Domains, strings.ToLower(strings.TrimSuffix(domain, ".")))
}

// PrimaryDomain is the first configured domain, or "localhost".
func (c *Config) PrimaryDomain() string {
	if len(c.Domains) > 0 {
		return c.Domains[0]
	}
	return "localhost"
}

// Mailbox returns the operator declaration of a mailbox, if any.
func (c *Config) Mailbox(name string) *MailboxConfig {
	if i := slices.IndexFunc(c.Mailboxes, func(m MailboxConfig) bool { return m.Name == name }); i >= 0 {
		return &c.Mailboxes[i]
	}
	return nil
}

// EffectiveSend merges a mailbox's overrides onto the global send policy.
func (c *Config) EffectiveSend(mailbox string) SendPolicy {
	p := c.Send
	m := c.Mailbox(mailbox)
	if m == nil || m.Send == nil {
		return p
	}
	o := m.Send
	p.Enabled = cmp.Or(o.Enabled, p.Enabled)
	p.DryRunOnly = cmp.Or(o.DryRunOnly, p.DryRunOnly)
	p.Hold = cmp.Or(o.Hold, p.Hold)
	if o.AllowDomains != nil {
		p.AllowDomains = o.AllowDomains
	}
	if o.AllowAddresses != nil {
		p.AllowAddresses = o.AllowAddresses
	}
	p.MaxRecipients = cmp.Or(o.MaxRecipients, p.MaxRecipients)
	p.MaxMessageBytes = cmp.Or(o.MaxMessageBytes, p.MaxMessageBytes)
	p.MaxAttachmentBytes = cmp.Or(o.MaxAttachmentBytes, p.MaxAttachmentBytes)
	p.MaxAttachments = cmp.Or(o.MaxAttachments, p.MaxAttachments)
	p.PerMinute = cmp.Or(o.PerMinute, p.PerMinute)
	p.PerHour = cmp.Or(o.PerHour, p.PerHour)
	p.PerDay = cmp.Or(o.PerDay, p.PerDay)
	return p
}

// TrustedSenders returns the effective trusted-sender patterns of a mailbox and
// where they come from ("mailbox" or "global").
func (c *Config) TrustedSenders(mailbox string) ([]string, string) {
	if m := c.Mailbox(mailbox); m != nil && m.TrustedSenders != nil {
		return m.TrustedSenders, "mailbox"
	}
	return c.Trust.TrustedSenders, "global"
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
