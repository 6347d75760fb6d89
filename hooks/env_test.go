package hooks

import (
	"errors"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mailctl/mailctl/protocol"
)

// envKeys lists the documented variables of each event, in order.
var (
	baseKeys    = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG"}
	receiveKeys = []string{"MAILCTL_EVENT", "MAILCTL_HOOK", "MAILCTL_MAILBOX", "MAILCTL_ID", "MAILCTL_FILE", "MAILCTL_FROM", "MAILCTL_TO", "MAILCTL_SUBJECT", "MAILCTL_MESSAGE_ID", "MAILCTL_THREAD_ID", "MAILCTL_TRUSTED", "MAILCTL_DKIM", "MAILCTL_SPF", "MAILCTL_DMARC"}
	sendKeys    = append(slices.Clone(receiveKeys), "MAILCTL_SEND_STATUS", "MAILCTL_RECIPIENTS")
)

func envMap(t *testing.T, env []string) (map[string]string, []string) {
	t.Helper()
	m := map[string]string{}
	var keys []string
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("env entry %q has no '='", kv)
		}
		if _, dup := m[k]; dup {
			t.Fatalf("env has %s twice", k)
		}
		m[k] = v
		keys = append(keys, k)
	}
	return m, keys
}

var testOwner = Owner{UID: 1000, GID: 1000, Name: "agent", Home: "/home/agent", Shell: "/bin/bash"}

func TestEnvReceive(t *testing.T) {
	h := protocol.Hook{Name: "wake", Mailbox: "agent", Event: "on_receive"}
	f := Facts{
		Event: "on_receive", Mailbox: "agent", ID: "20260101T000000-hello", File: "/var/lib/mailctl/mailboxes/agent/inbox/x.md",
		From: "Alice <alice@example.com>", To: []string{"agent@example.org", "b@example.org"},
		Subject: "hi\r\nX-Injected: 1\x00end", MessageID: "<m1@example.com>", ThreadID: "0123456789abcdef",
		Trusted: "true", DKIM: "pass:example.com", SPF: "pass:example.com", DMARC: "pass:example.com",
		AutoSubmitted: "no", ListID: "", SendStatus: "ignored", Recipients: []protocol.RecipientStatus{{Address: "x@y", Status: "delivered"}},
	}
	m, keys := envMap(t, Env(h, f, testOwner))
	if want := append(slices.Clone(baseKeys), receiveKeys...); !slices.Equal(keys, want) {
		t.Fatalf("keys = %v\nwant %v", keys, want)
	}
	want := map[string]string{
		"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/agent", "USER": "agent", "LOGNAME": "agent",
		"SHELL": "/bin/bash", "LANG": "C.UTF-8",
		"MAILCTL_EVENT": "on_receive", "MAILCTL_HOOK": "wake", "MAILCTL_MAILBOX": "agent",
		"MAILCTL_ID": f.ID, "MAILCTL_FILE": f.File, "MAILCTL_FROM": f.From,
		"MAILCTL_TO": "agent@example.org,b@example.org", "MAILCTL_SUBJECT": "hi  X-Injected: 1 end",
		"MAILCTL_MESSAGE_ID": "<m1@example.com>", "MAILCTL_THREAD_ID": "0123456789abcdef",
		"MAILCTL_TRUSTED": "true", "MAILCTL_DKIM": "pass:example.com", "MAILCTL_SPF": "pass:example.com", "MAILCTL_DMARC": "pass:example.com",
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %q, want %q", k, m[k], v)
		}
	}
}

