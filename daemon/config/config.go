// Package config loads mailctl's operator configuration: a strict TOML file in
// which an unknown or misspelled key is an error that names it. Every setting
// has a documented default (docs/configuration.md); Load fills them in.
package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/internal/safeio"
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
	// MaxPerDestination bounds the attempts in flight to one recipient
	// domain (default: half of max_concurrent), so a few slow destinations
	// cannot hold every place.
	MaxPerDestination int `toml:"max_per_destination"`
	Port              int `toml:"port"` // remote SMTP port, 25 except in tests
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
	// IdempotencyWindow is how long a send's idempotency key is
	// remembered (a retry with it answers with the first message); a
	// message still queued keeps its key longer.
	IdempotencyWindow Duration `toml:"idempotency_window"`
}

// HookRules are the operator's limits on hooks.
type HookRules struct {
	// AllowUntrustedForUsers lets non-root callers create hooks with
	// fire_on_untrusted. Off by default so a prompt-injected agent cannot plant
	// a trigger that runs on attacker mail.
	AllowUntrustedForUsers bool `toml:"allow_untrusted_for_users"`
	MaxConcurrent          int  `toml:"max_concurrent"`
	// MaxPerMailbox bounds the hooks users create on one mailbox over the
	// socket (default 100); root's and the config's are not counted.
	MaxPerMailbox int `toml:"max_per_mailbox"`
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
	// MaxPerOwner bounds the mailboxes a user may create over the socket
	// while it owns that many (default 100): each is folders and a registry
	// file in the daemon's state, and a line of every listing. Root is not
	// bound by it, and mailboxes the config declares are not counted.
	MaxPerOwner int `toml:"max_per_owner"`
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

// daysRE is the count of days a duration may give: digits, perhaps with a
// fraction ("1.5d"); not the exponents, hex, NaN or Inf ParseFloat reads.
var daysRE = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

// UnmarshalText accepts Go durations plus a "d" suffix for days. The
// number of days is the whole text before the "d": "5xd" or "1h5d" is not
// read as 5 or 1 days, and a count past what a duration holds (or NaN, Inf)
// is refused, not wrapped round to a negative duration.
func (d *Duration) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		// time.Duration ends a little past 106751 days (292 years).
		ns := n * float64(24*time.Hour)
		if !daysRE.MatchString(days) || err != nil || ns >= math.MaxInt64 {
			return fmt.Errorf("bad duration %q: use forms like 30s, 5m, 2h or 5d (at most 106751d)", s)
		}
		d.Duration = time.Duration(ns)
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
	setDefault(&d.MaxPerDestination, max(d.MaxConcurrent/2, 1))
	setDefault(&d.Port, 25)
	setDefault(&d.DelayWarning, &Duration{4 * time.Hour})
	// Never shorter than the retries: a config that raised retry_for
	// past the default window stays valid.
	setDefault(&d.IdempotencyWindow, Duration{max(30*24*time.Hour, d.RetryFor.Duration)})
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
	setDefault(&c.HookRules.MaxPerMailbox, 100)
	setDefault(&c.MailboxRules.MaxPerOwner, 100)
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

// MaxConfigFile bounds config.toml: a config declaring thousands of
// mailboxes, each with its overrides, stays under a few MiB.
const MaxConfigFile = 16 << 20

// readFile reads the config file the operator names. A link is followed
// (configuration tools manage the file as one); a FIFO, a device or a file
// past MaxConfigFile is refused with an error naming the path, never waited
// on nor read without end.
func readFile(path string) ([]byte, error) {
	data, err := safeio.ReadInput(path, MaxConfigFile)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	return data, nil
}

// Load reads and validates the config at path. Unknown keys are errors that
// name the key and the line.
func Load(path string) (*Config, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
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

// LoadForChecks is Load that goes past unknown keys and past values that
// Validate refuses (it still normalizes the rest): `mailctl doctor` uses it
// to check the rest of a file whose fault is a misspelled key or one bad
// value against the file's own values rather than the defaults. A file that
// is not TOML, or whose values do not decode, still fails.
func LoadForChecks(path string) (*Config, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	c, err := parse(data, false)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c.File = path
	return c, nil
}

// UnknownKeyError is a config that names keys mailctl does not know (a
// misspelling, most often): everything else in it may be right.
type UnknownKeyError struct{ Keys []string }

func (e *UnknownKeyError) Error() string {
	return fmt.Sprintf("unknown key %s (check the spelling against docs/configuration.md)", strings.Join(e.Keys, ", "))
}

// Parse decodes and validates config text.
func Parse(data []byte) (*Config, error) { return parse(data, true) }

// parse decodes data. Not strict, unknown keys and the values Validate
// refuses are let through (for doctor's checks, never for a daemon).
func parse(data []byte, strict bool) (*Config, error) {
	var c Config
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&c)
	if err != nil {
		if pe, ok := errors.AsType[toml.ParseError](err); ok {
			// A file that is valid TOML failed on one value (a duration, say),
			// and LastKey is that value's key: name it, as type errors do. In a
			// syntax error LastKey may be an earlier key or a table, so not there.
			var plain map[string]any
			if pe.LastKey != "" && toml.Unmarshal(data, &plain) == nil {
				return nil, fmt.Errorf("line %d: %s: %s", pe.Position.Line, pe.LastKey, pe.Message)
			}
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
	if und := md.Undecoded(); strict && len(und) > 0 {
		var keys []string
		for _, k := range und {
			keys = append(keys, k.String())
		}
		return nil, &UnknownKeyError{Keys: keys}
	}
	file := c // as the file has it: applyDefaults fills in the zeros
	file.SMTP.DNSBL = slices.Clone(c.SMTP.DNSBL)
	c.applyDefaults()
	err = c.Validate()
	if !strict {
		return &c, nil
	}
	var errs []string
	var plain map[string]any
	if toml.Unmarshal(data, &plain) == nil {
		zeroesTakenAsDefault(plain, &file, &c, func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) })
	}
	if err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "; "))
	}
	return &c, nil
}

var (
	domainRE  = regexp.MustCompile(`^(?i)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$`)
	mailboxRE = regexp.MustCompile(`^[a-z0-9_-]([a-z0-9._-]{0,62}[a-z0-9_-])?$`)
)

// IsLocalDomain reports whether domain is one this host receives for.
func (c *Config) IsLocalDomain(domain string) bool {
	return slices.Contains(c.Domains, strings.ToLower(strings.TrimSuffix(domain, ".")))
}

// AliasLocal is the local part a declared mailbox's alias claims at our
// domains ("help", or "help@example.org" for one of them), lower-cased;
// false for an alias at another domain, which claims nothing of ours.
func (c *Config) AliasLocal(alias string) (string, bool) {
	local, domain, full := strings.Cut(strings.ToLower(alias), "@")
	return local, !full || c.IsLocalDomain(domain)
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
