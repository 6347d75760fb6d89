package policy

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/protocol"
)

func ptrTo[T any](v T) *T { return &v }

func defaultPolicy() config.SendPolicy { return config.Default().Send }

func TestCheckPolicy(t *testing.T) {
	rcpts := []string{"x@partner.test", "y@eu.partner.test", "boss@other.test"}
	tests := []struct {
		name   string
		mutate func(p *config.SendPolicy)
		att    int64
		size   int
		code   string
		inMsg  string
	}{
		{"defaults allow", func(*config.SendPolicy) {}, 0, 1000, "", ""},
		{"disabled", func(p *config.SendPolicy) { p.Enabled = ptrTo(false) }, 0, 1000, protocol.CodePolicyBlocked, "disabled"},
		{"domain allow-list blocks and names the recipient", func(p *config.SendPolicy) { p.AllowDomains = []string{"partner.test"} }, 0, 1000, protocol.CodePolicyBlocked, "boss@other.test"},
		{"domain plus address allow-list", func(p *config.SendPolicy) {
			p.AllowDomains = []string{"partner.test"}
			p.AllowAddresses = []string{"BOSS@other.test"}
		}, 0, 1000, "", ""},
		{"too many recipients", func(p *config.SendPolicy) { p.MaxRecipients = 2 }, 0, 1000, protocol.CodeInvalidInput, "3 recipients"},
		{"message too large", func(p *config.SendPolicy) { p.MaxMessageBytes = 999 }, 0, 1000, protocol.CodeTooLarge, "1000 bytes"},
		{"attachments too large", func(p *config.SendPolicy) { p.MaxAttachmentBytes = 10 }, 11, 1000, protocol.CodeTooLarge, "attachments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := defaultPolicy()
			tt.mutate(&p)
			err := Check(p, rcpts, 1, tt.att, tt.size)
			if protocol.CodeOf(err) != tt.code {
				t.Fatalf("got %v, want code %q", err, tt.code)
			}
			if err != nil && !strings.Contains(err.Error(), tt.inMsg) {
				t.Fatalf("message %q lacks %q", err, tt.inMsg)
			}
		})
	}
	// A suffix that is not a subdomain must not match.
	p := defaultPolicy()
	p.AllowDomains = []string{"partner.test"}
	if protocol.CodeOf(Check(p, []string{"x@evilpartner.test"}, 0, 0, 1)) != protocol.CodePolicyBlocked {
		t.Fatal("evilpartner.test matched partner.test")
	}
}

// The number of attachments is limited beside their bytes: 20 by default,
// and the error names the limit and the setting.
func TestCheckAttachmentCount(t *testing.T) {
	p := defaultPolicy()
	if p.MaxAttachments != 20 {
		t.Fatalf("default max_attachments %d, want 20", p.MaxAttachments)
	}
	rcpt := []string{"x@partner.test"}
	if err := Check(p, rcpt, 20, 100, 1000); err != nil {
		t.Fatalf("20 attachments: %v", err)
	}
	err := Check(p, rcpt, 21, 100, 1000)
	if protocol.CodeOf(err) != protocol.CodeTooLarge || !strings.Contains(err.Error(), "21 attachments") ||
		!strings.Contains(err.Error(), "limit of 20") || !strings.Contains(err.Error(), "send.max_attachments") {
		t.Fatalf("21 attachments: %v", err)
	}
	p.MaxAttachments = 1
	if err := Check(p, rcpt, 2, 100, 1000); protocol.CodeOf(err) != protocol.CodeTooLarge {
		t.Fatalf("2 attachments over a limit of 1: %v", err)
	}
}

func TestRateLimiter(t *testing.T) {
	clk := testclock.New()
	r := NewRateLimiter(clk.Now)
	p := config.SendPolicy{PerMinute: 2, PerHour: 3}
	for i := range 2 {
		if err := r.Allow("bot", 0, p, 1); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		clk.Advance(10 * time.Second)
	}
	err := r.Allow("bot", 0, p, 1)
	if protocol.CodeOf(err) != protocol.CodeRateLimited {
		t.Fatalf("third send in a minute: %v", err)
	}
	pe := err.(*protocol.Error)
	// The first send was 20s ago: the minute window frees in 40s.
	if pe.RetryAfterMS != 40_000 || !pe.Retryable {
		t.Fatalf("retry after %dms retryable=%v, want 40000ms", pe.RetryAfterMS, pe.Retryable)
	}
	if err := r.Allow("other", 0, p, 1); err != nil {
		t.Fatalf("limits are per mailbox: %v", err)
	}
	clk.Advance(40 * time.Second)
	if err := r.Allow("bot", 0, p, 1); err != nil {
		t.Fatalf("after the window: %v", err)
	}
	clk.Advance(2 * time.Minute)
	err = r.Allow("bot", 0, p, 1)
	if protocol.CodeOf(err) != protocol.CodeRateLimited || !strings.Contains(err.Error(), "per_hour") {
		t.Fatalf("hour limit: %v", err)
	}
	// Sends at 0s, 10s and 60s; now is 180s: the hour frees when the first
	// one leaves it. The refused attempt at 20s does not count.
	if got := err.(*protocol.Error).RetryAfterMS; got != (time.Hour - 180*time.Second).Milliseconds() {
		t.Fatalf("retry after %dms, want %d", got, (time.Hour - 180*time.Second).Milliseconds())
	}
	clk.Advance(time.Hour)
	if err := r.Allow("bot", 0, p, 1); err != nil {
		t.Fatalf("after an hour: %v", err)
	}
}

// Usage shows what Allow would decide: the sends in each limited window and
// when the next one fits, agreeing with a refusal's RetryAfterMS.
func TestRateLimiterUsage(t *testing.T) {
	clk := testclock.New()
	r := NewRateLimiter(clk.Now)
	p := config.SendPolicy{PerMinute: 2, PerDay: 10}
	want := []protocol.SendRate{{Window: "minute", Limit: 2, Remaining: 2}, {Window: "day", Limit: 10, Remaining: 10}}
	if got := r.Usage("bot", 0, p); !slices.Equal(got, want) {
		t.Fatalf("unused: %+v, want %+v", got, want)
	}
	r.Allow("bot", 0, p, 1)
	clk.Advance(20 * time.Second)
	r.Allow("bot", 0, p, 1)
	want = []protocol.SendRate{{Window: "minute", Limit: 2, Used: 2, NextFreeMS: 40_000}, {Window: "day", Limit: 10, Used: 2, Remaining: 8}}
	if got := r.Usage("bot", 0, p); !slices.Equal(got, want) {
		t.Fatalf("full minute: %+v, want %+v", got, want)
	}
	if err := r.Allow("bot", 0, p, 1); err.(*protocol.Error).RetryAfterMS != 40_000 {
		t.Fatalf("Allow disagrees with Usage: %v", err)
	}
	clk.Advance(40 * time.Second)
	if got := r.Usage("bot", 0, p)[0]; got != (protocol.SendRate{Window: "minute", Limit: 2, Used: 1, Remaining: 1}) {
		t.Fatalf("after the first send left the minute: %+v", got)
	}
	if got := r.Usage("bot", 0, config.SendPolicy{}); len(got) != 0 {
		t.Fatalf("no limits: %+v, want none", got)
	}
}