func TestEnvAfterSend(t *testing.T) {
	h := protocol.Hook{Name: "sent", Mailbox: "agent", Event: "after_send"}
	f := Facts{
		Event: "after_send", Mailbox: "agent", SendStatus: "partial",
		Recipients: []protocol.RecipientStatus{
			{Address: "a@x", Status: "delivered", Code: 250},
			{Address: "b@y", Status: "failed", Code: 550, Detail: "5.1.1 no such user; go away\r\n"},
			{Address: "c@z", Status: "deferred"},
		},
	}
	o := testOwner
	o.Shell = ""
	o.Home = ""
	m, keys := envMap(t, Env(h, f, o))
	want := []string{"PATH", "HOME", "USER", "LOGNAME", "LANG"}
	if want = append(want, sendKeys...); !slices.Equal(keys, want) {
		t.Fatalf("keys = %v\nwant %v", keys, want)
	}
	if m["HOME"] != "/" {
		t.Errorf("HOME = %q, want / when the owner has none", m["HOME"])
	}
	if got, want := m["MAILCTL_RECIPIENTS"], "a@x=delivered:250;b@y=failed:550 5.1.1 no such user, go away  ;c@z=deferred"; got != want {
		t.Errorf("MAILCTL_RECIPIENTS = %q, want %q", got, want)
	}
	if m["MAILCTL_SEND_STATUS"] != "partial" {
		t.Errorf("MAILCTL_SEND_STATUS = %q", m["MAILCTL_SEND_STATUS"])
	}
}

func TestEnvBoundsAndSanitizes(t *testing.T) {
	var to []string
	for i := 0; i < 1000; i++ {
		to = append(to, "user"+strconv.Itoa(i)+"@example.org")
	}
	f := Facts{
		Event:   "on_receive",
		Subject: strings.Repeat("é", 2000), // 4000 bytes, cut inside a rune would be invalid
		From:    "a\x00b\x1bc\x7fd\xffe",
		To:      to,
	}
	m, _ := envMap(t, Env(protocol.Hook{Event: "on_receive"}, f, testOwner))
	if s := m["MAILCTL_SUBJECT"]; len(s) > MaxEnvValue || !utf8.ValidString(s) || len(s) < MaxEnvValue-1 {
		t.Errorf("subject: %d bytes, valid UTF-8 %v", len(s), utf8.ValidString(s))
	}
	if got, want := m["MAILCTL_FROM"], "a b c d\uFFFDe"; got != want {
		t.Errorf("MAILCTL_FROM = %q, want %q", got, want)
	}
	toVal := m["MAILCTL_TO"]
	if len(toVal) > MaxEnvListValue {
		t.Errorf("MAILCTL_TO is %d bytes, bound %d", len(toVal), MaxEnvListValue)
	}
	for _, a := range strings.Split(toVal, ",") {
		if !slices.Contains(to, a) {
			t.Fatalf("MAILCTL_TO holds a cut address %q", a)
		}
	}
	for k, v := range m {
		if strings.ContainsAny(v, "\r\n\x00") {
			t.Errorf("%s holds CR, LF or NUL: %q", k, v)
		}
	}
}

func TestLookupOwner(t *testing.T) {
	if _, err := LookupOwner(0); !errors.Is(err, ErrRootOwner) {
		t.Errorf("LookupOwner(0) = %v, want ErrRootOwner", err)
	}
	if _, err := LookupOwner(unknownUID(t)); err == nil || !strings.Contains(err.Error(), "has no account") {
		t.Errorf("LookupOwner(unknown) = %v, want 'has no account'", err)
	}
	if isRoot() {
		u := newTestUser(t)
		if u.Name == "" || u.Home != u.Dir || u.Shell != "/usr/sbin/nologin" {
			t.Errorf("owner = %+v, want name, home %s, shell /usr/sbin/nologin", u.Owner, u.Dir)
		}
		if !slices.Contains(u.Groups, u.SuppGID) {
			t.Errorf("groups %v lack the supplementary group %d", u.Groups, u.SuppGID)
		}
		return
	}
	self, err := LookupOwner(uint32(os.Getuid()))
	if err != nil {
		t.Fatalf("LookupOwner(self): %v", err)
	}
	if self.UID != uint32(os.Getuid()) || self.GID != uint32(os.Getgid()) || self.Name == "" {
		t.Errorf("LookupOwner(self) = %+v", self)
	}
}

