package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/protocol"
)

// TestCheckLimitBoundaries: each size and count limit admits a message at
// exactly the limit and refuses one unit more, naming the setting; a limit
// left at zero imposes nothing. An agent told "max_recipients = 50" must be
// able to send to 50.
func TestCheckLimitBoundaries(t *testing.T) {
	rcpts := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = "r" + strings.Repeat("x", i) + "@partner.test"
		}
		return out
	}
	type send struct {
		rcpts, atts int
		attBytes    int64
		size        int
	}
	base := send{rcpts: 1, atts: 1, attBytes: 10, size: 1000}
	tests := []struct {
		name    string
		policy  config.SendPolicy
		at, out send   // exactly at the limit, one unit over it
		code    string // of the refusal
		key     string // the setting the refusal names
	}{
		{"max_recipients", config.SendPolicy{MaxRecipients: 3},
			send{3, 1, 10, 1000}, send{4, 1, 10, 1000}, protocol.CodeInvalidInput, "send.max_recipients"},
		{"max_attachments", config.SendPolicy{MaxAttachments: 3},
			send{1, 3, 10, 1000}, send{1, 4, 10, 1000}, protocol.CodeTooLarge, "send.max_attachments"},
		{"max_attachment_bytes", config.SendPolicy{MaxAttachmentBytes: 500},
			send{1, 1, 500, 1000}, send{1, 1, 501, 1000}, protocol.CodeTooLarge, "send.max_attachment_bytes"},
		{"max_message_bytes", config.SendPolicy{MaxMessageBytes: 1000},
			send{1, 1, 10, 1000}, send{1, 1, 10, 1001}, protocol.CodeTooLarge, "send.max_message_bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := Check(tc.policy, rcpts(tc.at.rcpts), tc.at.atts, tc.at.attBytes, tc.at.size); err != nil {
				t.Errorf("exactly at the limit: %v, want allowed", err)
			}
			err := Check(tc.policy, rcpts(tc.out.rcpts), tc.out.atts, tc.out.attBytes, tc.out.size)
			if protocol.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.key) {
				t.Errorf("one over the limit: %v, want %s naming %s", err, tc.code, tc.key)
			}
		})
	}
	// Zero limits (a policy built in code rather than loaded, where the
	// defaults apply) limit nothing, even a message with every count above
	// zero.
	big := send{rcpts: 200, atts: 200, attBytes: 1 << 30, size: 1 << 30}
	if err := Check(config.SendPolicy{}, rcpts(big.rcpts), big.atts, big.attBytes, big.size); err != nil {
		t.Errorf("a policy without limits refused: %v", err)
	}
	if err := Check(config.SendPolicy{}, rcpts(base.rcpts), base.atts, base.attBytes, base.size); err != nil {
		t.Errorf("a policy without limits refused a small message: %v", err)
	}
}

// TestAllowListRefusesAddressWithoutLocalPart: "@partner.test" is not an
// address at partner.test; an allow-list never admits it.
func TestAllowListRefusesAddressWithoutLocalPart(t *testing.T) {
	p := config.SendPolicy{AllowDomains: []string{"partner.test"}}
	if err := Check(p, []string{"x@partner.test"}, 0, 0, 1); err != nil {
		t.Fatalf("x@partner.test: %v", err)
	}
	for _, r := range []string{"@partner.test", "partner.test"} {
		if err := Check(p, []string{r}, 0, 0, 1); protocol.CodeOf(err) != protocol.CodePolicyBlocked {
			t.Errorf("%q: %v, want policy_blocked", r, err)
		}
	}
}

// TestAllowCountsEachSend: a request for n sends uses n places in every
// window, and a request for zero (or fewer) counts as one.
func TestAllowCountsEachSend(t *testing.T) {
	clk := testclock.New()
	r := NewRateLimiter(clk.Now)
	p := config.SendPolicy{PerMinute: 5}
	if err := r.Allow("bot", 0, p, 3); err != nil {
		t.Fatal(err)
	}
	if got := r.Usage("bot", 0, p)[0]; got.Used != 3 || got.Remaining != 2 {
		t.Fatalf("after sending 3: %+v, want 3 used, 2 left", got)
	}
	for _, n := range []int{0, -4} {
		if err := r.Allow("bot", 0, p, n); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.Usage("bot", 0, p)[0]; got.Used != 5 || got.Remaining != 0 {
		t.Fatalf("after two more sends of n <= 0: %+v, want 5 used", got)
	}
	if err := r.Allow("bot", 0, p, 0); protocol.CodeOf(err) != protocol.CodeRateLimited {
		t.Fatalf("a sixth send in the minute: %v, want rate_limited", err)
	}
}

// TestRateLimitTieNamesShorterWindow: when two windows free up at the same
// moment the refusal names the shorter one, checked first, so the message
// does not change between two equal answers from one call to the next.
func TestRateLimitTieNamesShorterWindow(t *testing.T) {
	clk := testclock.New()
	r := NewRateLimiter(clk.Now)
	p := config.SendPolicy{PerMinute: 1, PerHour: 2}
	if err := r.Allow("bot", 0, p, 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(59 * time.Minute)
	if err := r.Allow("bot", 0, p, 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second)
	// The minute frees when the second send is a minute old, the hour when
	// the first is an hour old: both in 50s.
	err := r.Allow("bot", 0, p, 1)
	pe, ok := err.(*protocol.Error)
	if !ok || pe.Code != protocol.CodeRateLimited || pe.RetryAfterMS != 50_000 {
		t.Fatalf("third send: %v, want rate_limited for 50s", err)
	}
	if !strings.Contains(err.Error(), "(send.per_minute)") {
		t.Errorf("tie named %q, want send.per_minute", err)
	}
}
