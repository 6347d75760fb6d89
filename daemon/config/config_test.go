package config

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestUnknownKeyIsNamed(t *testing.T) {
	for _, tt := range []struct{ text, key string }{
		{"domains = [\"a.test\"]\n[smtp]\nmax_recipents = 5\n", "smtp.max_recipents"},
		{"domans = [\"a.test\"]\n", "domans"},
		{"[[mailboxes]]\nname = \"a\"\nowner = \"root\"\nownr = \"x\"\n", "mailboxes.ownr"},
	} {
		_, err := Parse([]byte(tt.text))
		if err == nil || !strings.Contains(err.Error(), tt.key) {
			t.Errorf("%q: error %v does not name %s", tt.text, err, tt.key)
		}
	}
}

func TestDefaults(t *testing.T) {
	c, err := Parse([]byte(`domains = ["Example.COM."]`))
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"domain normalized", c.Domains[0], "example.com"},
		{"socket", c.Paths.Socket, "/run/mailctl/mailctl.sock"},
		{"state", c.Paths.StateDir, "/var/lib/mailctl"},
		{"size", c.SMTP.MaxMessageBytes, int64(25 << 20)},
		{"rcpts", c.SMTP.MaxRecipients, 100},
		{"received", c.SMTP.MaxReceivedHeaders, 50},
		{"session", c.SMTP.SessionTimeout.Duration, 30 * time.Minute},
		{"retry", c.Delivery.RetryFor.Duration, 5 * 24 * time.Hour},
		{"deliveries", c.Delivery.MaxConcurrent, 8},
		{"per destination", c.Delivery.MaxPerDestination, 4},
		{"send on", *c.Send.Enabled, true},
		{"untrusted hooks off", c.HookRules.AllowUntrustedForUsers, false},
		{"listen", strings.Join(c.SMTP.Listen, ","), "0.0.0.0:25,[::]:25"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s: got %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

func TestValidation(t *testing.T) {
	for _, tt := range []struct{ text, want string }{
		{`domains = ["not a domain"]`, "not a domain name"},
		{"domains = [\"a.test\"]\n[paths]\nsocket = \"relative.sock\"\n", "absolute"},
		{"domains = [\"a.test\"]\n[smtp]\nlisten = [\"25\"]\n", "host:port"},
		{"domains = [\"a.test\"]\n[smtp]\ntls_cert = \"/c.pem\"\n", "set together"},
		{"domains = [\"a.test\"]\n[metrics]\nlisten = \"0.0.0.0:9000\"\n", "loopback"},
		{"[[mailboxes]]\nname = \"../x\"\nowner = \"root\"\n", "must match"},
		{"[[mailboxes]]\nname = \"a\"\n", "owner is required"},
		{"[[hooks]]\nmailbox = \"a\"\n", "required"},
		{"[delivery]\nretry_for = \"soon\"\n", "line 2: delivery.retry_for: bad duration"},
		{"[delivery]\ndelay_warning = \"later\"\n", "delivery.delay_warning: bad duration"},
		{"[storage.retention]\ntrash = \"30 days\"\n", "line 2: storage.retention.trash: bad duration \"30 days\""},
		// Days were read with Sscanf, which stopped at the first character
		// it could not read and wrapped a count too large for a duration
		// round to a negative one: "1e20d" kept mail forever and made a
		// timeout expire at once, "5xd" was 5 days.
		{"[storage.retention]\ntrash = \"1e20d\"\n", "storage.retention.trash: bad duration \"1e20d\""},
		{"[delivery]\nretry_for = \"106752d\"\n", "delivery.retry_for: bad duration \"106752d\""},
		{"[smtp]\ncommand_timeout = \"NaNd\"\n", "smtp.command_timeout: bad duration"},
		{"[smtp]\nsession_timeout = \"Infd\"\n", "smtp.session_timeout: bad duration"},
		{"[delivery]\ndelay_warning = \"5xd\"\n", "delivery.delay_warning: bad duration \"5xd\""},
		{"[storage.retention]\nsent = \"1h5d\"\n", "storage.retention.sent: bad duration \"1h5d\""},
		{"[storage.retention]\nsent = \"0x10d\"\n", "storage.retention.sent: bad duration \"0x10d\""},
		{"domains = [\"a.test\"]\n[delivery]\nmax_concurrent = -1\n", "max_concurrent must be at least 1"},
		{"domains = [\"a.test\"]\n[delivery]\nmax_concurrent = 4\nmax_per_destination = 5\n", "between 1 and delivery.max_concurrent (4)"},
		{"domains = [\"a.test\"]\n[delivery]\nmax_per_destination = -2\n", "max_per_destination must be"},
		{"domains = [\"a.test\"]\n[storage]\ndisk_reserve_bytes = -1\n", "negative"},
		// int64's largest, meant as no limit, wrapped to a negative bound
		// once the daemon added one to it: no message was read.
		{"domains = [\"a.test\"]\n[smtp]\nmax_message_bytes = 9223372036854775807\n", "smtp.max_message_bytes = 9223372036854775807 is past the largest number"},
		{"domains = [\"a.test\"]\n[control]\nrequest_memory = 1125899906842625\n", "control.request_memory = 1125899906842625 is past"},
		{"domains = [\"a.test\"]\n[[mailboxes]]\nname = \"a\"\nowner = \"root\"\n[mailboxes.send]\nmax_message_bytes = 1125899906842625\n", "mailboxes[0].send.max_message_bytes = 1125899906842625 is past"},
		// Negative limits used to be taken as no limit at all, or the default.
		{"domains = [\"a.test\"]\n[send]\nper_minute = -1\n", "send.per_minute: -1 is negative"},
		{"domains = [\"a.test\"]\n[send]\nmax_recipients = -5\n", "send.max_recipients: -5 is negative"},
		{"domains = [\"a.test\"]\n[[mailboxes]]\nname = \"a\"\nowner = \"root\"\n[mailboxes.send]\nper_hour = -1\n", `mailboxes "a" send.per_hour: -1 is negative`},
		{"domains = [\"a.test\"]\n[hook_rules]\nmax_concurrent = -1\n", "hook_rules.max_concurrent: -1 is negative"},
		// A 0 looks unset, so the default filled it in: a limit written as 0
		// (meant as none, or as nothing at all) silently became the default.
		{"domains = [\"a.test\"]\n[send]\nper_day = 0\n", "send.per_day = 0 is taken as the default (1000)"},
		{"domains = [\"a.test\"]\n[smtp]\nmax_recipients = 0\n", "smtp.max_recipients = 0 is taken as the default (100)"},
		{"domains = [\"a.test\"]\n[smtp]\ncommand_timeout = \"0s\"\n", "smtp.command_timeout = \"0s\" is taken as the default (5m0s)"},
		{"domains = [\"a.test\"]\n[hook_rules]\nmax_per_mailbox = 0\n", "hook_rules.max_per_mailbox = 0 is taken as the default (100)"},
		{"domains = [\"a.test\"]\n[control]\nreserved_for_root = 0\n", "control.reserved_for_root = 0 is taken as the default (32)"},
		{"domains = [\"a.test\"]\n[[smtp.dnsbl]]\nzone = \"l.test\"\nweight = 0\n", "smtp.dnsbl[0].weight = 0 is taken as the default (1)"},
		{"domains = [\"a.test\"]\n[[mailboxes]]\nname = \"a\"\nowner = \"root\"\n[mailboxes.send]\nmax_recipients = 0\n", `mailboxes "a" send.max_recipients = 0 would be taken as [send]'s max_recipients (50)`},
		{"domains = [\"a.test\"]\n[delivery]\nport = 70000\n", "delivery.port: 70000 is not a port"},
		{"domains = [\"a.test\"]\n[relay]\nhost = \"r.test\"\nport = 70000\n", "relay.port: 70000 is not a port"},
		{"domains = [\"a.test\"]\n[metrics]\ndestination_domains = [\"Gmail.com\"]\n", "lower-case domain"},
		{"domains = [\"a.test\"]\n[metrics]\ndestination_domains = [\"x@gmail.com\"]\n", "lower-case domain"},
		{"domains = [\"a.test\", \"A.test\"]\n", "twice"},
		{"[trust]\nresolver = \"127.0.0.1:53\"\n[dns]\nresolver = \"127.0.0.2:53\"\n", "former name"},
		{"[[mailboxes]]\nname = \"a\"\nowner = \"root\"\naliases = [\"sales\"]\n[[mailboxes]]\nname = \"b\"\nowner = \"root\"\naliases = [\"Sales\"]\n", "both claim the alias"},
		{"[[mailboxes]]\nname = \"a\"\nowner = \"root\"\naliases = [\"b\"]\n[[mailboxes]]\nname = \"b\"\nowner = \"root\"\n", "is the mailbox \"b\""},
	} {
		_, err := Parse([]byte(tt.text))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want it to mention %q", tt.text, err, tt.want)
		}
	}
}

