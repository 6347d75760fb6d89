package outbound

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/protocol"
)

func ptrTo[T any](v T) *T { return &v }

func defaultPolicy() config.SendPolicy { return config.Default().Send }

func TestCheckPolicy(t *testing.T) {
	c := &Composed{Envelope: protocol.Envelope{MailFrom: "a@example.com", RcptTo: []string{"x@partner.test", "y@eu.partner.test", "boss@other.test"}}}
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
			err := CheckPolicy(p, c, tt.att, tt.size)
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
	evil := &Composed{Envelope: protocol.Envelope{RcptTo: []string{"x@evilpartner.test"}}}
	if protocol.CodeOf(CheckPolicy(p, evil, 0, 1)) != protocol.CodePolicyBlocked {
		t.Fatal("evilpartner.test matched partner.test")
	}
}

func TestRateLimiter(t *testing.T) {
	clk := newFakeClock()
	r := NewRateLimiter(clk.Now)
	p := config.SendPolicy{PerMinute: 2, PerHour: 3}
	for i := range 2 {
		if err := r.Allow("bot", p, 1); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		clk.Advance(10 * time.Second)
	}
	err := r.Allow("bot", p, 1)
	if protocol.CodeOf(err) != protocol.CodeRateLimited {
		t.Fatalf("third send in a minute: %v", err)
	}
	pe := err.(*protocol.Error)
	// The first send was 20s ago: the minute window frees in 40s.
	if pe.RetryAfterMS != 40_000 || !pe.Retryable {
		t.Fatalf("retry after %dms retryable=%v, want 40000ms", pe.RetryAfterMS, pe.Retryable)
	}
	if err := r.Allow("other", p, 1); err != nil {
		t.Fatalf("limits are per mailbox: %v", err)
	}
	clk.Advance(40 * time.Second)
	if err := r.Allow("bot", p, 1); err != nil {
		t.Fatalf("after the window: %v", err)
	}
	clk.Advance(2 * time.Minute)
	err = r.Allow("bot", p, 1)
	if protocol.CodeOf(err) != protocol.CodeRateLimited || !strings.Contains(err.Error(), "per_hour") {
		t.Fatalf("hour limit: %v", err)
	}
	// Sends at 0s, 10s and 60s; now is 180s: the hour frees when the first
	// one leaves it. The refused attempt at 20s does not count.
	if got := err.(*protocol.Error).RetryAfterMS; got != (time.Hour - 180*time.Second).Milliseconds() {
		t.Fatalf("retry after %dms, want %d", got, (time.Hour - 180*time.Second).Milliseconds())
	}
	clk.Advance(time.Hour)
	if err := r.Allow("bot", p, 1); err != nil {
		t.Fatalf("after an hour: %v", err)
	}
}

// svcWorld is a Service with a fake MX behind a real queue and deliverer.
type svcWorld struct {
	svc   *Service
	st    *memStore
	mx    *fakeMX
	clk   *fakeClock
	q     *Queue
	mu    sync.Mutex
	settl []protocol.SendResult
}