// unknownUID finds a uid with no account.
func unknownUID(t *testing.T) uint32 {
	for uid := uint32(3999999999); uid > 3999990000; uid-- {
		if _, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err != nil {
			return uid
		}
	}
	t.Fatal("no free uid found")
	return 0
}

// Regression: a queue detail that already starts with the reply code was
// shown as "451 451 4.4.3 …".
func TestRecipientsValueCodeNotRepeated(t *testing.T) {
	got := RecipientsValue([]protocol.RecipientStatus{{Address: "a@x", Status: "deferred", Code: 451, Detail: "451 4.4.3 DNS lookup failed"}})
	if want := "a@x=deferred:451 4.4.3 DNS lookup failed"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestEnvValueBounds: a value of exactly the bound is passed whole; a longer
// one is cut at the bound, or before it when the bound falls inside a
// character, never inside one.
func TestEnvValueBounds(t *testing.T) {
	euro := "€" // 3 bytes
	tests := []struct {
		name, in, want string
	}{
		{"exactly the bound", strings.Repeat("s", MaxEnvValue), strings.Repeat("s", MaxEnvValue)},
		{"one byte over", strings.Repeat("s", MaxEnvValue+1), strings.Repeat("s", MaxEnvValue)},
		{"bound at a character's start", "a" + strings.Repeat(euro, 400), "a" + strings.Repeat(euro, 341)},
		{"bound after a character's first byte", strings.Repeat(euro, 400), strings.Repeat(euro, 341)},
		{"bound after a character's second byte", "ab" + strings.Repeat(euro, 400), "ab" + strings.Repeat(euro, 340)},
	}
	for _, tc := range tests {
		f := Facts{Event: "on_receive", Subject: tc.in}
		m, _ := envMap(t, Env(protocol.Hook{Event: "on_receive"}, f, testOwner))
		if got := m["MAILCTL_SUBJECT"]; got != tc.want {
			t.Errorf("%s: MAILCTL_SUBJECT is %d bytes (valid UTF-8 %v), want %d", tc.name, len(got), utf8.ValidString(got), len(tc.want))
		}
	}
	if got := truncateUTF8(euro+euro, 4); got != euro {
		t.Errorf("truncateUTF8(€€, 4) = %q, want €", got)
	}
	if got := truncateUTF8(euro, 2); got != "" {
		t.Errorf("truncateUTF8(€, 2) = %q, want nothing", got)
	}
}

// TestEnvListBound: a list that fits exactly is passed whole; one byte more
// drops the last item.
func TestEnvListBound(t *testing.T) {
	item := strings.Repeat("x", 99) + "@" // 100 bytes; 40 of them and 39 commas fill 4039 bytes
	var to []string
	for range 40 {
		to = append(to, item)
	}
	last := strings.Repeat("y", MaxEnvListValue-(40*100+40)) // makes the list exactly MaxEnvListValue
	full := append(slices.Clone(to), last)
	if got := joinList(full, ",", MaxEnvListValue); len(got) != MaxEnvListValue || !strings.HasSuffix(got, ","+last) {
		t.Errorf("a list of exactly %d bytes became %d bytes", MaxEnvListValue, len(got))
	}
	over := append(slices.Clone(to), last+"y")
	if got := joinList(over, ",", MaxEnvListValue); got != strings.Join(to, ",") {
		t.Errorf("a list one byte over kept %d bytes, want its last item dropped", len(got))
	}
}

// TestEnvReplacesEveryControl: C0, DEL and C1 controls (U+0085 NEXT LINE is
// a line break to some programs) become spaces; the printable character
// right after the C1 range stays.
func TestEnvReplacesEveryControl(t *testing.T) {
	f := Facts{Event: "on_receive", Subject: "a\u0085b\u009bc\u0080d\x7fe\x1ff\u00a0g h"}
	m, _ := envMap(t, Env(protocol.Hook{Event: "on_receive"}, f, testOwner))
	if got, want := m["MAILCTL_SUBJECT"], "a b c d e f\u00a0g h"; got != want {
		t.Errorf("MAILCTL_SUBJECT = %q, want %q", got, want)
	}
}