func TestPerMailboxOverrides(t *testing.T) {
	c, err := Parse([]byte(`
domains = ["a.test"]
[trust]
trusted_senders = ["*@a.test"]
[send]
per_hour = 100
[[mailboxes]]
name = "m"
owner = "root"
trusted_senders = ["boss@b.test"]
[mailboxes.send]
per_hour = 5
enabled = false
`))
	if err != nil {
		t.Fatal(err)
	}
	p := c.EffectiveSend("m")
	if p.PerHour != 5 || *p.Enabled || p.PerDay != 1000 {
		t.Errorf("override: %+v", p)
	}
	if g := c.EffectiveSend("other"); g.PerHour != 100 || !*g.Enabled {
		t.Errorf("global: %+v", g)
	}
	if s, src := c.TrustedSenders("m"); src != "mailbox" || s[0] != "boss@b.test" {
		t.Errorf("mailbox trust: %v %s", s, src)
	}
	if s, src := c.TrustedSenders("x"); src != "global" || s[0] != "*@a.test" {
		t.Errorf("global trust: %v %s", s, src)
	}
}

// TestDocumentedExampleParses keeps docs/configuration.md honest: its
// annotated example must load, and the defaults it states must be the real ones.
// TestDocumentedExampleParses: the annotated example in
// docs/configuration.md loads, and, as the page says, every key in it shows
// its default unless its comment says otherwise: the example's config is the
// one a file naming only its hostname and domains gets, apart from the
// declared mailboxes and hooks and relay.port, whose default needs
// relay.host.
func TestDocumentedExampleParses(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```toml\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("no toml block in docs/configuration.md")
	}
	c, err := Parse(m[1])
	if err != nil {
		t.Fatalf("documented example does not load: %v", err)
	}
	if len(c.Mailboxes) == 0 || len(c.Hooks) == 0 || c.Relay.Port != 587 {
		t.Fatalf("the example no longer declares a mailbox, a hook and relay.port = 587: update this test")
	}
	var domains []string
	for _, dom := range c.Domains {
		domains = append(domains, strconv.Quote(dom))
	}
	d, err := Parse([]byte(fmt.Sprintf("hostname = %q\ndomains = [%s]\n", c.Hostname, strings.Join(domains, ", "))))
	if err != nil {
		t.Fatal(err)
	}
	c.Mailboxes, c.Hooks, c.Relay.Port = nil, nil, d.Relay.Port
	emptyToNil(reflect.ValueOf(c).Elem())
	emptyToNil(reflect.ValueOf(d).Elem())
	cv, dv := reflect.ValueOf(*c), reflect.ValueOf(*d)
	for i := range cv.NumField() {
		if want, got := dv.Field(i).Interface(), cv.Field(i).Interface(); !reflect.DeepEqual(want, got) {
			t.Errorf("docs/configuration.md's %s drifted from the defaults:\n-want %+v\n+got  %+v", cv.Type().Field(i).Name, deref(want), deref(got))
		}
	}
}

// emptyToNil makes every empty slice and map under v nil, so that a key
// written as [] compares equal to one left out.
func emptyToNil(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			emptyToNil(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				emptyToNil(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Len() == 0 {
			v.Set(reflect.Zero(v.Type()))
		}
		for i := range v.Len() {
			emptyToNil(v.Index(i))
		}
	case reflect.Map:
		if v.Len() == 0 {
			v.Set(reflect.Zero(v.Type()))
		}
	}
}

// deref shows the values behind a struct's pointer fields, for a diff.
func deref(x any) string {
	v := reflect.ValueOf(x)
	if v.Kind() != reflect.Struct {
		return fmt.Sprintf("%v", x)
	}
	var b strings.Builder
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() == reflect.Pointer && !f.IsNil() {
			f = f.Elem()
		}
		fmt.Fprintf(&b, "%s:%v ", v.Type().Field(i).Name, f.Interface())
	}
	return strings.TrimSpace(b.String())
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`domains = ["a.test"]`))
	f.Add([]byte("[[mailboxes]]\nname = \"a\"\nowner = \"0\"\n[mailboxes.send]\nper_hour = 1\n"))
	f.Add([]byte("[delivery]\nretry_for = \"1.5d\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			return
		}
		if c.SMTP.MaxRecipients < 1 || c.Paths.Socket == "" {
			t.Fatalf("accepted config with unusable values: %+v", c.SMTP)
		}
	})
}

// A key that differs from a known one only in case used to fill the same
// field as the real key, the winner depending on map order.
func TestParseRejectsCaseVariantKeys(t *testing.T) {
	for _, doc := range []string{
		"[SMTP]\nmax_recipients = 5\n",
		"[smtp]\nmax_recipients = 5\n[Smtp]\nmax_recipients = 7\n",
	} {
		_, err := Parse([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), "case-sensitive") {
			t.Errorf("%q: error %v, want a case-sensitivity error", doc, err)
		}
	}
}

// TestDNSResolverAndItsFormerName: [dns] resolver serves every lookup;
// [trust] resolver, its former name, is still read.
func TestDNSResolverAndItsFormerName(t *testing.T) {
	for text, want := range map[string]string{
		"[dns]\nresolver = \"127.0.0.1:5353\"\n":                                     "127.0.0.1:5353",
		"[trust]\nresolver = \"127.0.0.1:5354\"\n":                                   "127.0.0.1:5354",
		"[trust]\nresolver = \"127.0.0.1:53\"\n[dns]\nresolver = \"127.0.0.1:53\"\n": "127.0.0.1:53",
		"": "",
	} {
		c, err := Parse([]byte(text))
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		if c.DNS.Resolver != want {
			t.Errorf("%q: dns.resolver %q, want %q", text, c.DNS.Resolver, want)
		}
	}
}

// delivery.delay_warning defaults to four hours; "0s" turns the warnings off
// (a zero that is not the default).
func TestDelayWarningDefaultAndOff(t *testing.T) {
	c, err := Parse([]byte("domains = [\"a.test\"]\n"))
	if err != nil || c.Delivery.DelayWarning.Duration != 4*time.Hour {
		t.Fatalf("default: %v %v", c.Delivery.DelayWarning, err)
	}
	c, err = Parse([]byte("domains = [\"a.test\"]\n[delivery]\ndelay_warning = \"0s\"\n"))
	if err != nil || c.Delivery.DelayWarning.Duration != 0 {
		t.Fatalf("off: %v %v", c.Delivery.DelayWarning, err)
	}
}

// TestTrustDMARCKeys: enforcement is on unless turned off, and forwarders
// must be networks, addresses or domains, never every address.
func TestTrustDMARCKeys(t *testing.T) {
	c, err := Parse(nil)
	if err != nil || !*c.Trust.DMARCEnforce || len(c.Trust.Forwarders) != 0 {
		t.Fatalf("defaults: %v %+v", err, c.Trust)
	}
	c, err = Parse([]byte("[trust]\ndmarc_enforce = false\nforwarders = [\"192.0.2.0/24\", \"2001:db8::/32\", \"198.51.100.7\", \"lists.example.org\"]\n"))
	if err != nil || *c.Trust.DMARCEnforce || len(c.Trust.Forwarders) != 4 {
		t.Fatalf("set: %v %+v", err, c.Trust)
	}
	for _, bad := range []string{"0.0.0.0/0", "::/0", "::ffff:0.0.0.0/96", "localhost", "not a domain", "10.0.0.0/33"} {
		if _, err := Parse([]byte("[trust]\nforwarders = [\"" + bad + "\"]\n")); err == nil || !strings.Contains(err.Error(), "trust.forwarders") {
			t.Errorf("forwarders = [%q]: %v, want an error naming trust.forwarders", bad, err)
		}
	}
}

// TestDaysRoundTrip holds the day counts a duration may give to what they
// say, up to the last day a duration holds.
func TestDaysRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		text string
		want time.Duration
	}{
		{"0d", 0}, {"5d", 5 * 24 * time.Hour}, {"1.5d", 36 * time.Hour}, {"106751d", 106751 * 24 * time.Hour},
	} {
		var d Duration
		if err := d.UnmarshalText([]byte(tt.text)); err != nil || d.Duration != tt.want {
			t.Errorf("%q: %v, %v; want %v", tt.text, d.Duration, err, tt.want)
		}
	}
}

// TestZerosThatAreValues keeps the zeros the docs give a meaning of their
// own: no quota, no disk reserve, a folder kept forever, no delay warning,
// no pregreet wait.
func TestZerosThatAreValues(t *testing.T) {
	c, err := Parse([]byte("domains = [\"a.test\"]\n[storage]\nquota_bytes = 0\nquota_messages = 0\ndisk_reserve_bytes = 0\n" +
		"[storage.retention]\ntrash = \"0s\"\n[delivery]\ndelay_warning = \"0s\"\n[smtp]\npregreet_wait = \"0s\"\n" +
		"[[mailboxes]]\nname = \"a\"\nowner = \"root\"\nquota_bytes = 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if *c.Storage.DiskReserveBytes != 0 || c.Storage.Retention["trash"].Duration != 0 || c.Delivery.DelayWarning.Duration != 0 {
		t.Errorf("a zero that means none was replaced: reserve %d, trash %v, delay warning %v",
			*c.Storage.DiskReserveBytes, c.Storage.Retention["trash"], c.Delivery.DelayWarning)
	}
}

// The largest number a config takes, 2^50, is taken.
func TestLargestNumberIsTaken(t *testing.T) {
	c, err := Parse([]byte("domains = [\"a.test\"]\n[smtp]\nmax_message_bytes = 1125899906842624\n"))
	if err != nil || c.SMTP.MaxMessageBytes != 1<<50 {
		t.Fatalf("max_message_bytes = 2^50: %v", err)
	}
}

// TestIdempotencyWindowBounds: delivery.idempotency_window defaults to
// 30 days, or to retry_for when that is longer (a file that raised
// retry_for stays valid); one shorter than a day or than retry_for, or
// "0s", is refused with the key named.
func TestIdempotencyWindowBounds(t *testing.T) {
	for _, tc := range []struct {
		delivery string
		want     time.Duration
		err      string
	}{
		{"", 30 * 24 * time.Hour, ""},
		{"retry_for = \"40d\"\n", 40 * 24 * time.Hour, ""},
		{"idempotency_window = \"7d\"\n", 7 * 24 * time.Hour, ""},
		{"idempotency_window = \"12h\"\nretry_for = \"6h\"\n", 0, "delivery.idempotency_window: 12h0m0s is too short"},
		{"idempotency_window = \"2d\"\n", 0, "at least delivery.retry_for (120h0m0s)"},
		{"idempotency_window = \"0s\"\n", 0, "delivery.idempotency_window = \"0s\" is taken as the default"},
	} {
		c, err := Parse([]byte("domains = [\"a.test\"]\n[delivery]\n" + tc.delivery))
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: %v, want an error saying %q", tc.delivery, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.delivery, err)
		case tc.err == "" && c.Delivery.IdempotencyWindow.Duration != tc.want:
			t.Errorf("%q: idempotency_window %s, want %s", tc.delivery, c.Delivery.IdempotencyWindow.Duration, tc.want)
		}
	}
}