func newSvcWorld(t *testing.T) *svcWorld {
	w := newWorld(t)
	w.r.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	w.r.SetIP("mx.remote.test", "127.0.0.71")
	sw := &svcWorld{st: newMemStore(), mx: w.mx(t, "127.0.0.71", nil), clk: newFakeClock()}
	sw.svc = &Service{Domain: func() string { return "example.com" }, Keys: func() []*Key { return nil }, Store: sw.st,
		Limiter: NewRateLimiter(sw.clk.Now), Clock: sw.clk.Now, FirstAttemptWait: 5 * time.Second,
		OnSettled: func(_, _ string, r protocol.SendResult) { sw.mu.Lock(); sw.settl = append(sw.settl, r); sw.mu.Unlock() }}
	q, err := OpenQueue(t.TempDir(), w.d, sw.svc, QueueOptions{Clock: sw.clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	sw.svc.Queue, sw.q = q, q
	runQueue(t, q)
	return sw
}

func (sw *svcWorld) send(t *testing.T, p config.SendPolicy, a protocol.SendArgs) (protocol.SendResult, error) {
	t.Helper()
	return sw.svc.Send(context.Background(), SendRequest{Mailbox: "bot", FromAddress: "bot@example.com", FromName: "Bot", Policy: p, Args: a})
}

func TestServiceSendDeliversAndRecordsSentCopy(t *testing.T) {
	sw := newSvcWorld(t)
	sw.mx.setRcptErr("gone@remote.test", &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user"})
	res, err := sw.send(t, defaultPolicy(), protocol.SendArgs{To: []string{"bob@remote.test"}, Cc: []string{"gone@remote.test"}, Bcc: []string{"hidden@remote.test"}, Subject: "Hello", Body: "# Hi"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != "partial" || len(res.Recipients) != 3 || res.Envelope.MailFrom != "bot@example.com" {
		t.Fatalf("result %+v", res)
	}
	for _, r := range res.Recipients {
		want := StatusDelivered
		if r.Address == "gone@remote.test" {
			want = StatusFailed
		}
		if r.Status != want {
			t.Errorf("%s: %s, want %s", r.Address, r.Status, want)
		}
	}
	m, body, err := sw.st.Get("bot", "sent", res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Outbound || m.DeliveryStatus != "partial" || len(m.DeliveryDetails) != 3 || body != "# Hi" || len(m.Bcc) != 1 || m.ThreadID == "" {
		t.Fatalf("sent copy %+v body %q", m, body)
	}
	msgs := sw.mx.messages()
	if len(msgs) != 1 || bytes.Contains(msgs[0].Data, []byte("hidden@")) {
		t.Fatalf("MX got %d messages (Bcc must stay out of the data)", len(msgs))
	}
	if st, err := sw.svc.Status("bot", res.ID); err != nil || st.Status != "partial" {
		t.Fatalf("status after settling: %+v %v", st, err)
	}
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if len(sw.settl) != 1 || sw.settl[0].ID != res.ID {
		t.Fatalf("after_send notifications %+v", sw.settl)
	}
}

func TestServiceDryRun(t *testing.T) {
	sw := newSvcWorld(t)
	p := defaultPolicy()
	p.Enabled = ptrTo(false) // dry runs work even with sending off
	res, err := sw.send(t, p, protocol.SendArgs{To: []string{"bob@remote.test"}, Bcc: []string{"b2@remote.test"}, Subject: "x", Body: "y", DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != "dry_run" || res.SizeBytes == 0 || strings.Join(res.Envelope.RcptTo, ",") != "bob@remote.test,b2@remote.test" {
		t.Fatalf("dry run result %+v", res)
	}
	if len(sw.q.List()) != 0 || sw.st.count() != 0 || len(sw.mx.messages()) != 0 {
		t.Fatal("a dry run queued, stored or sent something")
	}
	if _, err := sw.send(t, p, protocol.SendArgs{To: []string{"bob@remote.test"}, Subject: "x", Body: "y"}); protocol.CodeOf(err) != protocol.CodePolicyBlocked {
		t.Fatalf("real send with sending off: %v", err)
	}
	p = defaultPolicy()
	p.DryRunOnly = ptrTo(true)
	if _, err := sw.send(t, p, protocol.SendArgs{To: []string{"bob@remote.test"}, Subject: "x", Body: "y"}); protocol.CodeOf(err) != protocol.CodePolicyBlocked {
		t.Fatalf("real send under dry_run_only: %v", err)
	}
}

func TestServiceAllowListAndRateLimit(t *testing.T) {
	sw := newSvcWorld(t)
	p := defaultPolicy()
	p.AllowDomains = []string{"remote.test"}
	_, err := sw.send(t, p, protocol.SendArgs{To: []string{"bob@remote.test"}, Bcc: []string{"spy@elsewhere.test"}, Subject: "x", Body: "y"})
	if protocol.CodeOf(err) != protocol.CodePolicyBlocked || !strings.Contains(err.Error(), "spy@elsewhere.test") {
		t.Fatalf("allow-list: %v", err)
	}
	p.PerMinute = 1
	if _, err := sw.send(t, p, protocol.SendArgs{To: []string{"bob@remote.test"}, Subject: "x", Body: "y"}); err != nil {
		t.Fatal(err)
	}
	_, err = sw.send(t, p, protocol.SendArgs{To: []string{"bob@remote.test"}, Subject: "x", Body: "y"})
	if pe, ok := err.(*protocol.Error); !ok || pe.Code != protocol.CodeRateLimited || pe.RetryAfterMS <= 0 {
		t.Fatalf("rate limit: %v", err)
	}
	if n := len(sw.mx.messages()); n != 1 {
		t.Fatalf("MX got %d messages, want 1", n)
	}
}

func TestServiceIdempotentRetry(t *testing.T) {
	sw := newSvcWorld(t)
	a := protocol.SendArgs{To: []string{"bob@remote.test"}, Subject: "once", Body: "y", IdempotencyKey: "req-42"}
	var wg sync.WaitGroup
	results := make([]protocol.SendResult, 3)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := sw.send(t, defaultPolicy(), a)
			if err != nil {
				t.Error(err)
			}
			results[i] = r
		}()
	}
	wg.Wait()
	dups := 0
	for _, r := range results {
		if r.ID != results[0].ID || r.MessageID != results[0].MessageID {
			t.Fatalf("retries produced different messages: %+v", results)
		}
		if r.Duplicate {
			dups++
		}
	}
	if dups != 2 {
		t.Fatalf("%d duplicates, want 2", dups)
	}
	if n := len(sw.mx.messages()); n != 1 {
		t.Fatalf("MX got %d messages, want 1", n)
	}
	// The key is per mailbox, and remembered by a new Service on the same queue.
	svc2 := &Service{Domain: sw.svc.Domain, Keys: sw.svc.Keys, Store: sw.st, Queue: sw.q, Clock: sw.clk.Now}
	r, err := svc2.Send(context.Background(), SendRequest{Mailbox: "bot", FromAddress: "bot@example.com", Policy: defaultPolicy(), Args: a})
	if err != nil || !r.Duplicate || r.ID != results[0].ID || r.Status != StatusDelivered {
		t.Fatalf("after restart: %+v %v", r, err)
	}
	r, err = svc2.Send(context.Background(), SendRequest{Mailbox: "other", FromAddress: "other@example.com", Policy: defaultPolicy(), Args: a})
	if err != nil || r.Duplicate {
		t.Fatalf("another mailbox with the same key: %+v %v", r, err)
	}
}

func TestServiceHeldUntilApproved(t *testing.T) {
	sw := newSvcWorld(t)
	p := defaultPolicy()
	p.Hold = ptrTo(true)
	res, err := sw.send(t, p, protocol.SendArgs{To: []string{"bob@remote.test"}, Subject: "needs approval", Body: "y"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != StatusHeld || res.Recipients[0].Status != StatusHeld {
		t.Fatalf("held send: %+v", res)
	}
	if m, _, _ := sw.st.Get("bot", "sent", res.ID); m.DeliveryStatus != StatusHeld {
		t.Fatalf("sent copy status %q", m.DeliveryStatus)
	}
	time.Sleep(30 * time.Millisecond)
	if len(sw.mx.messages()) != 0 {
		t.Fatal("held message was delivered")
	}
	if err := sw.q.Approve(QueueID("bot", res.ID)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(sw.mx.messages()) == 1 })
	waitFor(t, func() bool {
		m, _, _ := sw.st.Get("bot", "sent", res.ID)
		return m.DeliveryStatus == StatusDelivered && m.DeliveredAt != nil
	})
}

func TestServiceDSNMarksBounced(t *testing.T) {
	sw := newSvcWorld(t)
	res, err := sw.send(t, defaultPolicy(), protocol.SendArgs{To: []string{"bob@remote.test", "carol@remote.test"}, Subject: "x", Body: "y"})
	if err != nil || res.Status != StatusDelivered {
		t.Fatalf("%+v %v", res, err)
	}
	sw.svc.ApplyDSN("bot", "<"+res.MessageID+">", []DSNRecipient{{Address: "Carol@remote.test", Action: "failed", Status: "5.2.2", Diagnostic: "smtp; 552 mailbox full"}}, func(string) bool { return true })
	st, err := sw.svc.Status("bot", res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != "partial" {
		t.Fatalf("status %q, want partial", st.Status)
	}
	for _, r := range st.Recipients {
		if r.Address == "carol@remote.test" && (r.Status != StatusBounced || !strings.Contains(r.Detail, "mailbox full")) {
			t.Fatalf("carol: %+v", r)
		}
		if r.Address == "bob@remote.test" && r.Status != StatusDelivered {
			t.Fatalf("bob: %+v", r)
		}
	}
}

func TestServiceSendRefusesBadInput(t *testing.T) {
	sw := newSvcWorld(t)
	_, err := sw.send(t, defaultPolicy(), protocol.SendArgs{To: []string{"bob@remote.test"}, Subject: "x\r\nBcc: evil@attacker.test", Body: "y"})
	if protocol.CodeOf(err) != protocol.CodeInvalidInput {
		t.Fatalf("header injection: %v", err)
	}
	if sw.st.count() != 0 {
		t.Fatal("stored a refused message")
	}
}
