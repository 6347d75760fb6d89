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
	"github.com/mailctl/mailctl/daemon/outbound/policy"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/internal/fakemx"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// svcWorld is a Service with a fake MX behind a real queue and deliverer.
type svcWorld struct {
	svc   *Service
	st    *memStore
	mx    *fakemx.Server
	clk   *testclock.Clock
	q     *queue.Queue
	mu    sync.Mutex
	settl []protocol.SendResult
}

func newSvcWorld(t *testing.T) *svcWorld {
	w := newWorld(t)
	w.r.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	w.r.SetIP("mx.remote.test", "127.0.0.71")
	sw := &svcWorld{st: newMemStore(), mx: w.mx(t, "127.0.0.71"), clk: testclock.New()}
	rec := &Recorder{Store: sw.st, Clock: sw.clk.Now,
		OnSettled: func(_, _, _ string, r protocol.SendResult) {
			sw.mu.Lock()
			sw.settl = append(sw.settl, r)
			sw.mu.Unlock()
		}}
	sw.svc = w.pipeline(t, rec, &Service{Limiter: policy.NewRateLimiter(sw.clk.Now), FirstAttemptWait: 5 * time.Second}, queue.Options{Clock: sw.clk.Now})
	sw.q = sw.svc.Queue
	return sw
}

func (sw *svcWorld) send(t *testing.T, p config.SendPolicy, a protocol.SendArgs) (protocol.SendResult, error) {
	t.Helper()
	return sw.svc.Send(context.Background(), SendRequest{Mailbox: "bot", FromAddress: "bot@example.com", FromName: "Bot", Policy: p, Args: a})
}

func TestServiceSendDeliversAndRecordsSentCopy(t *testing.T) {
	sw := newSvcWorld(t)
	sw.mx.SetRcptErr("gone@remote.test", &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user"})
	res, err := sw.send(t, defaultPolicy(), protocol.SendArgs{To: []string{"bob@remote.test"}, Cc: []string{"gone@remote.test"}, Bcc: []string{"hidden@remote.test"}, Subject: "Hello", Body: "# Hi"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != "partial" || len(res.Recipients) != 3 || res.Envelope.MailFrom != "bot@example.com" {
		t.Fatalf("result %+v", res)
	}
	for _, r := range res.Recipients {
		want := queue.StatusDelivered
		if r.Address == "gone@remote.test" {
			want = queue.StatusFailed
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
	msgs := sw.mx.Messages()
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
	if len(sw.q.List()) != 0 || sw.st.count() != 0 || len(sw.mx.Messages()) != 0 {
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
	if n := len(sw.mx.Messages()); n != 1 {
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
	if n := len(sw.mx.Messages()); n != 1 {
		t.Fatalf("MX got %d messages, want 1", n)
	}
	// The key is per mailbox, and remembered by a new Service on the same queue.
	svc2 := &Service{Domain: sw.svc.Domain, Keys: sw.svc.Keys, Sent: sw.svc.Sent, Queue: sw.q}
	r, err := svc2.Send(context.Background(), SendRequest{Mailbox: "bot", FromAddress: "bot@example.com", Policy: defaultPolicy(), Args: a})
	if err != nil || !r.Duplicate || r.ID != results[0].ID || r.Status != queue.StatusDelivered {
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
	if res.Status != queue.StatusHeld || res.Recipients[0].Status != queue.StatusHeld {
		t.Fatalf("held send: %+v", res)
	}
	if m, _, _ := sw.st.Get("bot", "sent", res.ID); m.DeliveryStatus != queue.StatusHeld {
		t.Fatalf("sent copy status %q", m.DeliveryStatus)
	}
	// That the queue's loop passes over a held item is the queue's test;
	// here, the send queued it held.
	if it, err := sw.q.Get(QueueID("bot", res.ID)); err != nil || !it.Held || it.InFlight || it.Attempts != 0 {
		t.Fatalf("the held send's queue item: %+v (%v), want held and never attempted", it, err)
	}
	if len(sw.mx.Messages()) != 0 {
		t.Fatal("held message was delivered")
	}
	if err := sw.q.Approve(QueueID("bot", res.ID)); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the MX to take the message", func() bool { return len(sw.mx.Messages()) == 1 })
	testwait.For(t, "the sent copy marked delivered", func() bool {
		m, _, _ := sw.st.Get("bot", "sent", res.ID)
		return m.DeliveryStatus == queue.StatusDelivered && m.DeliveredAt != nil
	})
}

func TestServiceDSNMarksBounced(t *testing.T) {
	sw := newSvcWorld(t)
	res, err := sw.send(t, defaultPolicy(), protocol.SendArgs{To: []string{"bob@remote.test", "carol@remote.test"}, Subject: "x", Body: "y"})
	if err != nil || res.Status != queue.StatusDelivered {
		t.Fatalf("%+v %v", res, err)
	}
	sw.svc.ApplyDSN("bot", Report{OriginalMessageID: "<" + res.MessageID + ">", Recipients: []DSNRecipient{{Address: "Carol@remote.test", Action: "failed", Status: "5.2.2", Diagnostic: "smtp; 552 mailbox full"}}}, func(string) bool { return true })
	st, err := sw.svc.Status("bot", res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != "partial" {
		t.Fatalf("status %q, want partial", st.Status)
	}
	for _, r := range st.Recipients {
		if r.Address == "carol@remote.test" && (r.Status != queue.StatusBounced || !strings.Contains(r.Detail, "mailbox full")) {
			t.Fatalf("carol: %+v", r)
		}
		if r.Address == "bob@remote.test" && r.Status != queue.StatusDelivered {
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
