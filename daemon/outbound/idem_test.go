package outbound

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/delivery"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// captureAll takes every recipient into a local mailbox instead of sending,
// as `mailctl dev` does.
type captureAll struct{}

func (captureAll) Deliver(_ context.Context, _ string, rcpts []string, _ []byte) []delivery.Result {
	out := make([]delivery.Result, len(rcpts))
	for i, r := range rcpts {
		out[i] = delivery.Result{Rcpt: r, Host: "local", Captured: "captured"}
	}
	return out
}

// tagged stands for the bounce key's return path: the tag names the
// mailbox identity and the sent id.
func tagged(from, mailboxID, sentID string) string {
	local, domain, _ := strings.Cut(from, "@")
	return local + "+bounce-" + mailboxID + "-" + sentID + "@" + domain
}

// asJSON is a send result as the caller reads it, without the duplicate
// flag.
func asJSON(t *testing.T, res protocol.SendResult) string {
	t.Helper()
	res.Duplicate = false
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDuplicateAnswersAsTheFirstCall: a repeated send with the same
// idempotency key, once the message's attempt has settled and its answer
// comes from the sent copy, says what the queue said: the envelope sender
// is the message's return path (not the From address), captured
// recipients are still captured, and a scheduled send keeps its send_at.
// A sent copy written before it recorded these (an older release's) still
// answers with the return path and the capture.
func TestDuplicateAnswersAsTheFirstCall(t *testing.T) {
	st := botStore(t)
	clk := testclock.New()
	settled := make(chan protocol.SendResult, 4)
	rec := &Recorder{Store: st, Clock: clk.Now, CurrentID: func(string) string { return "mb1" },
		OnSettled: func(_, _, _ string, res protocol.SendResult) { settled <- res }}
	q, err := queue.Open(t.TempDir(), captureAll{}, rec, queue.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	runQueue(t, q)
	svc := &Service{Domain: func() string { return "example.com" }, Sent: rec, Queue: q, FirstAttemptWait: 10 * time.Second, ReturnPath: tagged}
	send := func(a protocol.SendArgs) protocol.SendResult {
		t.Helper()
		res, err := svc.Send(context.Background(), SendRequest{Mailbox: "bot", MailboxID: "mb1", FromAddress: "bot@example.com", Policy: defaultPolicy(), Args: a})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	compare := func(what string, want, got protocol.SendResult) {
		t.Helper()
		if w, g := asJSON(t, want), asJSON(t, got); w != g {
			t.Errorf("%s: -want +got\n-%s\n+%s", what, w, g)
		}
	}

	now := protocol.SendArgs{To: []string{"bob@remote.test", "carol@remote.test"}, Subject: "now", Body: "b", IdempotencyKey: "k-now"}
	first := send(now)
	testwait.Recv(t, "the send to settle", settled)
	if first.Status != queue.StatusDelivered || first.Envelope.MailFrom != tagged("bot@example.com", "mb1", first.ID) || !first.Recipients[0].Captured {
		t.Fatalf("first answer: %s", asJSON(t, first))
	}
	again := send(now)
	if !again.Duplicate {
		t.Fatalf("the repeat is not a duplicate: %s", asJSON(t, again))
	}
	compare("the repeat of a delivered send", first, again)

	at := clk.Now().Add(time.Hour)
	later := protocol.SendArgs{To: []string{"bob@remote.test"}, Subject: "later", Body: "b", IdempotencyKey: "k-later", SendAt: &at}
	if res := send(later); res.Status != "scheduled" || res.SendAt == nil || !res.SendAt.Equal(at) {
		t.Fatalf("scheduled answer: %s", asJSON(t, res))
	}
	clk.Advance(time.Hour)
	q.Kick()
	out := testwait.Recv(t, "the scheduled send to settle once due", settled)
	if out.Status != queue.StatusDelivered || out.SendAt == nil {
		t.Fatalf("the queue's answer once the scheduled send went: %s", asJSON(t, out))
	}
	compare("the repeat of a scheduled send that went", out, send(later))

	// An older release's sent copy has none of these fields.
	if err := st.Update("bot", protocol.FolderSent, first.ID, func(m *store.Message) error {
		m.MailFrom = ""
		for i := range m.DeliveryDetails {
			m.DeliveryDetails[i].Captured = false
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	compare("the repeat answered from an older sent copy", first, send(now))
}

// TestSendFromADeletedMailboxIsNotQueued: the mailbox is deleted (and its
// queued mail dropped) between the caller's access check and the moment
// the message is queued. The send answers that the mailbox is gone and its
// message does not stay in the queue, to go out after the delete.
func TestSendFromADeletedMailboxIsNotQueued(t *testing.T) {
	st := botStore(t)
	clk := testclock.New()
	// The mailbox named bot now is not the one the caller was checked on.
	rec := &Recorder{Store: st, Clock: clk.Now, CurrentID: func(string) string { return "mb2" }}
	q, err := queue.Open(t.TempDir(), captureAll{}, rec, queue.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	runQueue(t, q)
	svc := &Service{Domain: func() string { return "example.com" }, Sent: rec, Queue: q, FirstAttemptWait: 10 * time.Second, ReturnPath: tagged}
	// Scheduled, so that no attempt can start before the send is answered.
	at := clk.Now().Add(time.Hour)
	_, err = svc.Send(context.Background(), SendRequest{Mailbox: "bot", MailboxID: "mb1", FromAddress: "bot@example.com", Policy: defaultPolicy(),
		Args: protocol.SendArgs{To: []string{"x@remote.test"}, Subject: "s", Body: "b", SendAt: &at}})
	if err == nil || !strings.Contains(err.Error(), "mailbox was deleted") {
		t.Errorf("send from a deleted mailbox: %v, want it refused as deleted", err)
	}
	if l := q.List(); len(l) != 0 {
		t.Errorf("the deleted mailbox's message is queued: %+v", l[0])
	}
}
